"""The Kafka backend of the bus, on confluent-kafka (librdkafka).

Owns the translation between ``crawlstream.bus`` and confluent-kafka: configuration
(idempotent zstd producer, manual commits, cooperative-sticky assignment, or range for a
subscription to several topics, which must stay co-partitioned), rebalance
callbacks, topic creation (``TopicPolicy``: partitions, replicas, retention) and error
mapping. Every ``KafkaException`` stops here and leaves as ``BusUnavailable`` with the
cause kept. It does not decode values and does not handle signals: graceful shutdown
(flush, commit, close) is the service loop's job.

The consumer is ``_kafka_consumer.py``, the transactional producer ``_kafka_transactions.py``
(ADR 038); what producer, consumer and bus share (retries while the
cluster recovers, warn-once error counts, partition counts) is ``_kafka_support.py``; the
operator's ``extra_config`` is parsed by ``_kafka_config.py``.

Tested against real Apache Kafka brokers (``crawlstream.devtools.localkafka.LocalKafka``); the
production choices are recorded in docs/decisions/011-real-kafka.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from crawlstream.bus._base import Bus, Producer, TransactionalProducer
from crawlstream.bus._kafka_config import parse_kafka_extra_config, scope_kafka_extra_config
from crawlstream.bus._kafka_consumer import COOPERATIVE, RANGE, KafkaConsumer
from crawlstream.bus._kafka_support import (
    METADATA_TIMEOUT_S,
    WarnOnce,
    partitions_in_metadata,
    retrying,
    serving_callbacks,
)
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.errors import BusUnavailable, ConfigError

__all__ = ["KafkaBus", "KafkaConsumer", "KafkaProducer"]

logger = logging.getLogger(__name__)
# librdkafka's own log lines (connection failures, rebalances) go through Python logging here.
_librdkafka_logger = logging.getLogger("crawlstream.bus.librdkafka")

_QUEUE_FULL_TIMEOUT_S = 60.0
# What a consumer may prefetch ahead of its poll (librdkafka's queued.max.messages.kbytes; its
# default is 64 MiB, overshot by up to a partition's fetch). A member behind on its input (after
# an outage, a stop) filled that much and kept the freed memory: +40-70 MB of RSS in session
# 19's soak, stepping up with each fault. With the queue that small librdkafka's pause before
# fetching again into a full queue (fetch.queue.backoff.ms, 1 s by default) becomes the limit:
# 10 ms drains a backlog of 20 KiB messages as fast as the 64 MiB queue does, where 1 s drains
# it at a twentieth of that (ADR 034, "Session 21").
PREFETCH_KBYTES = 8192
PREFETCH_BACKOFF_MS = 10


class _ClosedProducer:
    """Stands in for a released librdkafka producer: any use is a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise BusUnavailable(f"this Kafka producer is closed ({name}); a service builds a new one when it restarts")


