"""Kafka-specific behaviour of KafkaBus on a real Apache Kafka broker.

The shared behaviour (ordering, at-least-once, resume, replay, DLQ, partitioner) is in the
contract suite (test_contract.py); this file covers what only the Kafka backend has:
client configuration, topics created with the configured partitions, replicas and retention
(read back from the broker), delivery failures surfacing at ``flush``, queue-full
back-pressure, assign-time seeks and timestamp lookups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from crawlstream.bus import KafkaBus, Message, TopicPartition, open_bus
from crawlstream.bus._kafka import KafkaConsumer
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.errors import BusUnavailable, ConfigError
from crawlstream.settings import Settings
from crawlstream.settings._settings import BusSettings
from crawlstream.topics import CONTENT_STORED, FETCH_RESULTS, URLS_RECORDS, dlq_topic

pytestmark = pytest.mark.kafka

WAIT_S = 30.0
PARTITIONS = 4


@pytest.fixture
def cluster(kafka_cluster: LocalKafka) -> LocalKafka:
    return kafka_cluster


@pytest.fixture
def bus(cluster: LocalKafka) -> Iterator[KafkaBus]:
    handle = KafkaBus(cluster.bootstrap_servers, linger_ms=5, policy=TopicPolicy(partitions=PARTITIONS))
    yield handle
    handle.close()


def topic_configs(bootstrap_servers: str, topic: str) -> dict[str, str]:
    """The topic's configuration as the broker reports it."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(10).items()}


def produce_values(
    bus: KafkaBus, topic: str, values: list[bytes], *, partition: int = 0, **extra: Any
) -> None:
    bus.create_topics([topic], PARTITIONS)
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


