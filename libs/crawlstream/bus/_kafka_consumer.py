"""The Kafka backend's consumer: one member of a consumer group, with manual commits."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

from crawlstream.bus._base import Consumer, Message, PartitionsCallback, TopicPartition
from crawlstream.bus._kafka_support import METADATA_TIMEOUT_S, WarnOnce, call_within, retrying
from crawlstream.errors import BusUnavailable, ClientWedged

__all__ = ["COOPERATIVE", "RANGE", "KafkaConsumer"]

logger = logging.getLogger(__name__)

# Offsets meaning "no committed offset" (librdkafka OFFSET_INVALID) and logical positions.
_OFFSET_INVALID = confluent_kafka.OFFSET_INVALID
_OFFSET_BEGINNING = confluent_kafka.OFFSET_BEGINNING
_OFFSET_END = confluent_kafka.OFFSET_END

COOPERATIVE = "cooperative-sticky"
# Commit errors that mean the group has moved on to a new generation (a rebalance).
_REBALANCE_ERRORS = frozenset(
    {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS}
)
RANGE = "range"


def _tp(tp: confluent_kafka.TopicPartition) -> TopicPartition:
    return TopicPartition(str(tp.topic), int(tp.partition))


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

    A synchronous commit gives up after ``commit_deadline_s`` (0: never) with ``ClientWedged``:
    librdkafka can block in one forever after broker failovers (confluent-kafka-python #1801),
    and a member stuck there holds its partitions while doing nothing.
    """

    def __init__(
        self, config: Mapping[str, Any], *, multi_topic_assignment: str | None = RANGE,
        commit_deadline_s: float = 0.0,
    ) -> None:
        self._config = dict(config)
        self._commit_deadline_s = commit_deadline_s
        self._wedged = False
        self._polling: int | None = None  # the thread inside poll/consume (its callbacks run there)
        self._multi_topic_assignment = multi_topic_assignment
        self._client: Any = None
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._assigning: set[TopicPartition] | None = None
        self._revoking: set[TopicPartition] | None = None
        self._commit_later: dict[TopicPartition, int] = {}
        self._pending_seeks: dict[TopicPartition, int] = {}
        self._sought: set[TopicPartition] = set()  # sought since assigned: not read from the commit
        self._on_assign: PartitionsCallback | None = None
        self._on_revoke: PartitionsCallback | None = None
        self._on_lost: PartitionsCallback | None = None
        self._warn = WarnOnce()
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
        return self._config.get("partition.assignment.strategy") == COOPERATIVE

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
            self._sought.discard(tp)

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
                with self._polling_here():
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
            with self._polling_here():
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
            KafkaException for ``retrying`` to judge; True otherwise."""
            try:
                result = self._bounded(lambda: self._consumer.commit(offsets=request, asynchronous=False),
                                       f"commit of {dict(offsets)}")
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
        if not retrying(attempt, f"commit of {dict(offsets)}", on_retry=self._warn):
            return
        self._committed.update(offsets)
        for tp in offsets:
            self._commit_later.pop(tp, None)

    @contextlib.contextmanager
    def _polling_here(self) -> Iterator[None]:
        self._polling = threading.get_ident()
        try:
            yield
        finally:
            self._polling = None

    def _bounded(self, call: Any, what: str) -> Any:
        """``call()`` given up on after ``commit_deadline_s`` (``call_within``): this consumer is
        then marked wedged.

        Not from a rebalance callback (``on_revoke`` commits): confluent-kafka lets one thread at a
        time use a consumer, and ``poll`` holds it while its callbacks run, so a commit on another
        thread would wait for the callback that waits for it. There the call runs in place."""
        if self._commit_deadline_s <= 0 or self._polling == threading.get_ident():
            return call()
        try:
            return call_within(call, self._commit_deadline_s, what, "bus.commit_deadline_s")
        except ClientWedged:
            self._wedged = True
            raise

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

        def ask() -> list[Any]:
            answer = self._consumer.committed(request, timeout=METADATA_TIMEOUT_S)
            failed = [tp for tp in answer if tp.error is not None]
            if failed:  # e.g. UNSTABLE_OFFSET_COMMIT: a transaction holds offsets for it; not "none"
                raise KafkaException(failed[0].error)
            return answer

        # Each retried error is logged (once per code): a group stuck here must say on what. Offsets
        # an open transaction holds (UNSTABLE_OFFSET_COMMIT) librdkafka asks for again until its
        # time-out, so they show as "Timed out". The admin API's ListConsumerGroupOffsets names
        # them, but it aborted this process when a broker restarted under it (librdkafka #4605;
        # the 3-minute soak, session 26): not used here.
        result = retrying(ask, "reading committed offsets", on_retry=self._warn)
        return {_tp(tp): (tp.offset if tp.offset >= 0 else None) for tp in result}

    def positions(self) -> dict[TopicPartition, int]:
        """librdkafka's application position (after the last message returned, and after the
        transaction markers and aborted messages behind it) where it is past the tracked one. A
        partition with nothing returned since it was assigned was read from its committed offset,
        so its position, once there is one, is at or past it; one sought since is left out (a seek
        back, the deduper's replay, must not move the group's commit back)."""
        known = [tp for tp in self.assignment() if tp in self._positions or tp not in self._sought]
        if not known:
            return {}
        try:
            found = self._consumer.position([confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in known])
        except KafkaException as exc:
            raise BusUnavailable(f"reading the positions of {known} failed: {exc}") from exc
        out: dict[TopicPartition, int] = {}
        for raw in found:
            tp = _tp(raw)
            tracked = self._positions.get(tp)
            if raw.error is None and raw.offset >= 0 and (tracked is None or raw.offset > tracked):
                self._positions[tp] = out[tp] = int(raw.offset)
        return out

    def group_metadata(self) -> Any:
        """The group's generation and member id, for a transactional producer's offsets (its commit
        is refused once this member was fenced out of the group by a rebalance: KIP-447)."""
        try:
            return self._consumer.consumer_group_metadata()
        except KafkaException as exc:
            raise BusUnavailable(f"reading the consumer group metadata failed: {exc}") from exc

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
            self._sought.add(tp)
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
            found = self._consumer.offsets_for_times(request, timeout=METADATA_TIMEOUT_S)
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
        if self._wedged:  # closing would wait on the stuck call: the process exit drops it
            logger.warning("not closing a wedged Kafka consumer (its commit never returned)")
            return
        try:
            self._client.close()
        except (KafkaException, RuntimeError) as exc:
            logger.warning("closing the Kafka consumer failed: %s", exc)