class KafkaProducer(Producer):
    """An idempotent producer: retries never duplicate or reorder within a partition.

    Delivery reports are collected by a callback; ``flush`` raises ``BusUnavailable`` if
    any message failed, or if the flush timed out, so a caller that flushes before committing
    never commits past an event it failed to emit. A failure is sticky: once a message is lost
    every later ``flush`` raises too, so nothing that trusts a later flush (the deduper's
    snapshot when its service closes after the failed batch) can cover the lost message. A
    service gets a new producer when it is built again after the outage.
    """

    def __init__(self, config: Mapping[str, Any], bus: KafkaBus | None = None) -> None:
        self._producer = confluent_kafka.Producer(dict(config))
        self._bus = bus
        self._first_failure: tuple[str, int, KafkaError] | None = None  # named in the error
        self._failed = 0
        self._partition_counts: dict[str, int] = {}
        self._warn = WarnOnce()
        self._closed = False

    def _on_delivery(self, err: KafkaError | None, msg: confluent_kafka.Message) -> None:
        if err is not None:
            if self._first_failure is None:
                self._first_failure = (str(msg.topic()), int(msg.partition() or -1), err)
            self._failed += 1
            self._warn(err, f"delivery to {msg.topic()!r} partition {msg.partition()}")

    def produce(
        self,
        topic: str,
        value: bytes,
        *,
        partition: int,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp_ms: int | None = None,
    ) -> None:
        deadline = 0.0
        while True:
            try:
                self._producer.produce(
                    topic,
                    value,
                    key,
                    partition=partition,
                    on_delivery=self._on_delivery,
                    timestamp=timestamp_ms or 0,
                    headers=list(headers) if headers else None,
                )
                break
            except BufferError:
                # The local queue is full (queue.buffering.max.*): serve delivery reports
                # so it drains, then retry; bounded so a dead cluster cannot hang us.
                now = time.monotonic()
                deadline = deadline or now + _QUEUE_FULL_TIMEOUT_S
                if now > deadline:
                    raise BusUnavailable(
                        f"produce to {topic!r}: the local queue stayed full for "
                        f"{_QUEUE_FULL_TIMEOUT_S:.0f}s; the Kafka cluster is not acknowledging "
                        "messages; check the brokers"
                    ) from None
                serving_callbacks(self._producer.poll, "serving delivery reports", 0.05)
            except KafkaException as exc:
                raise BusUnavailable(f"produce to {topic!r} partition {partition} failed: {exc}") from exc
        serving_callbacks(self._producer.poll, "serving delivery reports", 0)

    def flush(self, timeout_s: float = 30.0) -> None:
        remaining = serving_callbacks(self._producer.flush, "flush", timeout_s)
        if self._first_failure is not None:
            topic, partition, err = self._first_failure
            raise BusUnavailable(
                f"{self._failed} message(s) were not delivered (first: {topic!r} partition {partition}: "
                f"{err.str()}); do not commit the input that produced them"
            ) from KafkaException(err)
        if remaining:
            raise BusUnavailable(
                f"{remaining} message(s) not acknowledged within {timeout_s}s; the Kafka cluster is "
                "unreachable or slow; do not commit the input that produced them"
            )

    def partition_count(self, topic: str) -> int:
        cached = self._partition_counts.get(topic)
        if cached is not None:
            return cached
        if self._bus is not None:
            self._bus._ensure_topic(topic)
        count = partitions_in_metadata(self._producer, topic)
        self._partition_counts[topic] = count
        return count

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush (bounded by ``timeout_s``) and release. Safe to call twice.

        If the flush fails, the undelivered messages are dropped and ``BusUnavailable``
        is raised: the caller must not commit what produced them.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout_s)
        except BusUnavailable:
            self._producer.purge()
            self._producer.poll(0)
            raise
        finally:
            self._release()

    def _release(self) -> None:
        """librdkafka's threads and sockets go with the last reference to its handle, which need
        not be ours: a closed service object can live on in a cycle. Drop it here."""
        self._producer = cast(confluent_kafka.Producer, _ClosedProducer())


