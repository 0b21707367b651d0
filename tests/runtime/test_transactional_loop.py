"""The service loop's opt-in transactional commit (ADR 038), on the embedded log with a recording
transaction: offsets go to the transaction, not to the group; ``after_commit`` follows each
commit; a revoke commits before the handler persists; a loss with a transaction open aborts and
raises, so the host rebuilds the service from its last commit. (On a real broker:
tests/services/test_deduper_exactly_once.py and tests/bus/test_kafka_transactions.py.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from crawlstream import topics
from crawlstream.bus import Bus, Consumer, Message, TopicPartition, TransactionalProducer
from crawlstream.errors import BusUnavailable
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer
from crawlstream.runtime import EventHandler, ServiceLoop

SOURCE = topics.URLS_DISCOVERED


class RecordingTransaction(TransactionalProducer):
    """Records the loop's calls in ``calls`` (shared with the handler, to see the order)."""

    transactional_id = "t"

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls
        self.open = False

    @property
    def in_transaction(self) -> bool:
        return self.open

    def produce(self, topic: str, value: bytes, *, partition: int, key: bytes | None = None,
                headers: Sequence[tuple[str, bytes]] = (), timestamp_ms: int | None = None) -> None:
        self.open = True

    def flush(self, timeout_s: float = 30.0) -> None:
        self.calls.append("flush")

    def partition_count(self, topic: str) -> int:
        return 4

    def commit_transaction(self, offsets: Mapping[TopicPartition, int], consumer: Consumer) -> None:
        self.calls.append(("commit", dict(offsets)))
        self.open = False

    def abort_transaction(self) -> None:
        self.calls.append("abort")
        self.open = False

    def close(self) -> None:
        pass


class Forwarder(EventHandler):
    def __init__(self, out: EventProducer, calls: list[Any]) -> None:
        self.out, self.calls = out, calls

    def handle(self, event: Any, message: Message) -> None:
        self.out.send(topics.URLS_FRONTIER, event)

    def after_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.calls.append(("after_commit", dict(offsets)))

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("on_revoke", partitions))


def _loop(bus: Bus, codec: EventCodec) -> tuple[ServiceLoop, RecordingTransaction, list[Any]]:
    producer = bus.producer()
    sender = EventProducer(producer, codec)
    for i in range(6):
        domain = f"site{i % 3}.example.com"
        sender.send(SOURCE, DiscoveredUrl(f"https://{domain}/{i}", domain, i, 0, 1_700_000_000_000, "seed"))
    sender.flush()
    producer.close()
    calls: list[Any] = []
    transaction = RecordingTransaction(calls)
    out = EventProducer(transaction, codec)
    loop = ServiceLoop(service="t", consumer=bus.consumer("g"), topics=[SOURCE], codec=codec,
                       handler=Forwarder(out, calls), dlq_producer=bus.producer(), producers=[out],
                       transaction=transaction)
    return loop, transaction, calls


def _drain(loop: ServiceLoop) -> int:
    consumed = 0
    for _ in range(50):
        n = loop.run_once()
        consumed += n
        if n == 0 and consumed:
            return consumed
    raise AssertionError("nothing consumed")


def test_offsets_commit_in_the_transaction_and_after_commit_follows(bus: Bus, codec: EventCodec) -> None:
    loop, _, calls = _loop(bus, codec)
    assert _drain(loop) == 6
    commits = [c[1] for c in calls if c[0] == "commit"]
    assert commits and sum(sum(c.values()) for c in commits) == 6
    steps = [c for c in calls if c != "flush"]  # each iteration flushes, committing or not
    assert steps == [step for c in commits for step in (("commit", c), ("after_commit", c))]
    group = bus.consumer("g")
    try:  # the group's own commit is not used: the offsets went with the transaction
        assert set(group.committed([TopicPartition(SOURCE, p) for p in range(4)]).values()) == {None}
    finally:
        group.close()
    loop.close()


