"""The embedded bus's clients: the producer (batches per partition) and a group member (the consumer).

Both work on the state of their ``EmbeddedBus`` (its topics' logs, its groups, its condition);
``_embedded`` documents the semantics they give (durability of ``flush``, rebalances, commits).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from crawlstream.bus._base import Consumer, Message, PartitionsCallback, Producer, TopicPartition
from crawlstream.bus._embedded_files import _check_name, _write_json_atomic, offsets_file_name, read_committed
from crawlstream.bus._embedded_log import Cursor
from crawlstream.bus._embedded_records import PendingRecord
from crawlstream.errors import BusUnavailable, ChecksumMismatch, ConfigError, StorageUnavailable

if TYPE_CHECKING:
    from crawlstream.bus._embedded import EmbeddedBus, _Group

__all__ = ["EmbeddedConsumer", "EmbeddedProducer"]

logger = logging.getLogger(__name__)

_FETCH_BYTES = 1 << 20
_PREFETCH_RECORDS = 2048
# Shared mode: an idle consumer looks for other processes' appends after 5 ms, then less and less
# often while nothing comes (doubling to 40 ms): an idle crawl costs little CPU, a busy one finds data.
_SHARED_POLL_MIN_S = 0.005
_SHARED_POLL_MAX_S = 0.04


class EmbeddedProducer(Producer):
    """Buffers per partition; ``flush`` appends each partition's batch with one write."""

    def __init__(self, bus: EmbeddedBus) -> None:
        self._bus = bus
        self._pending: dict[tuple[str, int], list[PendingRecord]] = {}
        self._counts: dict[str, int] = {}
        self._closed = False

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
        if self._closed:
            raise BusUnavailable("produce on a closed producer")
        batch = self._pending.get((topic, partition))
        if batch is None:
            count = self.partition_count(topic)
            if not 0 <= partition < count:
                raise ConfigError(
                    f"partition {partition} of topic {topic!r} does not exist: it has {count} "
                    f"partitions (0..{count - 1}); the bus partitions setting must match the topic"
                )
            batch = self._pending[(topic, partition)] = []
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        batch.append((value, key, headers, timestamp_ms))

    def flush(self, timeout_s: float = 30.0) -> None:
        if not self._pending:
            return
        bus = self._bus
        bus._check_open()
        pending, self._pending = self._pending, {}
        try:
            for (topic, partition), records in pending.items():
                bus._topics[topic].logs[partition].append(records)
        except StorageUnavailable as exc:
            raise BusUnavailable(f"flush to the embedded log failed: {exc}") from exc
        bus._published(topic for topic, _ in pending)

    def partition_count(self, topic: str) -> int:
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = len(self._bus._topic(topic, create=True).logs)
        return count

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True


