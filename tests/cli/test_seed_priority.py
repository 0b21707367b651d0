"""``crawlstream seed --priority N`` and the per-line form ``URL N``: what reaches urls.discovered,
read back from the embedded bus and decoded with the codec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus
from crawlstream.cli import main
from crawlstream.events import DiscoveredUrl, EventCodec
from crawlstream.settings import load
from crawlstream.topics import URLS_DISCOVERED


@pytest.fixture
def data_dir(embedded_data_dir: Path) -> Path:
    return embedded_data_dir


def _sent(data_dir: Path) -> dict[str, DiscoveredUrl]:
    codec = EventCodec.from_settings(load({"CRAWLSTREAM_DATA_DIR": str(data_dir)}))
    out: dict[str, DiscoveredUrl] = {}
    with EmbeddedBus(data_dir / "bus") as bus:
        consumer = bus.consumer("test-reader")
        consumer.subscribe([URLS_DISCOVERED])
        while batch := consumer.consume(5000, 0.5):
            for m in batch:
                event = codec.decode(m.value, DiscoveredUrl)
                out[event.url] = event
        consumer.close()
    return out


LINES = [
    "http://a.example/1",
    "http://a.example/2 9",  # the line's own priority wins over --priority
    "http://b.example/   0",  # 0: normal
    "http://c.example/x\t+3",
    "HTTP://D.example/y  12",  # not canonical as written: the raw form is the URL without the number
    "http://e.example/some page",  # no number at the end: the whole line is the URL, as before
    "http://f.example/ 2147483648",  # beyond an Avro int: refused, counted
    "http://g.example/ -4",  # negative: refused, counted
    "http://h.example/z\u20034",  # any whitespace separates the number (an em space here), as in `run --seeds`
]


def test_priority_for_every_seed_and_per_line(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(LINES) + "\n")
    assert main(["seed", str(seeds), "--priority", "7", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["outcomes"] == {"sent": 7, "duplicate": 0, "invalid": 2}
    assert report["invalid_by_reason"] == {"priority": 2}
    sent = _sent(data_dir)
    assert {url: e.priority for url, e in sent.items()} == {
        "http://a.example/1": 7,
        "http://a.example/2": 9,
        "http://b.example/": None,
        "http://c.example/x": 3,
        "http://d.example/y": 12,
        "http://e.example/some%20page": 7,
        "http://h.example/z": 4,
    }
    assert sent["http://d.example/y"].raw_url == "HTTP://D.example/y"
    assert {e.source for e in sent.values()} == {"seed"}


def test_without_the_option_seeds_are_normal_unless_their_line_says(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["seed", "http://a.example/", "http://b.example/ 5", "--no-progress"]) == 0
    capsys.readouterr()
    sent = _sent(data_dir)
    assert {url: e.priority for url, e in sent.items()} == {"http://a.example/": None, "http://b.example/": 5}


@pytest.mark.parametrize("value", ["-1", "2147483648", "high", "1.5"])
def test_a_bad_priority_is_refused_before_anything_is_sent(
    data_dir: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["seed", "http://a.example/", "--priority", value])
    assert exc.value.code == 2
    assert "0..2147483647" in capsys.readouterr().err
    assert not (data_dir / "bus").exists()
