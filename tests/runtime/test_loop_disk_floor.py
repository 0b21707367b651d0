"""The service loop below the disk floor (ADR 033), on a real disk: a ballast file takes the free
space under a floor set just below the real free space. Paused, the loop consumes, writes and
commits nothing new; lifted, it resumes by itself and handles every message exactly once."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from crawlstream import topics
from crawlstream.bus import Bus, Message, TopicPartition
from crawlstream.bus._kafka import KafkaBus
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.durable import MIB, DiskFloor
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer
from crawlstream.runtime import EventHandler, ServiceLoop
from tests.durable._ballast import Ballast, floor_mib

SOURCE = topics.URLS_DISCOVERED
PARTITIONS = 4  # the bus fixture's
COUNT = 60
WAIT_S = 10.0

pytestmark = pytest.mark.timeout(60)


class FileSink(EventHandler):
    """Writes each batch's url keys to a new real file in ``end_batch`` (what a sink does)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.pending: list[int] = []
        self.end_batches = 0
        self.assigned: list[TopicPartition] = []
        self.revoked: list[TopicPartition] = []
        self.lost: list[TopicPartition] = []

    def handle(self, event: Any, message: Message) -> None:
        self.pending.append(event.url_key)

    def end_batch(self) -> None:
        self.end_batches += 1
        if self.pending:
            self.out.mkdir(exist_ok=True)
            (self.out / f"batch-{self.end_batches:05d}.txt").write_text("\n".join(map(str, self.pending)))
            self.pending.clear()

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned.extend(partitions)

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.revoked.extend(partitions)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        self.lost.extend(partitions)

    def written(self) -> list[int]:
        files = sorted(self.out.glob("batch-*.txt")) if self.out.exists() else []
        return [int(line) for f in files for line in f.read_text().split()]


def _send(bus: Bus, codec: EventCodec, n: int, topic: str = SOURCE) -> None:
    producer = bus.producer()
    sender = EventProducer(producer, codec)
    for i in range(n):
        domain = f"site{i % 7}.example.com"
        sender.send(topic, DiscoveredUrl(url=f"https://{domain}/{i}", domain=domain, url_key=i, depth=0,
                                          discovered_at_ms=1_700_000_000_000, source="seed"))
    sender.flush()
    producer.close()