class EmbeddedConsumer(Consumer):
    """One member of a group. Owned by one thread; shares the group state via the bus lock."""

    def __init__(self, bus: EmbeddedBus, group: _Group) -> None:
        self._bus = bus
        self._group = group
        self._member = bus._new_member()
        self._generation = 0
        self._topics: tuple[str, ...] = ()
        self._on_assign: PartitionsCallback | None = None
        self._on_revoke: PartitionsCallback | None = None
        self._owned: list[TopicPartition] = []  # sorted
        self._pending: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}  # after the last message returned
        self._cursors: dict[TopicPartition, Cursor] = {}  # where the next fetch reads
        self._buffers: dict[TopicPartition, list[Message]] = {}
        self._rr = 0
        self._deferred: ChecksumMismatch | None = None
        self._closed = False
        self._wake = threading.Condition(bus._lock)  # notified by the bus (see _published)
        self._idle_wait_s = _SHARED_POLL_MIN_S

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
    ) -> None:
        for name in topics:
            _check_name("topic", name)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._topics = tuple(topics)
        with self._bus._cond:
            self._bus._check_open()
            self._bus._waiters[self] = frozenset(self._topics)
            self._group.subscriptions[self._member] = self._topics
            self._bus._rebalance(self._group)

    # -- rebalancing ----------------------------------------------------------------------

    def _revoke_all(self) -> None:
        revoked = self._owned
        if revoked and self._on_revoke is not None:
            self._on_revoke(list(revoked))  # still held: a commit here is accepted
        with self._bus._cond:
            for tp in revoked:
                if self._group.holders.get(tp) == self._member:
                    del self._group.holders[tp]
            self._bus._wake_all()
        if revoked:
            logger.info(
                "group %s member %d revoked %d partitions", self._group.name, self._member, len(revoked)
            )
        self._owned = []
        self._positions.clear()
        self._cursors.clear()
        self._buffers.clear()

    def _sync_group(self) -> None:
        """Carry out a pending rebalance: revoke all, then take the free part of the share."""
        group = self._group
        if self._generation != group.generation:
            self._revoke_all()
            with self._bus._cond:
                self._generation = group.generation
                self._pending = set(group.targets.get(self._member, ()))
        if not self._pending:
            return
        acquired: list[TopicPartition] = []
        with self._bus._cond:
            if self._generation != group.generation:
                return  # another rebalance began: start over on the next call
            for tp in sorted(self._pending):
                if tp not in group.holders:
                    group.holders[tp] = self._member
                    acquired.append(tp)
                    committed = group.committed.get(tp)
                    start = self._bus._topics[tp.topic].logs[tp.partition].start_offset
                    position = start if committed is None else max(committed, start)
                    self._positions[tp] = position
                    self._cursors[tp] = Cursor(position)
        if acquired:
            self._pending.difference_update(acquired)
            self._owned = sorted([*self._owned, *acquired])
            logger.info(
                "group %s member %d assigned %s", group.name, self._member,
                ", ".join(f"{tp.topic}/{tp.partition}" for tp in acquired),
            )
            if self._on_assign is not None:
                self._on_assign(acquired)

    # -- reading --------------------------------------------------------------------------

    def poll(self, timeout_s: float) -> Message | None:
        messages = self.consume(1, timeout_s)
        return messages[0] if messages else None

    def consume(self, max_messages: int, timeout_s: float) -> list[Message]:
        if self._closed:
            raise BusUnavailable("consume on a closed consumer")
        bus = self._bus
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            bus._check_open()
            self._sync_group()
            versions = [bus._data_versions.get(t, 0) for t in self._topics]
            out = self._take(max_messages)
            if out:
                self._idle_wait_s = _SHARED_POLL_MIN_S
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            with bus._cond:
                if (
                    [bus._data_versions.get(t, 0) for t in self._topics] == versions
                    and self._generation == self._group.generation
                    and not bus._closed
                    and not (self._pending and any(tp not in self._group.holders for tp in self._pending))
                ):
                    if bus.shared:
                        self._wake.wait(min(remaining, self._idle_wait_s))
                        self._idle_wait_s = min(2 * self._idle_wait_s, _SHARED_POLL_MAX_S)
                    else:
                        self._wake.wait(remaining)

    def _take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` from owned partitions, round-robin, from buffers then the log."""
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        out: list[Message] = []
        owned = self._owned
        n = len(owned)
        for i in range(n):
            if len(out) >= max_messages:
                break
            tp = owned[(self._rr + i) % n]
            buffer = self._buffers.get(tp)
            if not buffer:
                log = self._bus._topics[tp.topic].logs[tp.partition]
                cursor = self._cursors[tp]
                if log.surely_empty_from(cursor.offset):
                    continue
                buffer = []
                try:
                    log.fetch(cursor, max(_PREFETCH_RECORDS, max_messages), _FETCH_BYTES, buffer)
                except ChecksumMismatch as exc:
                    # The cursor has moved past the corrupt records; so does the position
                    # (everything before it was returned), so a commit does not replay them.
                    self._positions[tp] = cursor.offset
                    if not out:
                        raise
                    self._deferred = exc  # return what we have; report it on the next call
                    break
                if not buffer:
                    continue
            want = max_messages - len(out)
            if len(buffer) <= want:
                out.extend(buffer)
                self._buffers[tp] = []
                last = buffer[-1]
            else:
                out.extend(buffer[:want])
                self._buffers[tp] = buffer[want:]
                last = buffer[want - 1]
            self._positions[tp] = last.offset + 1
        self._rr = (self._rr + 1) % n if n else 0
        return out

    # -- offsets --------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        if self._closed:
            raise BusUnavailable("commit on a closed consumer")
        bus, group = self._bus, self._group
        bus._check_open()
        if offsets is None:
            wanted = dict(self._positions)
        else:
            wanted = {TopicPartition(*tp): int(o) for tp, o in offsets.items()}
            foreign = [tp for tp in wanted if tp not in self._positions]
            if foreign:
                raise BusUnavailable(
                    f"commit rejected for {foreign}: not assigned to this member of group "
                    f"{group.name!r} (a rebalance moved them); their messages will be redelivered "
                    "to the new owner"
                )
        with group.io_lock:
            with bus._cond:
                changed = {tp: o for tp, o in wanted.items() if group.committed.get(tp) != o}
                if not changed:
                    return
                group.committed.update(changed)
                share = bus.group_share(group.name)
                index, of = share
                snapshot: dict[str, dict[str, int]] = {}
                for tp, o in group.committed.items():
                    if tp.partition % of == index:  # what this process owns (all, in one process)
                        snapshot.setdefault(tp.topic, {})[str(tp.partition)] = o
            # 1. make what was produced durable, 2. then the offsets that depend on it.
            bus._sync_dirty()
            group.directory.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(
                group.directory / offsets_file_name(share), snapshot, fsync=bus.fsync != "never"
            )

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self._bus.shared:  # other processes commit too: read what is on disk
            on_disk = read_committed(self._group.directory)
            return {TopicPartition(*tp): on_disk.get(TopicPartition(*tp)) for tp in partitions}
        with self._bus._cond:
            return {TopicPartition(*tp): self._group.committed.get(TopicPartition(*tp)) for tp in partitions}

    def assignment(self) -> list[TopicPartition]:
        return list(self._owned)

    def _owned_or_all(self, partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
        if partitions is None:
            return list(self._owned)
        wanted = [TopicPartition(*tp) for tp in partitions]
        missing = [tp for tp in wanted if tp not in self._positions]
        if missing:
            raise BusUnavailable(
                f"cannot seek {missing}: not assigned to this consumer (assigned: {self._owned}); "
                "seek inside on_assign or after the first poll"
            )
        return wanted

    def _set_position(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset
        self._cursors[tp] = Cursor(offset)
        self._buffers.pop(tp, None)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        (tp,) = self._owned_or_all([partition])
        self._set_position(tp, max(offset, self._bus._topics[tp.topic].logs[tp.partition].start_offset))

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        for tp in self._owned_or_all(partitions):
            self._set_position(tp, self._bus._topics[tp.topic].logs[tp.partition].start_offset)

    def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None
    ) -> None:
        for tp in self._owned_or_all(partitions):
            log = self._bus._topics[tp.topic].logs[tp.partition]
            self._set_position(tp, log.offset_for_timestamp(timestamp_ms))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        bus, group = self._bus, self._group
        with bus._cond:
            for tp in self._owned:
                if group.holders.get(tp) == self._member:
                    del group.holders[tp]
            if group.subscriptions.pop(self._member, None) is not None and not bus._closed:
                bus._rebalance(group)
            bus._waiters.pop(self, None)
            bus._wake_all()
        self._owned = []
        self._positions.clear()
        self._cursors.clear()
        self._buffers.clear()
