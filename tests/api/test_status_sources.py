"""Where the status page's numbers come from (ADR 020): the embedded bus's files read while
the bus is open in this process, a real Kafka broker's admin API, the crawl's stats file,
the content store and the index manifest; and ``/v1/status`` through the app."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from crawlstream.bus import EmbeddedBus, KafkaBus, TopicPartition
from crawlstream.crawl import ERROR_OUTCOMES, CrawlStats, save_stats
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.events import FetchResult
from crawlstream.settings import load
from crawlstream.status import STORE_STATS_FILE, EmbeddedOffsets, StatusCollector, TopCounts, read_store_stats
from crawlstream.status._kafka_offsets import KafkaOffsets
from crawlstream.store import ContentStore


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fill(bus: Any, topic: str, per_partition: list[int]) -> None:
    producer = bus.producer()
    for partition, n in enumerate(per_partition):
        for i in range(n):
            producer.produce(topic, b"x" * (i % 7 + 1), partition=partition)
    producer.flush()
    producer.close()


def _consume_and_commit(bus: Any, group: str, topic: str, count: int) -> None:
    consumer = bus.consumer(group)
    consumer.subscribe([topic])
    got = 0
    for _ in range(200):
        got += len(consumer.consume(count - got, 0.2))
        if got >= count:
            break
    consumer.commit()
    consumer.close()


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[EmbeddedBus]:
    b = EmbeddedBus(tmp_path / "bus", default_partitions=4, fsync="never", segment_bytes=4096)
    yield b
    b.close()


def test_embedded_offsets_match_the_open_bus_without_taking_its_lock(bus: EmbeddedBus, tmp_path: Path) -> None:
    """Read while the bus is open (a crawl runs in another process): the same ends and commits."""
    bus.create_topics(["t.one"], 4)
    _fill(bus, "t.one", [0, 3, 250, 40])  # partition 2 rolls over several 4 KiB segments
    _consume_and_commit(bus, "crawlstream.g", "t.one", 100)
    reader = EmbeddedOffsets(tmp_path / "bus")
    assert reader.end_offsets("t.one") == bus.end_offsets("t.one") == [0, 3, 250, 40]
    committed = reader.committed("crawlstream.g")
    expected = bus.consumer("crawlstream.g").committed([TopicPartition("t.one", p) for p in range(4)])
    assert {TopicPartition("t.one", p): o for p, o in committed["t.one"].items()} == {
        tp: o for tp, o in expected.items() if o is not None
    }
    assert sum(committed["t.one"].values()) == 100
    _fill(bus, "t.one", [1, 0, 5, 0])  # the next read walks only what was appended
    assert reader.end_offsets("t.one") == bus.end_offsets("t.one") == [1, 3, 255, 40]
    assert reader.groups() == ["crawlstream.g"] and "t.one" in reader.topics()


def test_embedded_offsets_stop_before_a_record_still_being_written(bus: EmbeddedBus, tmp_path: Path) -> None:
    bus.create_topics(["t.torn"], 1)
    _fill(bus, "t.torn", [5])
    segment = max((tmp_path / "bus" / "topics" / "t.torn" / "0").glob("*.log"))
    with open(segment, "ab") as fh:  # a length prefix promising more bytes than the file has
        fh.write((500).to_bytes(4, "little") + b"\0" * 20)
    assert EmbeddedOffsets(tmp_path / "bus").end_offsets("t.torn") == [5]


def test_embedded_offsets_of_missing_or_damaged_files_are_none_not_errors(tmp_path: Path) -> None:
    reader = EmbeddedOffsets(tmp_path / "nothing")
    assert not reader.available() and reader.topics() == [] and reader.groups() == []
    assert reader.end_offsets("t") is None and reader.committed("g") == {}
    (tmp_path / "bus" / "topics" / "t").mkdir(parents=True)
    (tmp_path / "bus" / "topics" / "t" / "meta.json").write_text("{not json")
    (tmp_path / "bus" / "groups" / "g").mkdir(parents=True)
    (tmp_path / "bus" / "groups" / "g" / "offsets.json").write_text('["a list"]')
    reader = EmbeddedOffsets(tmp_path / "bus")
    assert reader.end_offsets("t") is None and reader.committed("g") == {}


def test_top_counts_are_exact_until_capacity_then_bounded() -> None:
    top = TopCounts(capacity=4)
    for key in "aaabbc":
        top.add(key)
    assert top.exact and top.top(2) == [("a", 3), ("b", 2)]
    rng = random.Random(7)
    truth: Counter[str] = Counter()
    top = TopCounts(capacity=16)
    for _ in range(20_000):  # a few heavy domains in a long tail of 5,000
        key = f"heavy{rng.randrange(5)}" if rng.random() < 0.3 else f"tail{rng.randrange(5000)}"
        truth[key] += 1
        top.add(key)
    assert not top.exact and len(top.counts) <= 32
    for key, count in top.counts.items():
        assert count - top.max_dropped <= truth[key] <= count  # the documented bound
    assert {k for k, _ in top.top(5)} == {f"heavy{i}" for i in range(5)}
    assert TopCounts.from_json(json.loads(json.dumps(top.to_json()))) == top


def _result(domain: str, status: int, outcome: str = "ok") -> FetchResult:
    return FetchResult(
        url=f"http://{domain}/", url_key=1, domain=domain, depth=0, status=status, outcome=outcome,
        fetched_at_ms=0, elapsed_ms=1, attempt=1, body_size_bytes=100 if status else 0,
    )  # fmt: skip


def test_collector_reads_crawl_stats_bus_lag_and_rates(bus: EmbeddedBus, tmp_path: Path) -> None:
    stats = CrawlStats()
    for i, (domain, status, outcome) in enumerate(
        [("a.com", 200, "ok"), ("a.com", 503, "http_error"), ("b.org", 0, "timeout"), ("a.com", 404, "http_error")]
    ):
        stats.add(_result(domain, status, outcome), 0, i)
    save_stats(tmp_path / "crawl" / "stats.json", stats)
    bus.create_topics(["urls.frontier", "fetch.requests", "fetch.results", "content.stored", "fetch.results.dlq"], 4)
    _fill(bus, "fetch.results", [2, 0, 0, 0])
    _fill(bus, "urls.frontier", [10, 10, 0, 0])
    _fill(bus, "fetch.requests", [5, 0, 2, 0])
    _fill(bus, "content.stored", [1, 1, 1, 0])
    _fill(bus, "fetch.results.dlq", [0, 2, 0, 0])
    _consume_and_commit(bus, "crawlstream.scheduler", "urls.frontier", 8)
    clock = _Clock()
    collector = StatusCollector(tmp_path, bus=EmbeddedOffsets(tmp_path / "bus"), bus_backend="embedded", clock=clock)
    first = collector.collect()
    assert first["crawl"] | {"stats_age_s": None} == {
        "pages": 3, "results": 4, "pages_per_s": None, "results_per_s": None, "stored": 3, "queued_urls": 13,
        "body_bytes": 300, "stats_age_s": None,
    }  # fmt: skip
    assert first["errors"] == {
        "by_kind": {"timeout": 1, "http_4xx": 1, "http_5xx": 1},
        "dlq": {"fetch.results.dlq": 2},
    }
    assert set(first["errors"]["by_kind"]) - {"http_4xx", "http_5xx"} <= ERROR_OUTCOMES
    assert first["top_domains"] == {"exact": True, "max_error": 0, "items": [
        {"domain": "a.com", "pages": 3}]}  # fmt: skip
    (scheduler,) = first["services"]
    assert scheduler["group"] == "crawlstream.scheduler" and (scheduler["lag"], scheduler["consumed"]) == (12, 8)
    assert collector.collect() is first  # within min_interval_s: the same answer
    clock.now += 2
    _consume_and_commit(bus, "crawlstream.scheduler", "urls.frontier", 12)
    second = collector.collect()
    (scheduler,) = second["services"]
    assert (scheduler["lag"], scheduler["rate_per_s"]) == (0, 6.0)  # 12 more committed in 2 s
    assert second["crawl"]["pages_per_s"] == second["crawl"]["results_per_s"] == 0.0
    (tmp_path / "crawl" / "stats.json").unlink()  # distributed services: fetch.results counts instead
    clock.now += 2
    assert collector.collect()["crawl"] | {"stats_age_s": None} == {
        "pages": None, "results": 2, "pages_per_s": None, "results_per_s": None, "stored": 3, "queued_urls": 13,
        "body_bytes": None, "stats_age_s": None,
    }  # fmt: skip
    assert second["unavailable"] == {"store": "not found", "index": "not found"}


def test_collector_of_an_empty_or_damaged_data_dir_answers_with_nones(tmp_path: Path) -> None:
    collector = StatusCollector(tmp_path, bus=EmbeddedOffsets(tmp_path / "bus"), bus_backend="embedded")
    doc = collector.collect()
    assert doc["crawl"]["pages"] is None and doc["services"] is None and doc["store"] is None
    assert set(doc["unavailable"]) >= {"crawl", "bus", "store", "index"}
    (tmp_path / "crawl").mkdir()
    (tmp_path / "crawl" / "stats.json").write_text('{"pages": "many"}')
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "manifest.json").write_text("{}")
    doc = StatusCollector(tmp_path, bus=None, bus_backend=None).collect()
    assert doc["crawl"] is None and "ValueError" in doc["unavailable"]["crawl"]
    assert doc["index"] is None and "KeyError" in doc["unavailable"]["index"]


def _fill_store(store: ContentStore, pages: int) -> None:
    for i in range(pages):
        store.put(f"http://a{i % 3}.com/{i}", b"<html>" + b"same text " * 200 + b"</html>")


def test_collector_uses_the_stores_own_stats_when_this_process_holds_it(tmp_path: Path) -> None:
    clock = _Clock()
    with ContentStore(tmp_path / "store") as store:
        _fill_store(store, 20)
        doc = StatusCollector(tmp_path, bus=None, bus_backend=None, store=store, wall_clock=clock).collect()
    st = doc["store"]
    assert st["source"] == "store" and st["urls"] == 20 and st["raw_bytes"] == 20 * 2013
    assert st["ratio"] == pytest.approx(st["raw_bytes"] / st["stored_bytes"], abs=1e-3) and st["ratio"] > 1
    assert st["stats_age_s"] == 0.0
    # Saved as read: a later API that only sizes the files (the store has a writer elsewhere)
    # shows them, with their age, beside the files' sizes now.
    assert read_store_stats(tmp_path) == {k: v for k, v in st.items() if k not in ("source", "stats_age_s")} | {
        "saved_at_ms": 1_000_000
    }
    clock.now += 2566
    files = StatusCollector(tmp_path, bus=None, bus_backend=None, wall_clock=clock).collect()["store"]
    assert files["source"] == "files" and files["stored_bytes"] > 0
    assert (files["urls"], files["raw_bytes"], files["ratio"]) == (20, 20 * 2013, st["ratio"])
    assert files["quarantined_urls"] == 0 and files["stats_age_s"] == 2566.0


def test_without_saved_store_stats_only_the_files_are_sized(tmp_path: Path) -> None:
    with ContentStore(tmp_path / "store") as store:
        _fill_store(store, 3)
    files = StatusCollector(tmp_path, bus=None, bus_backend=None).collect()
    st = files["store"]
    assert st["source"] == "files" and st["stored_bytes"] > 0 and "hot" in st["bytes_by_tier"]
    assert st["urls"] is st["raw_bytes"] is st["ratio"] is st["stats_age_s"] is None
    assert "store" not in files["unavailable"]
    (tmp_path / STORE_STATS_FILE).parent.mkdir()
    (tmp_path / STORE_STATS_FILE).write_text('{"urls": 3, "saved_at')  # torn: as if none
    damaged = StatusCollector(tmp_path, bus=None, bus_backend=None).collect()["store"]
    assert damaged == st | {"stored_bytes": damaged["stored_bytes"]}


def test_store_stats_and_maintain_save_what_they_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crawlstream.cli import main

    with ContentStore(tmp_path / "store") as store:
        _fill_store(store, 5)
    assert main(["store", "stats", "--data-dir", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = read_store_stats(tmp_path)
    assert saved is not None and saved["urls"] == printed["urls"] == 5 and saved["ratio"] == printed["ratio"]
    assert abs(saved["saved_at_ms"] / 1000 - time.time()) < 60
    assert main(["store", "maintain", "--now", "--data-dir", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    saved = read_store_stats(tmp_path)
    assert saved is not None and saved["stored_bytes"] == printed["stored_bytes"] and saved["urls"] == 5


_LOADING = (confluent_kafka.KafkaError.COORDINATOR_LOAD_IN_PROGRESS, confluent_kafka.KafkaError.NOT_COORDINATOR,
            confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE)


@pytest.mark.kafka
def test_kafka_offsets_give_group_lag_from_the_broker(kafka_cluster: LocalKafka) -> None:
    bus = KafkaBus(kafka_cluster.bootstrap_servers)
    topic, group = "status-lag-test", "crawlstream.status-test"
    bus.create_topics([topic], 2)
    _fill(bus, topic, [9, 3])
    reader = KafkaOffsets({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    reader.topics()
    assert reader.committed(group) == {}  # a group that never committed (its coordinator not loaded yet)
    # Commit as a member would (explicit offsets), without the seconds a group join takes.
    member = confluent_kafka.Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": group})
    commits = [confluent_kafka.TopicPartition(topic, 0, 7), confluent_kafka.TopicPartition(topic, 1, 3)]
    deadline = time.monotonic() + 30
    while True:  # a fresh broker answers "coordinator load in progress" for a few seconds
        try:
            member.commit(offsets=commits, asynchronous=False)
            break
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]  # COORDINATOR_LOAD_IN_PROGRESS is not flagged retriable by librdkafka
            assert (err.retriable() or err.code() in _LOADING) and time.monotonic() < deadline, exc
            time.sleep(0.2)
    member.close()
    assert reader.end_offsets(topic) == [9, 3]
    deadline = time.monotonic() + 10
    while (found_commits := reader.committed(group)) == {} and time.monotonic() < deadline:
        time.sleep(0.2)  # {} while the coordinator still loads: "unavailable", never an error
    assert found_commits == {topic: {0: 7, 1: 3}}
    assert group in reader.groups()
    doc = StatusCollector(Path("/nonexistent"), bus=reader, bus_backend="kafka").collect()
    (found,) = [s for s in doc["services"] if s["group"] == group]
    assert (found["lag"], found["consumed"]) == (2, 10)
    reader.close()
    from_settings = StatusCollector.from_settings(
        load({"KAFKA_BOOTSTRAP_SERVERS": kafka_cluster.bootstrap_servers, "CRAWLSTREAM_DATA_DIR": "/nonexistent"})
    )
    assert from_settings.bus_backend == "kafka"
    (found,) = [s for s in from_settings.collect()["services"] if s["group"] == group]
    assert found["lag"] == 2
    from_settings.close()
    bus.close()
    down = KafkaOffsets({"bootstrap.servers": "127.0.0.1:1"}, timeout_s=0.5)
    assert down.topics() == [] and down.end_offsets(topic) is None and down.groups() == []
    down.close()


def test_embedded_offsets_read_a_shared_logs_published_head(tmp_path: Path) -> None:
    """A log written by several processes publishes its end in ``head``; a torn head is ignored."""
    import struct
    import zlib

    part = tmp_path / "bus" / "topics" / "t" / "0"
    part.mkdir(parents=True)
    (part.parent / "meta.json").write_text('{"partitions": 1}')
    body = struct.pack("<qQqq", 0, 0, 42, 0)
    (part / "head").write_bytes(body + zlib.crc32(body).to_bytes(4, "little"))
    assert EmbeddedOffsets(tmp_path / "bus").end_offsets("t") == [42]
    (part / "head").write_bytes(body + b"\0\0\0\0")  # crc mismatch: fall back to the segments (none)
    assert EmbeddedOffsets(tmp_path / "bus").end_offsets("t") == [0]


def test_embedded_offsets_merge_the_member_files_of_a_multi_process_group(tmp_path: Path) -> None:
    """Each member process commits its partitions to its own file; the newest file wins a partition."""
    group = tmp_path / "bus" / "groups" / "crawlstream.fetcher"
    group.mkdir(parents=True)
    old = group / "offsets.json"  # a single-process run before
    old.write_text('{"fetch.requests": {"0": 3, "1": 4, "2": 5}}')
    os.utime(old, ns=(1_000_000_000, 1_000_000_000))
    (group / "offsets.0-of-2.json").write_text('{"fetch.requests": {"0": 10, "2": 12}}')
    (group / "offsets.1-of-2.json").write_text('{"fetch.requests": {"1": 11}}')
    reader = EmbeddedOffsets(tmp_path / "bus")
    assert reader.groups() == ["crawlstream.fetcher"]
    assert reader.committed("crawlstream.fetcher") == {"fetch.requests": {0: 10, 1: 11, 2: 12}}