def test_a_revoke_commits_the_transaction_before_the_handler_persists(bus: Bus, codec: EventCodec) -> None:
    loop, transaction, calls = _loop(bus, codec)
    _drain(loop)
    transaction.produce(topics.URLS_FRONTIER, b"x", partition=0)  # something sent since the last commit
    loop._consumed[TopicPartition(SOURCE, 0)] += 1  # and its input, not committed yet
    calls.clear()
    revoked = [TopicPartition(SOURCE, 0)]
    loop._on_revoke(revoked)
    assert [c if isinstance(c, str) else c[0] for c in calls] == ["flush", "commit", "after_commit",
                                                                    "on_revoke"]
    assert calls[-1] == ("on_revoke", revoked)
    loop.close()


def test_a_loss_with_a_transaction_open_aborts_it_and_raises(bus: Bus, codec: EventCodec) -> None:
    loop, transaction, calls = _loop(bus, codec)
    _drain(loop)
    loop._on_lost([TopicPartition(SOURCE, 1)])  # nothing open: nothing to abort
    assert "abort" not in calls
    transaction.produce(topics.URLS_FRONTIER, b"x", partition=0)
    with pytest.raises(BusUnavailable, match="aborted"):
        loop._on_lost([TopicPartition(SOURCE, 0)])
    assert calls[-1] == "abort"
    loop.close()


@pytest.mark.kafka
def test_a_reader_of_a_transactional_topic_commits_past_its_markers(kafka_cluster: Any, codec: EventCodec) -> None:
    """Each transaction's commit marker takes an offset no consumer is given: a loop that commits
    after its last message (offset + 1) left its group's lag at 1 for good behind the deduper,
    and the drain check of a Kafka crawl never saw it drained (the seeded kill -9 e2e test)."""
    import time
    import uuid

    from crawlstream.bus import KafkaBus
    from crawlstream.bus._topic_policy import TopicPolicy

    kafka = KafkaBus(kafka_cluster.bootstrap_servers, linger_ms=1, policy=TopicPolicy(partitions=4))
    topic, group = f"txn-read-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    try:
        kafka.create_topics([topic], 4)
        producer = kafka.transactional_producer(f"t-{topic}")
        sender = EventProducer(producer, codec)
        for batch in range(2):
            for i in range(3):
                sender.send(topic, _event(batch * 3 + i))
            producer.commit_transaction({}, kafka.consumer("unused"))
        producer.close()
        handled: list[Any] = []

        class Collect(EventHandler):
            def handle(self, event: Any, message: Message) -> None:
                handled.append(event)

        loop = ServiceLoop(service="t", consumer=kafka.consumer(group), topics=[topic], codec=codec,
                           handler=Collect(), dlq_producer=kafka.producer(), poll_timeout_s=0.2)
        deadline = time.monotonic() + 30
        while True:
            loop.run_once()
            # Read each time: the high watermark passes the last commit marker only once the
            # followers have fetched it (read once before the loop, it was 1 short under load).
            ends = kafka.end_offsets(topic)
            reader = kafka.consumer(group)
            committed = reader.committed([TopicPartition(topic, p) for p in range(4)])
            reader.close()
            if len(handled) == 6 and [committed[TopicPartition(topic, p)] or 0 for p in range(4)] == ends:
                break
            assert time.monotonic() < deadline, f"committed {committed}, log ends {ends}, handled {len(handled)}"
        loop.close()
        # A member that died between its last message and its commit past the marker: its
        # successor reads nothing, and commits past the marker all the same.
        behind = {TopicPartition(topic, p): end - 1 for p, end in enumerate(ends) if end}
        setter = kafka.consumer(group)
        setter.commit(behind)
        setter.close()
        successor = ServiceLoop(service="t", consumer=kafka.consumer(group), topics=[topic], codec=codec,
                                handler=Collect(), dlq_producer=kafka.producer(), poll_timeout_s=0.2)
        while True:
            successor.run_once()
            reader = kafka.consumer(group)
            committed = reader.committed(list(behind))
            reader.close()
            if all(committed[tp] == offset + 1 for tp, offset in behind.items()):
                break
            assert time.monotonic() < deadline + 30, f"committed {committed}, log ends {ends}"
        successor.close()
        assert len(handled) == 6
    finally:
        kafka.close()


def _event(n: int) -> DiscoveredUrl:
    domain = f"site{n % 3}.example.com"
    return DiscoveredUrl(f"https://{domain}/{n}", domain, n, 0, 1_700_000_000_000, "seed")
