"""The Kafka backend of the bus, on confluent-kafka (librdkafka).

Owns the translation between ``crawlstream.bus`` and confluent-kafka: configuration
(idempotent zstd producer, manual commits, cooperative-sticky assignment, or range for a
subscription to several topics, which must stay co-partitioned), rebalance
callbacks, topic creation (``TopicPolicy``: partitions, replicas, retention) and error
mapping. Every ``KafkaException`` stops here and leaves as ``BusUnavailable`` with the
cause kept. It does not decode values and does not handle signals: graceful shutdown
(flush, commit, close) is the service loop's job.

Tested against real Apache Kafka brokers (``crawlstream.devtools.localkafka.LocalKafka``); the
production choices are recorded in docs/decisions/011-real-kafka.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from crawlstream.bus._base import Bus, Consumer, Message, PartitionsCallback, Producer, TopicPartition
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.errors import BusUnavailable, ConfigError

__all__ = ["KafkaBus", "KafkaConsumer", "KafkaProducer"]

logger = logging.getLogger(__name__)
# librdkafka's own log lines (connection failures, rebalances) go through Python logging here.
_librdkafka_logger = logging.getLogger("crawlstream.bus.librdkafka")

# Offsets meaning "no committed offset" (librdkafka OFFSET_INVALID) and logical positions.
_OFFSET_INVALID = confluent_kafka.OFFSET_INVALID
_OFFSET_BEGINNING = confluent_kafka.OFFSET_BEGINNING
_OFFSET_END = confluent_kafka.OFFSET_END

_COOPERATIVE = "cooperative-sticky"
# Commit errors that mean the group has moved on to a new generation (a rebalance).
_REBALANCE_ERRORS = frozenset(
    {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS}
)
_RANGE = "range"
_METADATA_TIMEOUT_S = 10.0
_PROPAGATION_S = 3.0
_QUEUE_FULL_TIMEOUT_S = 60.0


# Errors after which the same request succeeds once the cluster recovers (a broker restarted,
# leadership or the group coordinator moved), besides those librdkafka marks retriable.
_TRANSIENT_ERRORS = frozenset(
    {
        KafkaError._WAIT_COORD,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
_COMMIT_RETRY_S = 60.0
T = TypeVar("T")


def _retriable(err: Any) -> bool:
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _TRANSIENT_ERRORS)


def _retrying(
    call: Callable[[], T],
    what: str,
    timeout_s: float = _COMMIT_RETRY_S,
    on_retry: Callable[[KafkaError, str], None] | None = None,
) -> T:
    """``call()``, asked again while the cluster answers with a transient error (a partition
    between leaders, the group coordinator moving or still loading its offsets: both seen on
    a fresh cluster and during a broker failover), up to ``timeout_s``. ``on_retry(err,
    what)`` hears of each retry (a consumer's warn-once counter)."""
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not _retriable(err) or time.monotonic() > deadline:
                raise BusUnavailable(f"{what} failed: {exc}") from exc
            if on_retry is not None and isinstance(err, KafkaError):
                on_retry(err, f"{what} (retried while the cluster recovers)")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def _tp(tp: confluent_kafka.TopicPartition) -> TopicPartition:
    return TopicPartition(str(tp.topic), int(tp.partition))


class _WarnOnce:
    """Warn once per error code, count always: one dead broker must not flood the logs."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, err: KafkaError, context: str) -> None:
        name = err.name()
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.counts[name] == 1:
            logger.warning("kafka %s: %s (further %s errors counted, not logged)", context, err.str(), name)


def _kafka_message(msg: confluent_kafka.Message) -> Message:
    ts_type, ts_ms = msg.timestamp()
    key, value = msg.key(), msg.value()
    return Message(
        topic=str(msg.topic()),
        partition=int(msg.partition() or 0),
        offset=int(msg.offset() or 0),
        key=key.encode() if isinstance(key, str) else key,
        value=(value.encode() if isinstance(value, str) else value) or b"",
        headers=_headers(msg.headers()),
        timestamp_ms=ts_ms if ts_type != confluent_kafka.TIMESTAMP_NOT_AVAILABLE else 0,
    )


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    """librdkafka gives a list of (name, bytes | None) pairs, or None without headers."""
    if not raw:
        return ()
    pairs = raw.items() if isinstance(raw, dict) else raw
    return tuple(
        (str(name), value.encode() if isinstance(value, str) else value or b"") for name, value in pairs
    )


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
        self._warn = _WarnOnce()
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
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise BusUnavailable(f"produce to {topic!r} partition {partition} failed: {exc}") from exc
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        try:
            remaining = self._producer.flush(timeout_s)
        except KafkaException as exc:
            raise BusUnavailable(f"flush failed: {exc}") from exc
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
        count = _partitions_in_metadata(self._producer, topic)
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


def _partitions_in_metadata(client: Any, topic: str) -> int:
    """Partition count of ``topic`` from cluster metadata.

    Right after CreateTopics the broker a client asks may not know the topic yet (metadata
    propagates from the controller): "unknown topic" or "leader not available" is retried
    for a few seconds before it is believed.
    """
    started = time.monotonic()
    deadline = started + _METADATA_TIMEOUT_S
    last_error: Any = None
    while True:
        try:
            metadata = client.list_topics(topic, timeout=_METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise BusUnavailable(f"metadata for topic {topic!r} unavailable: {exc}") from exc
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        last_error = found.error if found is not None else "not in the answer"
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            # Propagation takes milliseconds; past a few seconds the topic does not exist.
            deadline = min(deadline, started + _PROPAGATION_S)
        if time.monotonic() > deadline:
            raise BusUnavailable(
                f"topic {topic!r} has no usable metadata after {_METADATA_TIMEOUT_S:.0f}s (last error: "
                f"{last_error}); does it exist? (services create their topics at start-up)"
            )
        time.sleep(0.1)


class KafkaConsumer(Consumer):
    """One member of a consumer group with manual commits of explicitly tracked offsets.

    Offsets are tracked here (the position after each message returned), not stored in
    librdkafka, so ``commit()`` commits exactly what the caller has seen and nothing it has
    not. Assignment is cooperative-sticky: a rebalance only moves the partitions that must
    move, so ``on_assign``/``on_revoke`` receive the *increment*, never the full set, and
    members keep processing their other partitions meanwhile.

    A subscription to several topics switches the group to ``multi_topic_assignment``
    (``range`` unless None): the design partitions every topic by domain, and a member that
    consumes two topics (the scheduler: ``urls.frontier`` and ``fetch.results``) must own
    partition p of both, or two members would act for the same domains. Cooperative-sticky
    does not keep that: a member joining a group can be handed all of one topic and none of
    the other. Range assigns each topic alike (eagerly: a rebalance revokes everything first).
    """

    def __init__(self, config: Mapping[str, Any], *, multi_topic_assignment: str | None = _RANGE) -> None:
        self._config = dict(config)
        self._multi_topic_assignment = multi_topic_assignment
        self._client: Any = None
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._assigning: set[TopicPartition] | None = None
        self._revoking: set[TopicPartition] | None = None
        self._commit_later: dict[TopicPartition, int] = {}
        self._pending_seeks: dict[TopicPartition, int] = {}
        self._on_assign: PartitionsCallback | None = None
        self._on_revoke: PartitionsCallback | None = None
        self._on_lost: PartitionsCallback | None = None
        self._warn = _WarnOnce()
        self._closed = False

    @property
    def _consumer(self) -> Any:
        """The librdkafka consumer, created on first use: ``subscribe`` may still choose its
        assignment strategy, which is fixed at creation."""
        if self._client is None:
            self._client = confluent_kafka.Consumer(self._config)
        return self._client

    @property
    def _cooperative(self) -> bool:
        return self._config.get("partition.assignment.strategy") == _COOPERATIVE

    def _use_strategy(self, strategy: str) -> None:
        if self._config.get("partition.assignment.strategy") == strategy:
            return
        self._config["partition.assignment.strategy"] = strategy
        if self._client is not None:
            # Only read committed offsets so far (it never joined the group): start afresh.
            self._client.close()
            self._client = None

    # -- group membership -------------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
    ) -> None:
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        if len(set(topics)) > 1 and self._multi_topic_assignment is not None:
            self._use_strategy(self._multi_topic_assignment)
        try:
            self._consumer.subscribe(
                list(topics),
                on_assign=self._handle_assign,
                on_revoke=self._handle_revoke,
                on_lost=self._handle_lost,
            )
        except KafkaException as exc:
            raise BusUnavailable(f"subscribe to {list(topics)} failed: {exc}") from exc

    def _handle_assign(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        added = [_tp(tp) for tp in partitions]
        logger.info("assigned %s (group %s)", added, self._config.get("group.id"))
        # 1. Let the caller learn its new partitions; it may seek() them from here. They are
        #    not assigned in librdkafka yet, so seeks are remembered, not sent.
        self._assigning = set(added)
        try:
            if self._on_assign is not None and not self._closed:
                self._on_assign(added)
        finally:
            self._assigning = None
        # 2. Assign, with the remembered seeks as start offsets (librdkafka rejects a seek
        #    on a partition it is not fetching yet; assign-with-offset is the supported way).
        start = [
            confluent_kafka.TopicPartition(
                tp.topic, tp.partition, self._pending_seeks.pop(tp, _OFFSET_INVALID)
            )
            for tp in added
        ]
        try:
            if self._cooperative:
                self._consumer.incremental_assign(start)
            else:
                self._consumer.assign(start)
        except KafkaException as exc:
            raise BusUnavailable(f"assigning {added} failed: {exc}") from exc

    def _handle_revoke(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        revoked = [_tp(tp) for tp in partitions]
        logger.info("revoked %s (group %s)", revoked, self._config.get("group.id"))
        self._revoking = set(revoked)
        try:
            # Still owned while the callback runs: the caller flushes and commits here.
            if self._on_revoke is not None and not self._closed:
                self._on_revoke(revoked)
        finally:
            self._revoking = None
            self._forget(revoked)

    def _handle_lost(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        lost = [_tp(tp) for tp in partitions]
        logger.warning(
            "lost %s (group %s): session expired, another member owns them",
            lost,
            self._config.get("group.id"),
        )
        try:
            if self._on_lost is not None and not self._closed:
                self._on_lost(lost)
        finally:
            self._forget(lost)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)
            self._pending_seeks.pop(tp, None)
            self._commit_later.pop(tp, None)

    # -- reading ----------------------------------------------------------------------

    def _accept(self, msg: confluent_kafka.Message) -> Message | None:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return None
            if err.fatal():
                raise BusUnavailable(f"consumer failed fatally: {err.str()}") from KafkaException(err)
            self._warn(err, f"consume ({msg.topic()!r} partition {msg.partition()})")
            return None
        message = _kafka_message(msg)
        tp = message.topic_partition
        self._positions[tp] = message.offset + 1
        return message

    def poll(self, timeout_s: float) -> Message | None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self._consumer.poll(max(0.0, deadline - time.monotonic()))
            except KafkaException as exc:
                raise BusUnavailable(f"poll failed: {exc}") from exc
            self._retry_rejected_commit()
            if msg is None:
                return None
            message = self._accept(msg)
            if message is not None or time.monotonic() >= deadline:
                return message

    def consume(self, max_messages: int, timeout_s: float) -> list[Message]:
        try:
            raw = self._consumer.consume(num_messages=max_messages, timeout=timeout_s)
        except KafkaException as exc:
            raise BusUnavailable(f"consume failed: {exc}") from exc
        self._retry_rejected_commit()
        out = []
        for msg in raw:
            message = self._accept(msg)
            if message is not None:
                out.append(message)
        return out

    # -- offsets ----------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        if offsets is None:
            # Only what moved since the last commit: a loop may commit after every poll.
            owned = set(self.assignment())
            offsets = {
                tp: pos
                for tp, pos in self._positions.items()
                if tp in owned and self._committed.get(tp) != pos
            }
        if not offsets:
            return
        request = [confluent_kafka.TopicPartition(tp.topic, tp.partition, pos) for tp, pos in offsets.items()]

        def attempt() -> bool:
            """False if a rebalance rejected the whole commit (it is retried after the rebalance);
            KafkaException for ``_retrying`` to judge; True otherwise."""
            try:
                result = self._consumer.commit(offsets=request, asynchronous=False)
            except KafkaException as exc:
                if self._rejected_by_rebalance(offsets, exc.args[0] if exc.args else None):
                    return False
                raise
            failed = [tp for tp in result or [] if tp.error is not None]
            if failed and not all(self._rejected_by_rebalance(offsets, tp.error) for tp in failed):
                raise KafkaException(failed[0].error)
            return True

        # The group coordinator moved (its broker failed) or is still loading: the client
        # finds the new one, and the same offsets are committed again.
        if not _retrying(attempt, f"commit of {dict(offsets)}", on_retry=self._warn):
            return
        self._committed.update(offsets)
        for tp in offsets:
            self._commit_later.pop(tp, None)

    def _rejected_by_rebalance(self, offsets: Mapping[TopicPartition, int], err: Any) -> bool:
        """Whether the group rejected this commit because it moved on to a new generation (a
        member joined or its session expired) while the commit was on its way. That is no
        failure of the bus: raising would stop a healthy member in every such rebalance.
        Partitions being revoked are left to their next owner, which replays from the last
        committed offset (at-least-once); the others are committed again by the next
        ``poll``/``consume``, once this member has rejoined with its new generation.
        """
        if not isinstance(err, KafkaError) or err.code() not in _REBALANCE_ERRORS:
            return False
        later = {tp: pos for tp, pos in offsets.items() if tp not in (self._revoking or ())}
        for tp, pos in later.items():
            self._commit_later[tp] = max(pos, self._commit_later.get(tp, pos))
        self._warn(err, f"commit of {dict(offsets)} (rejected by a rebalance; retried after it, if still owned)")
        return True

    def _retry_rejected_commit(self) -> None:
        """Commit again what a rebalance rejected, for the partitions still owned."""
        if not self._commit_later:
            return
        owned = set(self.assignment())
        retry = {tp: pos for tp, pos in self._commit_later.items() if tp in owned}
        self._commit_later.clear()
        if retry:
            self.commit(retry)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        request = [confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in partitions]
        if not request:
            return {}
        result = _retrying(
            lambda: self._consumer.committed(request, timeout=_METADATA_TIMEOUT_S), "reading committed offsets"
        )
        return {_tp(tp): (tp.offset if tp.offset >= 0 else None) for tp in result}

    def assignment(self) -> list[TopicPartition]:
        try:
            return [_tp(tp) for tp in self._consumer.assignment()]
        except KafkaException as exc:
            raise BusUnavailable(f"reading the assignment failed: {exc}") from exc

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._seek({partition: offset})

    def _seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            # A seek discards what was read past it: commit(None) must not commit that.
            self._positions.pop(tp, None)
            self._commit_later.pop(tp, None)
            if self._assigning is not None and tp in self._assigning:
                self._pending_seeks[tp] = offset
                continue
            try:
                self._consumer.seek(confluent_kafka.TopicPartition(tp.topic, tp.partition, offset))
            except KafkaException as exc:
                raise BusUnavailable(f"seek {tp} to {offset} failed (is it assigned?): {exc}") from exc

    def _owned(self, partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
        owned = self.assignment() + sorted(self._assigning or ())
        if partitions is None:
            return owned
        return list(partitions)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek({tp: _OFFSET_BEGINNING for tp in self._owned(partitions)})

    def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None
    ) -> None:
        targets = self._owned(partitions)
        if not targets:
            return
        request = [confluent_kafka.TopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in targets]
        try:
            found = self._consumer.offsets_for_times(request, timeout=_METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise BusUnavailable(f"offsets for timestamp {timestamp_ms} failed: {exc}") from exc
        # No message at or after the timestamp: Kafka answers -1 (the end).
        self._seek({_tp(tp): (tp.offset if tp.offset >= 0 else _OFFSET_END) for tp in found})

    def close(self) -> None:
        """Leave the group without committing and without calling on_revoke/on_lost.

        Callbacks are skipped so an ``on_revoke`` that commits cannot commit past a message
        whose processing failed when close() runs from a ``finally``. Safe to call twice.
        """
        if self._closed:
            return
        self._closed = True
        if self._client is None:
            return
        try:
            self._client.close()
        except (KafkaException, RuntimeError) as exc:
            logger.warning("closing the Kafka consumer failed: %s", exc)


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
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._common: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "logger": _librdkafka_logger,
        }
        self._linger_ms = linger_ms
        self._extra, self._extra_consumer, self._extra_producer = _scoped(extra_config or {})
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
            extra_config=_parse_extra(getattr(settings.bus, "kafka_extra_config", "")),
            policy=TopicPolicy.from_settings(settings),
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
            "partition.assignment.strategy": _COOPERATIVE,
            "enable.partition.eof": False,
            # One message may be as large as a topic accepts.
            "fetch.message.max.bytes": max(1_048_576, self.policy.max_message_bytes),
            **self._extra,
            **self._extra_consumer,
        }

    def producer(self) -> KafkaProducer:
        return KafkaProducer(self.producer_config(), self)

    def consumer(self, group_id: str) -> KafkaConsumer:
        # A strategy set in extra_config is the operator's choice, for every subscription.
        chosen = "partition.assignment.strategy" in {**self._extra, **self._extra_consumer}
        return KafkaConsumer(self.consumer_config(group_id), multi_topic_assignment=None if chosen else _RANGE)

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
            metadata = admin.list_topics(timeout=_METADATA_TIMEOUT_S)
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
            request_timeout=_METADATA_TIMEOUT_S,
        )
        for topic, future in futures.items():
            try:
                future.result(_METADATA_TIMEOUT_S + 5)
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
        deadline = time.monotonic() + _METADATA_TIMEOUT_S
        pending = list(topics)
        while pending:
            try:
                metadata = self._admin_client().list_topics(timeout=_METADATA_TIMEOUT_S)
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
        return _partitions_in_metadata(self._admin_client(), topic)

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
            futures = self._admin_client().list_offsets(request, request_timeout=_METADATA_TIMEOUT_S)
            found = {tp.partition: int(f.result().offset) for tp, f in futures.items()}
            return [found[p] for p in range(count)]

        return _retrying(ask, f"{what} offsets of topic {topic!r}")

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference releases it.
        self._admin = None


def _scoped(extra: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """``extra_config`` split into (every client, consumers only, producers only)."""
    common: dict[str, str] = {}
    consumer: dict[str, str] = {}
    producer: dict[str, str] = {}
    for key, value in extra.items():
        if key.startswith("consumer."):
            consumer[key.removeprefix("consumer.")] = value
        elif key.startswith("producer."):
            producer[key.removeprefix("producer.")] = value
        else:
            common[key] = value
    return common, consumer, producer


def _parse_extra(text: str) -> dict[str, str]:
    """``"k=v,k2=v2"`` -> dict (the form of CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG)."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG: expected key=value items, found {item!r}")
        out[key.strip()] = value.strip()
    return out