def _committed(bus: Bus, topic: str = SOURCE, group: str = "svc") -> dict[int, int | None]:
    consumer = bus.consumer(group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        consumer.close()


def _value(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name, {"service": "test"})


def test_below_the_floor_the_loop_pauses_then_resumes_and_handles_everything_once(
    bus: Bus, codec: EventCodec, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    floor = DiskFloor(data, floor_mib(data) * MIB)
    ballast = Ballast(data, floor.min_free_bytes // MIB)
    registry = CollectorRegistry()
    sink = FileSink(data / "out")
    loop = ServiceLoop(
        service="test", consumer=bus.consumer("svc"), topics=[SOURCE], codec=codec, handler=sink,
        dlq_producer=bus.producer(), batch_size=25, poll_timeout_s=0.2, registry=registry, disk_floor=floor,
    )
    ballast.lay()
    try:
        _send(bus, codec, COUNT)
        caplog.set_level(logging.INFO, logger="crawlstream.runtime._loop")
        started = time.monotonic()
        assert [loop.run_once() for _ in range(4)] == [0, 0, 0, 0]
        assert time.monotonic() - started >= 0.6, "a paused iteration waits out the poll timeout"
        assert loop.paused
        assert sink.end_batches == 0 and sink.written() == [] and not sink.out.exists()
        assert set(_committed(bus).values()) == {None}
        assert _value(registry, "crawlstream_disk_floor_paused") == 1
        assert _value(registry, "crawlstream_disk_floor_pauses_total") == 1
    finally:
        ballast.lift()
    deadline = time.monotonic() + WAIT_S
    while len(sink.written()) < COUNT:
        assert time.monotonic() < deadline, "the loop did not resume"
        loop.run_once()
    for _ in range(3):
        assert loop.run_once() == 0
    loop.close()
    assert sorted(sink.written()) == list(range(COUNT)), "every message once, none lost or repeated"
    ends = {p: end for p, end in enumerate(bus.end_offsets(SOURCE))}
    assert _committed(bus) == {p: end or None for p, end in ends.items()}
    assert _value(registry, "crawlstream_disk_floor_paused") == 0
    assert _value(registry, "crawlstream_disk_floor_pauses_total") == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pausing" in warnings[0] and str(data) in warnings[0]
    assert "MB free" in warnings[0] and f"the floor is {floor.min_free_bytes // MIB} MB" in warnings[0]
    resumed = [r.getMessage() for r in caplog.records if "resuming" in r.getMessage()]
    assert len(resumed) == 1 and caplog.records[-1].levelno <= logging.INFO


def test_a_pause_commits_what_was_finished_and_never_past_it(bus: Bus, codec: EventCodec, tmp_path: Path) -> None:
    """A commit deferred by ``commit_interval_s`` is made while paused; the probe poll's message
    is put back, so the commit stays at the batches that were handled."""
    data = tmp_path / "data"
    data.mkdir()
    floor = DiskFloor(data, floor_mib(data) * MIB, interval_s=0.0)
    ballast = Ballast(data, floor.min_free_bytes // MIB)
    sink = FileSink(data / "out")
    loop = ServiceLoop(
        service="test", consumer=bus.consumer("svc"), topics=[SOURCE], codec=codec, handler=sink,
        dlq_producer=bus.producer(), batch_size=10, poll_timeout_s=0.2, commit_interval_s=0.3, disk_floor=floor,
    )
    _send(bus, codec, COUNT)
    handled = loop.run_once()
    assert 0 < handled < COUNT
    ballast.lay()
    try:
        for _ in range(3):
            assert loop.run_once() == 0
        assert len(sink.written()) == handled, "nothing handled while paused"
        committed = _committed(bus)
        assert sum(offset or 0 for offset in committed.values()) == handled
    finally:
        ballast.lift()
    deadline = time.monotonic() + WAIT_S
    while len(sink.written()) < COUNT:
        assert time.monotonic() < deadline, "the loop did not resume"
        loop.run_once()
    loop.close()
    assert sorted(sink.written()) == list(range(COUNT))


@pytest.mark.kafka
def test_on_kafka_a_pause_longer_than_max_poll_interval_keeps_the_partitions(
    kafka_cluster: Any, codec: EventCodec, tmp_path: Path
) -> None:
    """librdkafka drops a member that has not polled for ``max.poll.interval.ms``: the paused loop's
    probe poll (one message, sought straight back) keeps it, and consumes nothing for the handler."""
    kafka = KafkaBus(
        kafka_cluster.bootstrap_servers, linger_ms=1, policy=TopicPolicy(partitions=PARTITIONS),
        extra_config={"consumer.session.timeout.ms": "6000", "consumer.max.poll.interval.ms": "6000"},
    )
    topic, group = f"disk-floor-{uuid.uuid4().hex[:8]}", f"disk-floor-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    data.mkdir()
    floor = floor_mib(data)
    ballast = Ballast(data, floor)
    sink = FileSink(data / "out")
    try:
        kafka.create_topics([topic], PARTITIONS)
        _send(kafka, codec, COUNT, topic)
        loop = ServiceLoop(
            service="test", consumer=kafka.consumer(group), topics=[topic], codec=codec, handler=sink,
            dlq_producer=kafka.producer(), batch_size=25, poll_timeout_s=0.2,
            disk_floor=DiskFloor(data, floor * MIB),
        )
        ballast.lay()
        try:
            deadline = time.monotonic() + 30
            while len(sink.assigned) < PARTITIONS:  # joined the group, paused
                assert time.monotonic() < deadline, "no assignment"
                assert loop.run_once() == 0
            paused_until = time.monotonic() + 9.0  # 1.5 x max.poll.interval.ms
            while time.monotonic() < paused_until:
                assert loop.run_once() == 0
            assert sink.written() == [] and sink.end_batches == 0
            assert sink.revoked == [] and sink.lost == [], "the member kept its partitions"
            assert set(_committed(kafka, topic, group).values()) == {None}
        finally:
            ballast.lift()
        deadline = time.monotonic() + 30
        while len(sink.written()) < COUNT:
            assert time.monotonic() < deadline, "the loop did not resume"
            loop.run_once()
        loop.close()
        assert sorted(sink.written()) == list(range(COUNT))
        assert len(sink.assigned) == PARTITIONS and sink.lost == []
        assert sum(v or 0 for v in _committed(kafka, topic, group).values()) == COUNT
    finally:
        kafka.close()
