"""`crawlstream seed`: seed URLs onto urls.discovered of the configured bus (here the embedded log;
on Kafka, tests/e2e/test_kafka_crawl.py starts its crawls with it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus
from crawlstream.cli import main
from crawlstream.events import DiscoveredUrl, EventCodec
from crawlstream.settings import load
from crawlstream.topics import URLS_DISCOVERED
from crawlstream.urls import partition_for


@pytest.fixture
def data_dir(embedded_data_dir: Path) -> Path:
    return embedded_data_dir


def read_discovered(data_dir: Path) -> list[tuple[int, DiscoveredUrl]]:
    codec = EventCodec.from_settings(load({"CRAWLSTREAM_DATA_DIR": str(data_dir)}))
    with EmbeddedBus(data_dir / "bus") as bus:
        consumer = bus.consumer("test-reader")
        consumer.subscribe([URLS_DISCOVERED])
        out = []
        while batch := consumer.consume(1000, 0.5):
            out.extend((m.partition, codec.decode(m.value, DiscoveredUrl)) for m in batch)
        consumer.close()
    return out


def test_seed_sends_each_seed_url_once_as_a_depth_0_seed_in_its_domains_partition(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# a seed list\nhttp://Example.com/a\n\nhttp://www.example.org/\n")
    assert main(["seed", "--seeds", str(seeds), "http://example.com/a"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["seeded"] == 2
    assert report["outcomes"] == {"sent": 2, "duplicate": 1, "invalid": 0}
    assert report["skipped"] == {"blank": 1, "comment": 1}
    sent = read_discovered(data_dir)
    assert sorted(e.url for _, e in sent) == ["http://example.com/a", "http://www.example.org/"]
    assert {(e.depth, e.source) for _, e in sent} == {(0, "seed")}
    with EmbeddedBus(data_dir / "bus") as bus:
        partitions = bus.partition_count(URLS_DISCOVERED)
    assert all(p == partition_for(e.domain, partitions) for p, e in sent)


def test_seed_without_a_valid_url_is_a_usage_error(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only_comments = tmp_path / "empty.txt"
    only_comments.write_text("# nothing here\n")
    assert main(["seed", "--seeds", str(only_comments)]) == 2
    assert "named no valid URL" in capsys.readouterr().err
    assert main(["seed", "--seeds", str(tmp_path / "missing.txt")]) == 2
    assert "neither a URL" in capsys.readouterr().err
    assert main(["seed"]) == 2
    assert "needs inputs" in capsys.readouterr().err


def test_a_crawl_whose_every_fetch_the_guard_refused_says_which_flag_allows_it(tmp_path: Path) -> None:
    """Loopback seeds without --allow-private-networks: 0 pages, and the summary says why and
    what to do (on stderr and in the JSON); the placeholder User-Agent draws a warning (in the log file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env |= {
        "CRAWLSTREAM_DATA_DIR": str(tmp_path),
        "CRAWLSTREAM_BUS_PARTITIONS": "2",
        "CRAWLSTREAM_CRAWL_CHECK_INTERVAL_S": "0.2",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawlstream",
            "run",
            "--exit-when-done",
            "--seeds",
            "http://127.0.0.1:9/",
            "http://localhost:9/a",
            "http://10.0.0.1/",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["pages"] == 0 and summary["by_outcome"] == {"blocked_private": 3}
    assert "--allow-private-networks" in summary["hints"][0]
    assert "--allow-private-networks" in result.stderr
    # log lines go to the data dir's log file (the terminal keeps the progress display)
    assert "placeholder contact" in (tmp_path / "logs" / "crawlstream.log").read_text()