def test_a_consumer_behind_its_input_prefetches_a_bounded_amount_and_still_reads_a_larger_message(
    bus: KafkaBus,
) -> None:
    """librdkafka fetches ahead of ``poll`` on its own threads, by default up to 64 MiB; a
    member behind on its input (after an outage) filled that and kept the memory, which the
    soak read as RSS growth (ADR 034, "Session 21"). The bound is KafkaBus's, and a message
    larger than it still arrives. Each consumer is a process of its own, so its RSS is its own;
    the same consumer at librdkafka's default shows what the measure would see unbounded."""
    import json
    import os
    import subprocess
    import sys

    from crawlstream.bus._kafka import PREFETCH_BACKOFF_MS, PREFETCH_KBYTES

    config = bus.consumer_config("g")
    assert config["queued.max.messages.kbytes"] == PREFETCH_KBYTES == 8192
    assert config["fetch.queue.backoff.ms"] == PREFETCH_BACKOFF_MS == 10  # 1 s drains a backlog 20x slower
    topic = "kafka.prefetch"
    bus.create_topics([topic], PARTITIONS)
    sizes = [768 * 1024] * 60 + [12 << 20]  # ~45 MiB, then one message past the bound
    producer = bus.producer()
    try:
        for i, size in enumerate(sizes):
            producer.produce(topic, os.urandom(size), partition=i % PARTITIONS)  # incompressible
            producer.flush(30)
    finally:
        producer.close()
    worker = Path(__file__).with_name("_prefetch_worker.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def lagging_consumer(group: str, *extra: str) -> dict[str, Any]:
        run = subprocess.run(
            [sys.executable, str(worker), bus.bootstrap_servers, topic, group, str(len(sizes)), *extra],
            capture_output=True, text=True, timeout=180, env=env, check=False,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        result: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
        return result

    bounded = lagging_consumer("prefetch-bounded")
    unbounded = lagging_consumer("prefetch-default", "consumer.queued.max.messages.kbytes=65536")
    assert sorted(bounded["sizes"]) == sorted(unbounded["sizes"]) == sorted(sizes)
    print("prefetched while lagging: bounded", bounded["prefetched_bytes"], "default", unbounded["prefetched_bytes"])
    # ~57 MiB to read: ~63 MiB of growth at the default, ~18 MiB (8 MiB ahead, the client's own) bounded
    assert unbounded["prefetched_bytes"] > 48 << 20
    assert bounded["prefetched_bytes"] < 32 << 20


def test_extra_config_overrides_the_defaults(cluster: LocalKafka) -> None:
    tuned = KafkaBus(
        cluster.bootstrap_servers, extra_config={"compression.type": "lz4", "session.timeout.ms": "6000"}
    )
    assert tuned.producer_config()["compression.type"] == "lz4"
    assert tuned.consumer_config("g")["session.timeout.ms"] == "6000"


def test_extra_config_keys_can_target_consumers_or_producers(cluster: LocalKafka) -> None:
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


def test_create_topics_applies_partitions_replicas_and_retention_on_the_broker(bus: KafkaBus) -> None:
    """Replay sources are kept forever, work topics for the work retention, DLQs for theirs;
    every topic refuses unclean leader election and takes a whole fetched body."""
    suffix = str(time.monotonic_ns())
    work, source, dead = f"{FETCH_RESULTS}.{suffix}", f"{CONTENT_STORED}.{suffix}", dlq_topic(f"x.{suffix}")
    bus.create_topics([work, source, dead], 8)
    assert {t: bus.partition_count(t) for t in (work, source, dead)} == {work: 8, source: 8, dead: 8}
    work_config = topic_configs(bus.bootstrap_servers, work)
    assert work_config["retention.ms"] == str(168 * 3_600_000)
    assert work_config["min.insync.replicas"] == "1"  # one broker: replication factor 1
    assert work_config["unclean.leader.election.enable"] == "false"
    assert work_config["max.message.bytes"] == str(16 * 1024 * 1024)
    assert topic_configs(bus.bootstrap_servers, dead)["retention.ms"] == str(720 * 3_600_000)
    # The policy decides by the topic's contract name: the suffixed copy is a work topic.
    assert TopicPolicy().config_for(CONTENT_STORED, min_insync_replicas=2)["retention.ms"] == "-1"
    assert TopicPolicy().config_for(URLS_RECORDS, min_insync_replicas=2)["retention.bytes"] == "-1"


def test_the_real_replay_sources_are_created_to_be_kept_forever(cluster: LocalKafka) -> None:
    """content.stored and urls.records themselves, on a cluster of their own test's making."""
    with LocalKafka(brokers=1) as own:
        bus = KafkaBus(own.bootstrap_servers)
        try:
            bus.create_topics([CONTENT_STORED, URLS_RECORDS, FETCH_RESULTS], 16)
            for topic in (CONTENT_STORED, URLS_RECORDS):
                config = topic_configs(own.bootstrap_servers, topic)
                assert (config["retention.ms"], config["retention.bytes"]) == ("-1", "-1")
            assert topic_configs(own.bootstrap_servers, FETCH_RESULTS)["retention.ms"] != "-1"
            assert bus.partition_count(CONTENT_STORED) == 16
        finally:
            bus.close()


def test_partition_counts_must_divide_128(bus: KafkaBus) -> None:
    with pytest.raises(ConfigError, match="divisor of 128"):
        bus.create_topics(["kafka.odd.partitions"], 12)


def test_a_replication_factor_above_the_cluster_size_is_a_config_error(cluster: LocalKafka) -> None:
    bus = KafkaBus(cluster.bootstrap_servers, policy=TopicPolicy(replication_factor=3))
    with pytest.raises(ConfigError, match="has 1 broker"):
        bus.create_topics(["kafka.too.many.replicas"], 4)


def test_replicas_and_in_sync_minimum_derive_from_the_cluster_size() -> None:
    policy = TopicPolicy()
    assert [policy.replicas(n) for n in (1, 2, 3, 5)] == [(1, 1), (2, 1), (3, 2), (3, 2)]
    assert TopicPolicy(replication_factor=3, min_insync_replicas=3).replicas(3) == (3, 3)
    with pytest.raises(ConfigError, match="exceeds the replication factor"):
        TopicPolicy(replication_factor=2, min_insync_replicas=3).replicas(3)


def test_an_existing_topic_keeps_its_partition_count(bus: KafkaBus) -> None:
    topic = f"kafka.existing.{time.monotonic_ns()}"
    bus.create_topics([topic], 2)
    again = KafkaBus(bus.bootstrap_servers)
    try:
        again.create_topics([topic], 8)
        assert again.partition_count(topic) == 2
    finally:
        again.close()


def test_bus_partition_count_of_an_unknown_topic_raises_without_creating_it(bus: KafkaBus) -> None:
    with pytest.raises(BusUnavailable, match="does it exist"):
        bus.partition_count("kafka.never.created")
    with pytest.raises(BusUnavailable):
        bus.partition_count("kafka.never.created")


def test_producing_to_a_partition_the_topic_lacks_fails_at_flush_at_the_latest(bus: KafkaBus) -> None:
    producer = bus.producer()
    try:
        assert producer.partition_count("kafka.narrow") == PARTITIONS  # created with the policy
        with pytest.raises(BusUnavailable):
            producer.produce("kafka.narrow", b"x", partition=PARTITIONS + 3)
            producer.flush(10)
    finally:
        producer.close()


def test_a_lost_message_fails_every_later_flush_of_its_producer(cluster: LocalKafka) -> None:
    """A later flush that succeeds must not read as "everything sent so far is delivered": the
    deduper's snapshot on close trusted one and covered URLs whose forwards were lost."""
    bus = KafkaBus(cluster.bootstrap_servers, extra_config={"producer.message.timeout.ms": "1500"})
    bus.create_topics(["kafka.sticky"], PARTITIONS)
    producer = bus.producer()
    try:
        # a topic the brokers do not have (no auto-creation): the message times out undelivered
        producer.produce("kafka.sticky.absent", b"lost", partition=0)
        with pytest.raises(BusUnavailable, match="1 message"):
            producer.flush(10)
        producer.produce("kafka.sticky", b"delivered", partition=0)
        with pytest.raises(BusUnavailable, match="not delivered"):
            producer.flush(10)
    finally:
        with pytest.raises(BusUnavailable):
            producer.close()


def test_flush_raises_bus_unavailable_when_the_cluster_is_gone() -> None:
    cluster = LocalKafka(brokers=1).start()
    bus = KafkaBus(cluster.bootstrap_servers, linger_ms=5)
    bus.create_topics(["kafka.doomed"], 1)
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


def _librdkafka_clients() -> int:
    """Live librdkafka clients of this process: one ``rdk:main`` thread each."""
    tasks = Path("/proc/self/task")
    return sum(1 for t in tasks.iterdir() if (t / "comm").read_text().strip() == "rdk:main")


def test_close_releases_the_client_even_while_its_wrapper_is_still_referenced(cluster: LocalKafka) -> None:
    """Session 18's soak: each rebuild of a service after an outage left its old clients'
    threads and sockets behind (link extractors: 5 -> 12 librdkafka clients). A closed service
    object can stay referenced (a reference cycle, a traceback); ``close`` must release the
    client itself, not leave it to the garbage collector."""
    bus = KafkaBus(cluster.bootstrap_servers, linger_ms=5)
    bus.create_topics(["kafka.released"], 1)
    before = _librdkafka_clients()
    kept = [bus.producer() for _ in range(3)]
    for producer in kept:
        producer.produce("kafka.released", b"x", partition=0)
    assert _librdkafka_clients() == before + 3
    for producer in kept:
        producer.close()
    deadline = time.monotonic() + 10
    while _librdkafka_clients() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _librdkafka_clients() == before, "closed producers still hold their librdkafka clients"
    with pytest.raises(BusUnavailable, match="closed"):
        kept[0].produce("kafka.released", b"after close", partition=0)
    bus.close()


def test_a_full_local_queue_applies_back_pressure_instead_of_failing(cluster: LocalKafka) -> None:
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
    stamp_ms = int(time.time() * 1000) - 60_123  # recent: see test_seek_to_timestamp_...
    produce_values(
        bus,
        "kafka.roundtrip",
        [b"body"],
        partition=2,
        key=b"example.com",
        headers=[("error", b"bad magic"), ("empty", b"")],
        timestamp_ms=stamp_ms,
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
        timestamp_ms=stamp_ms,
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
        assert sorted(assigned) == [TopicPartition("kafka.seek", p) for p in range(PARTITIONS)]
        consumer.commit()
        assert consumer.committed([TopicPartition("kafka.seek", 1), TopicPartition("kafka.seek", 0)]) == {
            TopicPartition("kafka.seek", 1): 4,
            TopicPartition("kafka.seek", 0): None,
        }
    finally:
        consumer.close()
        consumer.close()


def test_seek_to_timestamp_replays_from_the_first_message_at_or_after_it(bus: KafkaBus) -> None:
    """The broker's ListOffsets-by-time lookup, through an owned partition."""
    # Recent: the brokers roll a segment whose first timestamp is older than segment.ms and their
    # retention check (every 5 min) deletes closed segments older than retention.ms, so messages
    # stamped years ago can vanish between the produce and the seek (a CI flake, session 8).
    base_ms = int(time.time() * 1000) - 60_000
    bus.create_topics(["kafka.time"], PARTITIONS)
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


def test_open_bus_chooses_kafka_when_bootstrap_servers_are_set(cluster: LocalKafka) -> None:
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


def test_malformed_extra_config_is_a_config_error(cluster: LocalKafka) -> None:
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


def test_a_commit_rejected_by_a_rebalance_is_retried_once_the_member_rejoined(cluster: LocalKafka) -> None:
    """A member joining moves the group to a new generation: a commit sent meanwhile with the old
    one is rejected. That must not stop the member (it is healthy); what it still owns is
    committed again by its next consume, and nothing it committed is lost."""
    bus = KafkaBus(cluster.bootstrap_servers, linger_ms=5, extra_config={"session.timeout.ms": "6000"})
    topic = "kafka.rebalance.commit"
    for partition in range(PARTITIONS):
        produce_values(bus, topic, [b"x"] * (partition + 1), partition=partition)
    expected = {TopicPartition(topic, p): p + 1 for p in range(PARTITIONS)}
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
