"""Bulk seeding (``crawlstream seed`` / ``SeedIntake``): real URL lists from ../shared/data with
garbage lines, gzip and plain files, stdin, the progress display, the precompiled Avro values,
and a real Kafka broker. What reached the bus is read back and compared line by line."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus
from crawlstream.bus._kafka import KafkaBus
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.cli import main
from crawlstream.crawl import SeedEncoder, SeedIntake, SeedProgress, SeedReport, open_seed_sources
from crawlstream.crawl._seeds import raw_form_records
from crawlstream.errors import InvalidUrl
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer, LocalSchemaIds, UrlRecord
from crawlstream.settings import load
from crawlstream.topics import URLS_DISCOVERED, URLS_RECORDS
from crawlstream.urls import canonicalize, partition_for, url_key

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "urls"

# (line, reason it is invalid): each a different way a real seed list goes wrong.
GARBAGE: list[tuple[bytes, str]] = [
    (b"\xff\xfe\x00 not utf-8 \x80\x81", "encoding"),
    (b"ftp://example.com/file.txt", "scheme"),
    (b"just some words", "scheme"),
    (b"javascript:alert(1)", "scheme"),
    (b"http://exa mple.com/", "host"),
    (b"http://example.com:99999/", "port"),
    (b"http://xn--/", "idna"),
    (b"http://" + b"a" * 300 + b".com/", "host"),
    (b"http://example.com/" + b"a" * 9000, "length"),  # canonicalize refuses it
    (b"http://example.com/" + b"b" * 100_000, "length"),  # longer than a line may be: never held whole
]


def real_lines(n: int) -> list[str]:
    """``n`` real URLs: reddit-webtext links, then the kasztp list (with its own oddities)."""
    out: list[str] = []
    with gzip.open(SHARED / "reddit-webtext" / "RS_v2_2008-03.urk.json-00.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)["u"])
            if len(out) >= n // 2:
                break
    with gzip.open(SHARED / "ada-url-various-datasets" / "kasztp.txt.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            out.append(line.strip())
            if len(out) >= n:
                break
    return out


def expected_outcomes(lines: list[bytes]) -> tuple[dict[str, tuple[str, int]], Counter[str], int, int]:
    """(canonical URL -> (domain, key) of every distinct valid line, invalid by reason,
    duplicates, raw forms: first lines of a URL not written canonically)."""
    urls: dict[str, tuple[str, int]] = {}
    invalid: Counter[str] = Counter()
    duplicates = raw_forms = 0
    for raw in lines:
        text = raw.strip()
        if not text or text.startswith(b"#"):
            continue
        try:
            canon = canonicalize(text.decode("utf-8"))
        except UnicodeDecodeError:
            invalid["encoding"] += 1
            continue
        except InvalidUrl as exc:
            invalid[exc.reason] += 1
            continue
        if canon.url in urls:
            duplicates += 1
            continue
        urls[canon.url] = (canon.domain, url_key(canon))
        raw_forms += canon.url != text.decode("utf-8")
    return urls, invalid, duplicates, raw_forms


@pytest.fixture
def data_dir(embedded_data_dir: Path) -> Path:
    return embedded_data_dir


def read_topic(data_dir: Path, topic: str) -> list[tuple[int, bytes | None, bytes]]:
    with EmbeddedBus(data_dir / "bus") as bus:
        consumer = bus.consumer(f"test-reader-{topic}")
        consumer.subscribe([topic])
        out: list[tuple[int, bytes | None, bytes]] = []
        while batch := consumer.consume(5000, 0.5):
            out.extend((m.partition, m.key, m.value) for m in batch)
        consumer.close()
    return out


def test_a_gzip_seed_file_of_real_urls_with_garbage_reaches_the_bus_exactly(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = [u.encode("utf-8") for u in real_lines(6000)]
    lines = [b"# a seed list, exported", b"", b"   ", *real[:3000]]
    lines += [g for g, _ in GARBAGE] + real[3000:] + real[:500]  # 500 repeats at the end
    seeds = tmp_path / "seeds.txt.gz"
    with gzip.open(seeds, "wb") as fh:
        fh.write(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\n")  # BOM and CRLF, as exported on Windows
    urls, invalid, duplicates, raw_forms = expected_outcomes(lines)
    for _, reason in GARBAGE:
        assert invalid[reason] > 0  # each kind of garbage was really in the file

    assert main(["seed", str(seeds), "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    assert report["outcomes"] == {"sent": len(urls), "duplicate": duplicates, "invalid": sum(invalid.values())}
    assert report["invalid_by_reason"] == dict(invalid)
    assert report["skipped"] == {"blank": 2, "comment": 1}
    assert report["lines"] == len(urls) + duplicates + sum(invalid.values())
    assert report["raw_forms"] == raw_forms
    settings = load({"CRAWLSTREAM_DATA_DIR": str(data_dir)})
    codec = EventCodec.from_settings(settings)
    sent = read_topic(data_dir, URLS_DISCOVERED)
    events = [(p, k, codec.decode(v, DiscoveredUrl)) for p, k, v in sent]
    assert len(events) == len(urls)  # every distinct valid URL once, nothing else
    with EmbeddedBus(data_dir / "bus") as bus:
        partitions = bus.partition_count(URLS_DISCOVERED)
    firsts: dict[str, str] = {}
    for raw in lines:
        try:
            firsts.setdefault(canonicalize(raw.strip().decode()).url, raw.strip().decode())
        except (InvalidUrl, UnicodeDecodeError):
            continue
    for partition, key, event in events:
        assert urls[event.url] == (event.domain, event.url_key)
        assert event.raw_url == (None if firsts[event.url] == event.url else firsts[event.url])
        assert (event.depth, event.source, event.source_url) == (0, "seed", None)
        assert event.dataset_id == settings.crawl.dataset_id
        assert key == event.domain.encode() and partition == partition_for(event.domain, partitions)
    assert len({e.discovered_at_ms for _, _, e in events}) == 1
    records = [codec.decode(v, UrlRecord) for _, _, v in read_topic(data_dir, URLS_RECORDS)]
    assert len(records) == raw_forms
    # The same rows send_seeds records for a seed not written canonically (ADR 024's raw forms).
    expected_records = raw_form_records(firsts.values(), events[0][2].discovered_at_ms)
    assert sorted(map(repr, records)) == sorted(map(repr, expected_records))


def test_stdin_and_plain_files_stream_with_progress_lines_when_not_a_terminal(tmp_path: Path) -> None:
    real = real_lines(3000)
    plain = tmp_path / "more.txt"
    plain.write_text("\n".join(real[1500:]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env |= {"CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"), "CRAWLSTREAM_BUS_FSYNC": "never"}
    result = subprocess.run(
        [sys.executable, "-m", "crawlstream", "seed", "-", str(plain), "--seeds", "http://Example.COM/seed"],
        input="\n".join(real[:1500]).encode(),
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.decode().strip().splitlines()[-1])
    # The kasztp list starts with a byte order mark: at the start of an input it is not part of the URL.
    assert real[1500].startswith("\ufeff")
    expected_lines = [b"http://Example.COM/seed", *(u.encode() for u in real[:1500]), real[1500][1:].encode()]
    urls, invalid, duplicates, _ = expected_outcomes(expected_lines + [u.encode() for u in real[1501:]])
    assert report["outcomes"] == {"sent": len(urls), "duplicate": duplicates, "invalid": sum(invalid.values())}
    assert report["inputs"] == 3
    progress = [line for line in result.stderr.decode().splitlines() if line.startswith("seed ")]
    assert progress and "\r" not in result.stderr.decode()  # plain lines, not a redrawn one
    assert f"{report['lines']:,} URLs" in progress[-1]
    assert len(read_topic(tmp_path / "data", URLS_DISCOVERED)) == len(urls)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal_with_an_eta_from_the_bytes_read() -> None:
    now = [100.0]
    tty = _Terminal()
    progress = SeedProgress(tty, total_bytes=1000, clock=lambda: now[0])
    report = SeedReport(lines=50_000, sent=49_000, duplicate=900)
    report.invalid_by_reason["host"] = 100
    now[0] = 110.0
    progress.update(report, 250)
    assert tty.getvalue().startswith("\r\x1b[K")
    assert "50,000 URLs (5,000/s)" in tty.getvalue() and "25% ETA 0:00:30" in tty.getvalue()
    assert "invalid 100" in tty.getvalue()
    progress.update(report, 260)  # within the interval: nothing drawn
    assert tty.getvalue().count("\r") == 1
    progress.finish(report, 1000)
    assert tty.getvalue().endswith("100% ETA 0:00:00\n")
    plain = io.StringIO()
    SeedProgress(plain, None, clock=lambda: now[0]).finish(report, 0)
    assert "\r" not in plain.getvalue() and "ETA" not in plain.getvalue()


@pytest.mark.parametrize("dataset_id", [None, 7])
def test_precompiled_seed_values_are_the_codecs_bytes(dataset_id: int | None) -> None:
    codec = EventCodec(LocalSchemaIds.bundled())
    encoder = SeedEncoder(codec, 1_764_000_000_123, dataset_id)
    assert encoder.precompiled
    checked = 0
    for text in [*real_lines(4000), "http://a.b/", "http://xn--bcher-kva.example/\u00e9", "http://x.com/" + "p" * 5000]:
        try:
            canon = canonicalize(text)
        except InvalidUrl:
            continue
        raw_url = None if canon.url == text else text
        event = DiscoveredUrl(
            canon.url, canon.domain, url_key(canon), 0, 1_764_000_000_123, "seed", None, dataset_id, raw_url=raw_url
        )
        assert encoder.encode(canon.url, canon.domain, event.url_key, raw_url) == codec.encode(event, URLS_DISCOVERED)
        checked += 1
    assert checked > 3500


def test_a_missing_input_fails_before_anything_is_sent(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="neither a URL"):
        open_seed_sources(["http://a.example/", str(tmp_path / "missing.txt.gz")])
    assert not (tmp_path / "data").exists()


@pytest.mark.kafka
def test_bulk_seeding_onto_a_real_kafka_broker(kafka_cluster: object, tmp_path: Path) -> None:
    real = real_lines(4000)
    seeds = tmp_path / "seeds.txt.gz"
    with gzip.open(seeds, "wt", encoding="utf-8") as fh:
        fh.write("\n".join([*real, "not a url", "ftp://x.org/"]) + "\n")
    urls, invalid, duplicates, _ = expected_outcomes([*(u.encode() for u in real), b"not a url", b"ftp://x.org/"])
    topic = f"seedtest-{uuid.uuid4().hex[:8]}"
    codec = EventCodec(LocalSchemaIds.bundled())
    kafka = KafkaBus(kafka_cluster.bootstrap_servers, linger_ms=5, policy=TopicPolicy(partitions=4))  # type: ignore[attr-defined]
    try:
        out = EventProducer(kafka.producer(), codec)
        report = SeedIntake(out, codec, None, topic=topic, flush_every=1000).run(open_seed_sources([str(seeds)]))
        assert (report.sent, report.duplicate, dict(report.invalid_by_reason)) == (len(urls), duplicates, dict(invalid))
        consumer = kafka.consumer(f"g-{topic}")
        consumer.subscribe([topic])
        got: list[DiscoveredUrl] = []
        for _ in range(60):
            got.extend(codec.decode(m.value, DiscoveredUrl) for m in consumer.consume(5000, 1.0))
            if len(got) >= len(urls):
                break
        consumer.close()
    finally:
        kafka.close()
    assert sorted(e.url for e in got) == sorted(urls)
    assert all(urls[e.url] == (e.domain, e.url_key) for e in got)


def test_a_truncated_gzip_input_sends_what_it_holds_and_counts_the_rest_as_one_bad_input(tmp_path: Path) -> None:
    real = real_lines(20_000)
    whole = gzip.compress(("\n".join(real) + "\n").encode(), compresslevel=1)
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])  # a download that stopped
    plain = tmp_path / "after.txt"
    plain.write_text("http://after.example/\n")
    codec = EventCodec(LocalSchemaIds.bundled())
    with EmbeddedBus(tmp_path / "bus", default_partitions=4, fsync="never") as bus:
        intake = SeedIntake(EventProducer(bus.producer(), codec), codec, None)
        report = intake.run(open_seed_sources([str(cut), str(plain)]))
    assert report.invalid_by_reason["unreadable_input"] == 1
    assert 5000 < report.sent < len(real)  # the readable part, then the next input
    assert report.lines == report.sent + report.duplicate + report.invalid
    with EmbeddedBus(tmp_path / "bus") as bus:
        consumer = bus.consumer("reader")
        consumer.subscribe([URLS_DISCOVERED])
        urls: list[str] = []
        while batch := consumer.consume(5000, 0.3):
            urls.extend(codec.decode(m.value, DiscoveredUrl).url for m in batch)
        consumer.close()
    assert len(urls) == report.sent and "http://after.example/" in urls
