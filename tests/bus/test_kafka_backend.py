"""Kafka-specific behaviour of KafkaBus on librdkafka's mock cluster.

The shared behaviour (ordering, at-least-once, resume, replay, DLQ, partitioner) is in the
contract suite (test_contract.py); this file covers what only the Kafka backend has:
client configuration, auto-created topics, delivery failures surfacing at ``flush``,
queue-full back-pressure, assign-time seeks and the mock cluster's timestamp lookups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlstream.bus import KafkaBus, Message, TopicPartition, open_bus
from crawlstream.bus._kafka import KafkaConsumer
from crawlstream.bus.testing import AUTO_CREATED_PARTITIONS, MockKafkaCluster
from crawlstream.errors import BusUnavailable, ConfigError
from crawlstream.settings import Settings
from crawlstream.settings._settings import BusSettings

pytestmark = pytest.mark.kafka

WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockKafkaCluster]:
    with MockKafkaCluster() as running:
        yield running


@pytest.fixture
def bus(cluster: MockKafkaCluster) -> Iterator[KafkaBus]:
    handle = KafkaBus(cluster.bootstrap_servers, linger_ms=5)
    yield handle
    handle.close()


def produce_values(
    bus: KafkaBus, topic: str, values: list[bytes], *, partition: int = 0, **extra: Any
) -> None:
    producer = bus.producer()
    try:
        for value in values:
            producer.produce(topic, value, partition=partition, **extra)
        producer.flush(10)
    finally:
        producer.close()


def read_until(consumer: KafkaConsumer, count: int, timeout_s: float = WAIT_S) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.consume(100, 0.2))
    return got


def test_producer_is_idempotent_with_acks_all_and_zstd(bus: KafkaBus) -> None:
    config = bus.producer_config()
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"
    assert config["compression.type"] == "zstd"
    assert config["linger.ms"] == 5
    produce_values(bus, "kafka.idempotent", [b"accepted by the broker with this config"])


def test_consumer_commits_manually_and_uses_cooperative_sticky_assignment(bus: KafkaBus) -> None:
    config = bus.consumer_config("g")
    assert config["enable.auto.commit"] is False
    assert config["enable.auto.offset.store"] is False
    assert config["auto.offset.reset"] == "earliest"
    assert config["partition.assignment.strategy"] == "cooperative-sticky"


def test_extra_config_overrides_the_defaults(cluster: MockKafkaCluster) -> None:
    tuned = KafkaBus(
        cluster.bootstrap_servers, extra_config={"compression.type": "lz4", "session.timeout.ms": "6000"}
    )
    assert tuned.producer_config()["compression.type"] == "lz4"
    assert tuned.consumer_config("g")["session.timeout.ms"] == "6000"


def test_extra_config_keys_can_target_consumers_or_producers(cluster: MockKafkaCluster) -> None:
    """consumer./producer. prefixes keep client-specific properties (and librdkafka's warnings
    about them) away from the other kind of client; the clients accept what they get."""
    bus = KafkaBus(
        cluster.bootstrap_servers,
        extra_config={
            "consumer.session.timeout.ms": "6000",
            "producer.linger.ms": "3",
            "client.rack": "r1",
        },
    )
    consumer_config, producer_config = bus.consumer_config("g"), bus.producer_config()
    assert consumer_config["session.timeout.ms"] == "6000" and "session.timeout.ms" not in producer_config
    assert producer_config["linger.ms"] == "3" and "linger.ms" not in consumer_config
    assert consumer_config["client.rack"] == producer_config["client.rack"] == "r1"
    assert not any(k.startswith(("consumer.", "producer.")) for k in {**consumer_config, **producer_config})
    producer, consumer = bus.producer(), bus.consumer("g")
    consumer.close()
    producer.close()


def test_topics_are_auto_created_with_four_partitions_whatever_create_topics_asked(bus: KafkaBus) -> None:
    """The mock cluster rejects CreateTopics: create_topics must not fail, auto-creation decides."""
    bus.create_topics(["kafka.autocreated"], 8)
    producer = bus.producer()
    try:
        assert producer.partition_count("kafka.autocreated") == AUTO_CREATED_PARTITIONS
    finally:
        producer.close()
    assert bus.partition_count("kafka.autocreated") == AUTO_CREATED_PARTITIONS


def test_create_topics_on_the_mock_cluster_makes_them_exist_at_once(bus: KafkaBus) -> None:
    """Services subscribe right after creating their topics: left to the first produce, their
    consumers would see "unknown topic" until a metadata refresh (5 minutes by default)."""
    bus.create_topics(["kafka.created.early"], 4)
    assert bus.partition_count("kafka.created.early") == AUTO_CREATED_PARTITIONS


def test_bus_partition_count_of_an_unknown_topic_raises_without_creating_it(bus: KafkaBus) -> None:
    with pytest.raises(BusUnavailable, match="does not exist"):
        bus.partition_count("kafka.never.created")
    with pytest.raises(BusUnavailable):
        bus.partition_count("kafka.never.created")


def test_producing_to_a_partition_the_topic_lacks_fails_at_flush_at_the_latest(bus: KafkaBus) -> None:
    producer = bus.producer()
    try:
        assert producer.partition_count("kafka.narrow") == AUTO_CREATED_PARTITIONS
        with pytest.raises(BusUnavailable):
            producer.produce("kafka.narrow", b"x", partition=AUTO_CREATED_PARTITIONS + 3)
            producer.flush(10)
    finally:
        producer.close()


def test_flush_raises_bus_unavailable_when_the_cluster_is_gone() -> None:
    cluster = MockKafkaCluster().start()
    bus = KafkaBus(cluster.bootstrap_servers, linger_ms=5)
    producer = bus.producer()
    try:
        producer.produce("kafka.doomed", b"delivered", partition=0)
        producer.flush(10)
        cluster.stop()
        producer.produce("kafka.doomed", b"never acknowledged", partition=0)
        started = time.monotonic()
        with pytest.raises(BusUnavailable, match=r"not acknowledged within 1\.5s"):
            producer.flush(1.5)
        assert time.monotonic() - started < 5
    finally:
        cluster.stop()
        # close() flushes: with no cluster it must fail loudly, not hang, and only once.
        with pytest.raises(BusUnavailable):
            producer.close(timeout_s=0.5)
        producer.close()


def test_a_full_local_queue_applies_back_pressure_instead_of_failing(cluster: MockKafkaCluster) -> None:
    tiny = KafkaBus(
        cluster.bootstrap_servers, linger_ms=0, extra_config={"queue.buffering.max.messages": "5"}
    )
    values = [f"v{i}".encode() for i in range(200)]
    produce_values(tiny, "kafka.backpressure", values)
    consumer = tiny.consumer("backpressure")
    try:
        consumer.subscribe(["kafka.backpressure"])
        assert [m.value for m in read_until(consumer, len(values))] == values
    finally:
        consumer.close()


def test_key_headers_and_timestamp_round_trip(bus: KafkaBus) -> None:
    produce_values(
        bus,
        "kafka.roundtrip",
        [b"body"],
        partition=2,
        key=b"example.com",
        headers=[("error", b"bad magic"), ("empty", b"")],
        timestamp_ms=1_700_000_000_123,
    )
    consumer = bus.consumer("roundtrip")
    try:
        consumer.subscribe(["kafka.roundtrip"])
        [message] = read_until(consumer, 1)
    finally:
        consumer.close()
    assert message == Message(
        topic="kafka.roundtrip",
        partition=2,
        offset=0,
        key=b"example.com",
        value=b"body",
        headers=(("error", b"bad magic"), ("empty", b"")),
        timestamp_ms=1_700_000_000_123,
    )


def test_seek_inside_on_assign_starts_the_new_partition_there(bus: KafkaBus) -> None:
    """librdkafka rejects seeks on not-yet-fetched partitions; the bus turns them into assign offsets."""
    produce_values(bus, "kafka.seek", [b"a", b"b", b"c", b"d"], partition=1)
    consumer = bus.consumer("seek")
    assigned: list[TopicPartition] = []

    def on_assign(partitions: list[TopicPartition]) -> None:
        assigned.extend(partitions)
        consumer.seek(TopicPartition("kafka.seek", 1), 2)

    try:
        consumer.subscribe(["kafka.seek"], on_assign=on_assign)
        got = read_until(consumer, 2)
        time.sleep(0.3)
        got += consumer.consume(100, 0.2)
        assert [(m.offset, m.value) for m in got] == [(2, b"c"), (3, b"d")]
        assert sorted(assigned) == [TopicPartition("kafka.seek", p) for p in range(AUTO_CREATED_PARTITIONS)]
        consumer.commit()
        assert consumer.committed([TopicPartition("kafka.seek", 1), TopicPartition("kafka.seek", 0)]) == {
            TopicPartition("kafka.seek", 1): 4,
            TopicPartition("kafka.seek", 0): None,
        }
    finally:
        consumer.close()
        consumer.close()


def test_seek_to_timestamp_replays_from_the_first_message_at_or_after_it(bus: KafkaBus) -> None:
    """The mock cluster cannot look offsets up by time; the bus scans, with Kafka's result."""
    base_ms = 1_700_000_000_000
    producer = bus.producer()
    try:
        for i in range(6):
            producer.produce("kafka.time", f"t{i}".encode(), partition=0, timestamp_ms=base_ms + i * 1000)
        producer.flush(10)
    finally:
        producer.close()
    consumer = bus.consumer("time")
    try:
        consumer.subscribe(["kafka.time"])
        assert len(read_until(consumer, 6)) == 6
        consumer.seek_to_timestamp(base_ms + 3500)
        replayed = read_until(consumer, 2)
        assert [m.value for m in replayed] == [b"t4", b"t5"]
        consumer.commit()
        assert consumer.committed([TopicPartition("kafka.time", 0)]) == {TopicPartition("kafka.time", 0): 6}
    finally:
        consumer.close()


