"""Kafka transactions of the bus (ADR 038) on a real broker: a committed transaction's messages
and offsets appear together; an open one that is closed (or whose member died and was followed
by a producer with the same transactional.id) leaves neither for a read_committed reader."""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path

import confluent_kafka
import pytest

from crawlstream.bus import EmbeddedBus, KafkaBus, TopicPartition
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.errors import BusUnavailable, ConfigError

pytestmark = pytest.mark.kafka

PARTITIONS = 4


@pytest.fixture
def bus(kafka_cluster: LocalKafka) -> Iterator[KafkaBus]:
    handle = KafkaBus(kafka_cluster.bootstrap_servers, linger_ms=1, policy=TopicPolicy(partitions=PARTITIONS),
                      transaction_timeout_s=20.0)
    yield handle
    handle.close()


def _values(bus: KafkaBus, topic: str, *, until: Collection[bytes], timeout_s: float = 30.0) -> list[bytes]:
    """What a read_committed reader (the bus's consumer) reads in ``topic`` until it has read
    every value of ``until``. A fixed wait is a race: a fresh reader's JoinGroup may be answered
    COORDINATOR_LOAD_IN_PROGRESS and librdkafka joins again ~3 s later (a 3 s wait read nothing in
    1 of 4 runs), and a commit's markers reach the partitions after ``commit_transaction``
    returns. A value of ``until`` written after the aborted ones in each of their partitions
    proves the reader went past them: partitions are read in order."""
    consumer = bus.consumer(f"reader-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not set(until) <= set(got):
            assert time.monotonic() < deadline, f"read {got} in {timeout_s:.0f} s, not yet all of {sorted(until)}"
            got += [m.value for m in consumer.consume(100, 0.2)]
    finally:
        consumer.close()
    return got


def test_a_transaction_commits_its_messages_with_the_offsets_of_their_input(bus: KafkaBus) -> None:
    source, out, group = (f"txn-{what}-{uuid.uuid4().hex[:8]}" for what in ("in", "out", "g"))
    bus.create_topics([source, out], PARTITIONS)
    plain = bus.producer()
    for i in range(3):
        plain.produce(source, b"in-%d" % i, partition=0)
    plain.close()
    consumer = bus.consumer(group)
    consumer.subscribe([source])
    read = []
    deadline = time.monotonic() + 30
    while len(read) < 3 and time.monotonic() < deadline:
        read += consumer.consume(10, 0.2)
    assert len(read) == 3
    producer = bus.transactional_producer(f"t-{group}")
    assert not producer.in_transaction
    for message in read:
        producer.produce(out, message.value.replace(b"in", b"out"), partition=1)
    assert producer.in_transaction
    producer.commit_transaction({TopicPartition(source, 0): 3}, consumer)
    assert not producer.in_transaction
    assert consumer.committed([TopicPartition(source, 0)]) == {TopicPartition(source, 0): 3}
    consumer.close()
    producer.close()
    expected = [b"out-0", b"out-1", b"out-2"]
    assert sorted(_values(bus, out, until=expected)) == expected


def test_an_aborted_transaction_and_one_left_open_by_a_dead_member_are_never_read(bus: KafkaBus) -> None:
    out = f"txn-out-{uuid.uuid4().hex[:8]}"
    bus.create_topics([out], PARTITIONS)
    aborted = bus.transactional_producer(f"t-{out}-a")
    aborted.produce(out, b"aborted", partition=0)
    aborted.flush()  # on the broker, not committed
    aborted.abort_transaction()
    aborted.produce(out, b"closed open", partition=0)
    aborted.flush()
    aborted.close()  # closing aborts the open transaction

    dead = bus.transactional_producer(f"t-{out}-dead")
    dead.produce(out, b"left open", partition=1)
    dead.flush()  # then the member "dies": never committed, never closed
    successor = bus.transactional_producer(f"t-{out}-dead")  # same id: fences it, aborts its transaction
    committed = [b"committed-0", b"committed-1"]  # after the aborted values of each partition
    for partition, value in enumerate(committed):
        successor.produce(out, value, partition=partition)
    successor.commit_transaction({}, bus.consumer("unused"))
    successor.close()
    assert sorted(_values(bus, out, until=committed)) == committed


def test_the_embedded_bus_has_no_transactions_and_kafka_readers_read_committed(tmp_path: Path, bus: KafkaBus) -> None:
    with EmbeddedBus(tmp_path / "bus", default_partitions=PARTITIONS, fsync="never") as embedded:
        assert not embedded.transactions
        with pytest.raises(ConfigError, match="no transactions"):
            embedded.transactional_producer("x")
    assert bus.transactions
    assert bus.consumer_config("g")["isolation.level"] == "read_committed"



class _StuckOffsets:
    """The producer's librdkafka handle, but ``send_offsets_to_transaction`` never returns, as it
    did not in the 3-broker kill e2e test (session 20: the deduper group's coordinator was killed
    and restarted; librdkafka#5456/#5511). The stand-in is the library's bug, nothing else."""

    def __init__(self, real: object) -> None:
        self._real = real
        self.release = threading.Event()

    def send_offsets_to_transaction(self, *args: object) -> None:
        self.release.wait()

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def test_a_transaction_call_that_does_not_keep_its_timeout_wedges_the_producer(
    bus: KafkaBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its own timeout and a margin the call is given up: ``ClientWedged`` (the process
    exits 75 and a fresh one takes over), the producer refuses further calls at once, and
    closing it does not wait on the stuck call."""
    from crawlstream.bus import _kafka_transactions
    from crawlstream.errors import ClientWedged

    monkeypatch.setattr(_kafka_transactions, "_WEDGED_AFTER_S", 1.0)
    source, out, group = (f"txn-{what}-{uuid.uuid4().hex[:8]}" for what in ("in", "out", "g"))
    bus.create_topics([source, out], PARTITIONS)
    consumer = bus.consumer(group)
    consumer.subscribe([source])
    consumer.consume(1, 0.5)
    short = KafkaBus(bus.bootstrap_servers, linger_ms=1, transaction_timeout_s=2.0)
    producer = short.transactional_producer(f"t-{group}")
    stuck = _StuckOffsets(producer._producer)
    producer._producer = stuck  # type: ignore[assignment]
    producer.produce(out, b"x", partition=0)
    started = time.monotonic()
    with pytest.raises(ClientWedged, match=r"send_offsets_to_transaction .* did not return in"):
        producer.commit_transaction({TopicPartition(source, 0): 1}, consumer)
    assert time.monotonic() - started < 10
    with pytest.raises(ClientWedged, match="an earlier call of this producer is stuck"):
        producer.abort_transaction()
    started = time.monotonic()
    producer.close()
    assert time.monotonic() - started < 1
    stuck.release.set()
    consumer.close()
    short.close()


def test_offsets_an_open_transaction_holds_are_waited_for_not_read_as_none(bus: KafkaBus) -> None:
    """The CI outage failure: a deduper's on_assign read committed offsets while a transaction held
    some (UNSTABLE_OFFSET_COMMIT). Such a partition is asked again until the transaction ends;
    reading it as "never committed" would replay it from the start."""
    source, out, group = (f"unstable-{what}-{uuid.uuid4().hex[:8]}" for what in ("in", "out", "g"))
    bus.create_topics([source, out], PARTITIONS)
    member = bus.consumer(group)
    member.subscribe([source])
    deadline = time.monotonic() + 30
    while not member.assignment() and time.monotonic() < deadline:
        member.consume(1, 0.2)
    assert member.assignment()
    member.commit({TopicPartition(source, 0): 2})
    producer = bus.transactional_producer(f"t-{group}")
    producer.produce(out, b"held", partition=0)
    held = confluent_kafka.TopicPartition(source, 0, 5)
    producer._producer.send_offsets_to_transaction([held], member.group_metadata(), 10)  # left open
    answers: list[dict[TopicPartition, int | None]] = []
    reader = threading.Thread(target=lambda: answers.append(member.committed([TopicPartition(source, 0)])))
    reader.start()
    time.sleep(3.0)
    assert not answers, f"read while a transaction held the offset: {answers}"
    producer._producer.commit_transaction(10)
    reader.join(30)
    assert answers == [{TopicPartition(source, 0): 5}]
    member.close()
    producer.close()


def _librdkafka_threads() -> int:
    """librdkafka's own threads in this process (it names them ``rdk:...``)."""
    count = 0
    for comm in Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):
            count += comm.read_text().startswith("rdk:")
    return count


def test_a_producer_whose_init_timed_out_leaves_no_client_to_fence_its_successor() -> None:
    """``init_transactions`` timing out (no coordinator) raises ``BusUnavailable`` and the host
    builds a producer with the same transactional.id. librdkafka goes on initialising the first
    client in the background, and an exception's frames keep it alive until a garbage
    collection: session 23's soak saw it take its epoch after its successor and fence it, which
    crashed the deduper. The failed producer's client must be gone when the error is raised."""
    with socket.socket() as sock:  # a port nothing listens on: the coordinator is never found
        sock.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{sock.getsockname()[1]}"
    dead = KafkaBus(nowhere, linger_ms=1, transaction_timeout_s=1.5)

    def build() -> str:
        try:
            dead.transactional_producer("t-init-timeout")
        except BusUnavailable as exc:  # dropped here, as the service host drops it
            return str(exc)
        return "built"

    before = _librdkafka_threads()
    gc.disable()  # a collection would hide the leak: the cycle is freed only by one
    try:
        assert "init_transactions" in build()
        assert _librdkafka_threads() == before
    finally:
        gc.enable()
        dead.close()


def test_a_fenced_producer_fails_its_sends_as_bus_unavailable(bus: KafkaBus) -> None:
    """A newer producer with the same transactional.id fences the old one; the old one's
    delivery reports then carry a fatal error. Whatever confluent-kafka raises while serving them
    (a ``KafkaException``, or a ``SystemError`` when a callback ran with one already set, which
    crashed the deduper twice in session 23's soak), the caller sees ``BusUnavailable`` and
    rebuilds, and nothing the fenced producer sent is ever read."""
    topic = f"txn-fenced-{uuid.uuid4().hex[:8]}"
    bus.create_topics([topic], PARTITIONS)
    old = bus.transactional_producer(f"t-{topic}")
    old.produce(topic, b"before", partition=0)
    new = bus.transactional_producer(f"t-{topic}")
    with pytest.raises(BusUnavailable):
        for n in range(200):  # the fence shows on a delivery report, served by a later call
            old.produce(topic, b"after-%d" % n, partition=n % PARTITIONS)
            old.flush(1.0)
    old.close()
    successor = [b"successor-%d" % partition for partition in range(PARTITIONS)]  # after whatever the old one left
    for partition, value in enumerate(successor):
        new.produce(topic, value, partition=partition)
    new.flush(10.0)
    group = bus.consumer(f"g-{topic}")
    new.commit_transaction({}, group)
    group.close()
    new.close()
    assert sorted(_values(bus, topic, until=successor)) == successor


def test_a_system_error_over_a_kafka_error_is_bus_unavailable_and_any_other_is_not() -> None:
    """confluent-kafka chains the callback's ``KafkaException`` to the ``SystemError``."""
    from confluent_kafka import KafkaError, KafkaException

    from crawlstream.bus._kafka_support import serving_callbacks

    def fenced() -> int:
        try:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
        except KafkaException as exc:
            raise SystemError("<method 'code'> returned a result with an exception set") from exc

    with pytest.raises(BusUnavailable, match="fenced by a newer instance") as caught:
        serving_callbacks(fenced, "flush")
    assert isinstance(caught.value.__cause__, KafkaException)

    def broken() -> int:
        raise SystemError("a bug of our own")

    with pytest.raises(SystemError, match="a bug of our own"):
        serving_callbacks(broken, "flush")