class KafkaBus(Bus):
    """The bus on a Kafka cluster.

    ``linger_ms`` trades latency for batching (fewer, larger, better-compressed requests).
    ``extra_config`` is passed to librdkafka clients last, so it can override anything
    (security settings, ``session.timeout.ms``...): a key prefixed ``consumer.`` or
    ``producer.`` goes to that kind of client only, without the prefix (as in Kafka Connect);
    other keys go to every client. Consumer-only properties given to a producer make
    librdkafka log a warning per client. ``policy`` says how topics are created (partitions,
    replicas, retention); ``Producer.partition_count`` creates a missing topic with it.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "crawlstream",
        linger_ms: int = 20,
        extra_config: Mapping[str, str] | None = None,
        policy: TopicPolicy | None = None,
        commit_deadline_s: float = 120.0,
        transaction_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.commit_deadline_s = commit_deadline_s
        self.transaction_timeout_s = transaction_timeout_s
        self._common: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "logger": _librdkafka_logger,
        }
        self._linger_ms = linger_ms
        self._extra, self._extra_consumer, self._extra_producer = scope_kafka_extra_config(extra_config or {})
        self.policy = policy or TopicPolicy()
        self._admin: AdminClient | None = None
        self._known_topics: set[str] = set()

    @classmethod
    def from_settings(cls, settings: Any) -> KafkaBus:
        if not settings.kafka_bootstrap_servers:
            raise ConfigError(
                "KafkaBus.from_settings: expected KAFKA_BOOTSTRAP_SERVERS to be set, found it unset"
            )
        return cls(
            settings.kafka_bootstrap_servers,
            linger_ms=settings.bus.linger_ms,
            extra_config=parse_kafka_extra_config(getattr(settings.bus, "kafka_extra_config", "")),
            policy=TopicPolicy.from_settings(settings),
            commit_deadline_s=settings.bus.commit_deadline_s,
            transaction_timeout_s=settings.bus.transaction_timeout_s,
        )

    def producer_config(self) -> dict[str, Any]:
        """The effective producer configuration (inspectable for tests and start-up logs)."""
        return {
            **self._common,
            # Idempotent: a retry after a broker failover never duplicates or reorders a
            # partition's messages; acks=all: a write survives the loss of its leader.
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "linger.ms": self._linger_ms,
            "batch.size": 1_000_000,
            "message.max.bytes": self.policy.max_message_bytes,
            **self._extra,
            **self._extra_producer,
        }

    def consumer_config(self, group_id: str) -> dict[str, Any]:
        """The effective consumer configuration of a member of ``group_id``."""
        return {
            **self._common,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            # Cooperative-sticky: a member joining or leaving moves only the partitions that
            # must move; the others keep their per-partition state and keep flowing.
            "partition.assignment.strategy": COOPERATIVE,
            "enable.partition.eof": False,
            # librdkafka's default, said here: a transaction's messages (the deduper's forwards)
            # are read once it commits, never if it aborts (ADR 038).
            "isolation.level": "read_committed",
            # One message may be as large as a topic accepts (it may exceed the prefetch bound,
            # which librdkafka overshoots for it).
            "fetch.message.max.bytes": max(1_048_576, self.policy.max_message_bytes),
            "queued.max.messages.kbytes": PREFETCH_KBYTES,
            "fetch.queue.backoff.ms": PREFETCH_BACKOFF_MS,
            **self._extra,
            **self._extra_consumer,
        }

    def producer(self) -> KafkaProducer:
        return KafkaProducer(self.producer_config(), self)

    @property
    def transactions(self) -> bool:
        return True

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        """A producer whose sends commit with consumer offsets (``KafkaTransactionalProducer``),
        its transactions timing out after ``transaction_timeout_s``."""
        from crawlstream.bus._kafka_transactions import KafkaTransactionalProducer

        return KafkaTransactionalProducer(self.producer_config(), self, transactional_id, self.transaction_timeout_s)

    def consumer(self, group_id: str) -> KafkaConsumer:
        # A strategy set in extra_config is the operator's choice, for every subscription.
        chosen = "partition.assignment.strategy" in {**self._extra, **self._extra_consumer}
        return KafkaConsumer(self.consumer_config(group_id), multi_topic_assignment=None if chosen else RANGE,
                             commit_deadline_s=self.commit_deadline_s)

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({**self._common, **self._extra})
        return self._admin

    def _ensure_topic(self, topic: str) -> None:
        if topic not in self._known_topics:
            self.create_topics([topic], self.policy.partitions)

    def create_topics(self, topics: Iterable[str], partitions: int) -> None:
        """Create the missing ``topics`` with ``partitions`` partitions and the policy's replicas
        and configuration; an existing topic is left as it is (a different partition count
        is logged: the domain -> partition map follows the topic's real count)."""
        wanted = [t for t in dict.fromkeys(topics) if t not in self._known_topics]
        if not wanted:
            return
        if partitions < 1 or 128 % partitions:
            raise ConfigError(f"topic partitions: expected a divisor of 128, found {partitions}")
        admin = self._admin_client()
        try:
            metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise BusUnavailable(f"cluster metadata unavailable at {self.bootstrap_servers}: {exc}") from exc
        for topic in wanted:
            found = metadata.topics.get(topic)
            if found is not None and found.partitions and len(found.partitions) != partitions:
                logger.warning(
                    "topic %r exists with %d partitions, not the configured %d; using %d",
                    topic, len(found.partitions), partitions, len(found.partitions),
                )
        missing = [t for t in wanted if t not in metadata.topics]
        self._known_topics.update(t for t in wanted if t in metadata.topics)
        if not missing:
            return
        replication, in_sync = self.policy.replicas(len(metadata.brokers))
        futures = admin.create_topics(
            [
                NewTopic(
                    t,
                    num_partitions=partitions,
                    replication_factor=replication,
                    config=self.policy.config_for(t, min_insync_replicas=in_sync),
                )
                for t in missing
            ],
            request_timeout=METADATA_TIMEOUT_S,
        )
        for topic, future in futures.items():
            try:
                future.result(METADATA_TIMEOUT_S + 5)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise BusUnavailable(
                        f"creating topic {topic!r} ({partitions} partitions, replication factor "
                        f"{replication}) failed: {exc}"
                    ) from exc
            self._known_topics.add(topic)
        self._wait_for_leaders(missing)
        logger.info(
            "created topics %s: %d partitions, replication factor %d, min.insync.replicas %d",
            missing, partitions, replication, in_sync,
        )

    def _wait_for_leaders(self, topics: Sequence[str]) -> None:
        """Until every partition of ``topics`` has a leader: CreateTopics returns before the
        controller elected them, and a client that reads or writes at once would be told
        "not leader" instead."""
        deadline = time.monotonic() + METADATA_TIMEOUT_S
        pending = list(topics)
        while pending:
            try:
                metadata = self._admin_client().list_topics(timeout=METADATA_TIMEOUT_S)
            except KafkaException as exc:
                raise BusUnavailable(f"cluster metadata unavailable at {self.bootstrap_servers}: {exc}") from exc
            pending = [
                t
                for t in pending
                if t not in metadata.topics
                or not metadata.topics[t].partitions
                or any(p.leader < 0 for p in metadata.topics[t].partitions.values())
            ]
            if pending and time.monotonic() > deadline:
                raise BusUnavailable(f"topics {pending} have partitions without a leader after creation")
            if pending:
                time.sleep(0.05)

    def partition_count(self, topic: str) -> int:
        return partitions_in_metadata(self._admin_client(), topic)

    def end_offsets(self, topic: str) -> list[int]:
        """The log end (high watermark) of each partition of ``topic``, as the embedded bus
        gives it: with a group's committed offsets it is the group's lag, which is how
        ``crawlstream.crawl.LagProbe`` tells a drained crawl."""
        return self._list_offsets(topic, OffsetSpec.latest(), "end")

    def start_offsets(self, topic: str) -> list[int]:
        """The log start of each partition of ``topic`` (above 0 once retention deleted data)."""
        return self._list_offsets(topic, OffsetSpec.earliest(), "start")

    def _list_offsets(self, topic: str, spec: OffsetSpec, what: str) -> list[int]:
        count = self.partition_count(topic)
        request = {confluent_kafka.TopicPartition(topic, p): spec for p in range(count)}

        def ask() -> list[int]:
            futures = self._admin_client().list_offsets(request, request_timeout=METADATA_TIMEOUT_S)
            found = {tp.partition: int(f.result().offset) for tp, f in futures.items()}
            return [found[p] for p in range(count)]

        return retrying(ask, f"{what} offsets of topic {topic!r}")

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference releases it.
        self._admin = None