def test_open_bus_chooses_kafka_when_bootstrap_servers_are_set(cluster: MockKafkaCluster) -> None:
    settings = Settings(
        kafka_bootstrap_servers=cluster.bootstrap_servers,
        bus=BusSettings(linger_ms=7, kafka_extra_config="session.timeout.ms=7000, client.rack=r1"),
    )
    bus = open_bus(settings)
    try:
        assert isinstance(bus, KafkaBus)
        assert bus.producer_config()["linger.ms"] == 7
        assert bus.consumer_config("g")["session.timeout.ms"] == "7000"
        assert bus.consumer_config("g")["client.rack"] == "r1"
    finally:
        bus.close()


def test_malformed_extra_config_is_a_config_error(cluster: MockKafkaCluster) -> None:
    settings = Settings(
        kafka_bootstrap_servers=cluster.bootstrap_servers,
        bus=BusSettings(kafka_extra_config="no-equals-sign"),
    )
    with pytest.raises(ConfigError, match="key=value"):
        open_bus(settings)


def test_open_bus_chooses_the_embedded_log_in_the_data_dir_without_bootstrap_servers(tmp_path: Path) -> None:
    bus = open_bus(Settings(data_dir=tmp_path, bus=BusSettings(partitions=2)))
    try:
        assert not isinstance(bus, KafkaBus)
        bus.create_topics(["factory.embedded"], 2)
        assert bus.partition_count("factory.embedded") == 2
    finally:
        bus.close()
    assert (tmp_path / "bus").is_dir()


