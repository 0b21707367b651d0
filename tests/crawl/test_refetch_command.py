"""`crawlstream refetch`: URLs past dedupe onto urls.frontier, marked refetch (ADR 022), on the
embedded log and on a real Kafka broker; invalid lines counted by reason, bad files refused."""

from __future__ import annotations

import gzip
import io
import json
import sys
import uuid
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus
from crawlstream.bus._kafka import KafkaBus
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.cli import main
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer, LocalSchemaIds
from crawlstream.politeness import REFETCH_SOURCE, read_refetch_urls, send_refetch
from crawlstream.settings import load
from crawlstream.topics import URLS_FRONTIER
from crawlstream.urls import partition_for


@pytest.fixture
def data_dir(embedded_data_dir: Path) -> Path:
    return embedded_data_dir


def _frontier(data_dir: Path) -> list[tuple[int, DiscoveredUrl]]:
    codec = EventCodec.from_settings(load({"CRAWLSTREAM_DATA_DIR": str(data_dir)}))
    with EmbeddedBus(data_dir / "bus") as bus:
        consumer = bus.consumer("test-reader")
        consumer.subscribe([URLS_FRONTIER])
        out = []
        while batch := consumer.consume(1000, 0.5):
            out.extend((m.partition, codec.decode(m.value, DiscoveredUrl)) for m in batch)
        consumer.close()
        partitions = bus.partition_count(URLS_FRONTIER)
    assert all(p == partition_for(e.domain, partitions) for p, e in out)
    return out


def test_refetch_sends_urls_from_arguments_gzip_files_and_stdin_to_the_frontier_once_each(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = tmp_path / "urls.txt.gz"
    with gzip.open(listed, "wb") as fh:
        fh.write(b"# damaged pages\nhttp://A.example/x\n\nftp://files.example/\nhttp://b.example/\xff\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"http://c.example/\nhttp://a.example/x\n")))
    assert main(["refetch", "http://b.example/y#frag", str(listed), "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "sent": 3,
        "quarantined": 0,
        "lines": 6,
        "urls": 3,
        "duplicates": 1,
        "invalid": {"scheme": 1, "utf8": 1},
    }
    sent = _frontier(data_dir)
    assert [e.url for _, e in sent] == ["http://b.example/y", "http://a.example/x", "http://c.example/"]
    assert {(e.source, e.depth) for _, e in sent} == {(REFETCH_SOURCE, 0)}


def test_refetch_without_a_valid_url_or_with_a_bad_file_sends_nothing(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["refetch", "ftp://x.example/"]) == 2
    assert "no valid URL" in capsys.readouterr().err
    damaged = tmp_path / "cut.gz"
    damaged.write_bytes(gzip.compress(b"http://a.example/\n" * 1000)[:-30])
    assert main(["refetch", "http://ok.example/", str(damaged)]) == 2
    assert "gzip stream is damaged" in capsys.readouterr().err
    assert main(["refetch", str(tmp_path / "missing.txt")]) == 2
    assert "neither a URL" in capsys.readouterr().err
    assert main(["refetch"]) == 2
    assert not (data_dir / "bus").exists()


@pytest.mark.kafka
def test_refetch_reaches_the_frontier_on_a_real_kafka_broker(kafka_cluster: object) -> None:
    marker = uuid.uuid4().hex[:8]
    batch = read_refetch_urls([f"http://d{i}.{marker}.example/p" for i in range(20)])
    codec = EventCodec(LocalSchemaIds.bundled())
    kafka = KafkaBus(kafka_cluster.bootstrap_servers, linger_ms=5, policy=TopicPolicy(partitions=4))  # type: ignore[attr-defined]
    try:
        assert send_refetch(EventProducer(kafka.producer(), codec), batch.urls, None) == 20
        partitions = kafka.partition_count(URLS_FRONTIER)
        consumer = kafka.consumer(f"g-{marker}")
        consumer.subscribe([URLS_FRONTIER])
        got: list[tuple[int, DiscoveredUrl]] = []
        for _ in range(60):
            for m in consumer.consume(5000, 1.0):
                event = codec.decode(m.value, DiscoveredUrl)
                if marker in event.url:
                    got.append((m.partition, event))
            if len(got) >= 20:
                break
        consumer.close()
    finally:
        kafka.close()
    assert sorted(e.url for _, e in got) == sorted(batch.urls)
    assert all(e.source == REFETCH_SOURCE and p == partition_for(e.domain, partitions) for p, e in got)