def test_a_commit_rejected_by_a_rebalance_is_retried_once_the_member_rejoined(cluster: MockKafkaCluster) -> None:
    """A member joining moves the group to a new generation: a commit sent meanwhile with the old
    one is rejected. That must not stop the member (it is healthy); what it still owns is
    committed again by its next consume, and nothing it committed is lost."""
    bus = KafkaBus(cluster.bootstrap_servers, linger_ms=5, extra_config={"session.timeout.ms": "6000"})
    topic = "kafka.rebalance.commit"
    for partition in range(AUTO_CREATED_PARTITIONS):
        produce_values(bus, topic, [b"x"] * (partition + 1), partition=partition)
    expected = {TopicPartition(topic, p): p + 1 for p in range(AUTO_CREATED_PARTITIONS)}
    first, second = bus.consumer("rebalance"), bus.consumer("rebalance")
    try:
        first.subscribe([topic])
        assert len(read_until(first, sum(expected.values()))) == sum(expected.values())
        second.subscribe([topic])
        second.poll(0.5)  # joins: the coordinator starts a rebalance, which first learns by heartbeat
        time.sleep(1.5)
        first.commit()  # with the generation first had; may be rejected, must not raise
        deadline = time.monotonic() + WAIT_S
        while not (first.assignment() and second.assignment()) and time.monotonic() < deadline:
            first.consume(10, 0.1)
            second.consume(10, 0.1)
        for _ in range(10):  # as a service loop goes on polling
            first.consume(10, 0.1)
            second.consume(10, 0.1)
        owned = set(first.assignment())
        assert owned, "cooperative-sticky leaves first some of its partitions"
        committed = first.committed(expected)
        assert {tp: committed[tp] for tp in owned} == {tp: expected[tp] for tp in owned}
    finally:
        first.close()
        second.close()
        bus.close()
