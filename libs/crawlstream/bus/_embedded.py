"""The embedded bus: Kafka's semantics on a durable local log, for one process.

``crawlstream run`` runs every service in one process (possibly on several threads), so
this backend gives them what Kafka gives distributed services: topics of partitions with
offsets, consumer groups with committed offsets, rebalances announced through callbacks,
and replay. The on-disk log lives in ``_embedded_log.py``; this module owns topics, groups
and offsets.

Layout under ``root``::

    .lock                               fcntl lock: one process per log
    topics/<topic>/meta.json            {"partitions": N}
    topics/<topic>/<partition>/...      segments and indexes (see _embedded_log)
    groups/<group>/offsets.json         {"<topic>": {"<partition>": next_offset}}

Durability (``fsync``), precisely:

* A message is *acknowledged* when ``Producer.flush`` returns: its batch has been
  ``write()``-n to the segment file (one write per partition batch) under every policy, so
  a kill -9 of the process never loses it.
* ``'always'``: ``flush`` also fsyncs every segment it wrote to before returning, and
  every commit fsyncs the offsets file: nothing acknowledged is lost on power loss.
* ``'batch'`` (default): segments are fsynced by any consumer's ``commit`` (all segments
  written since the last fsync, *before* the offsets file is replaced, so a committed input
  never outlives the outputs produced from it), when a segment rolls, and on ``close``.
  A power loss can lose what was flushed since the last commit, never a commit's inputs.
* ``'never'``: no fsync; offsets files are still replaced atomically (temp + rename).

Groups: members of one group in this process share the partitions of their subscribed
topics with Kafka's *range* assignor per topic (partition p of every topic goes to the same
member: the design's co-partitioning). A member joining or leaving starts a rebalance,
which each member carries out inside its next ``poll``/``consume`` the eager way: revoke
everything it holds (``on_revoke``, where it commits), then take its new share
(``on_assign``). A partition is handed to its new owner only after the previous owner has
revoked it (or closed), so a commit in ``on_revoke`` is always seen by the next owner. A
member that stops polling keeps its partitions (there is no session timeout in one
process), and ``on_lost`` is never called.

Several processes (``member=(i, n)``; ``crawlstream run --processes N``, ADR 025): every process
opens the log with a shared ``flock`` on ``.lock`` (an exclusive open, the single-process mode,
waits for none and refuses while any runs), appends through the partition's append lock and
reads what the others published (see ``_embedded_log``; a consumer with nothing to read looks
again after ``_SHARED_POLL_MIN_S``, backing off to ``_SHARED_POLL_MAX_S``). Membership is
static, like Kafka's with fixed member ids:
process ``i`` of ``n`` owns partition ``p`` of every topic of a group when ``p % n == i``, the
same partitions for every topic (co-partitioning holds); inside the process its members share
them by range as above. Groups in ``solo_groups`` (services whose state is one directory: the
content store, the lake sink, the run's stats) are owned whole by the one process that runs
them. Each process writes its group commits to its own file, ``offsets.<i>-of-<n>.json`` (only
the partitions it owns; ``offsets.json`` for a whole group), and a group's committed offset of
a partition is the one in the most recently written file that has it (``read_committed``), so
a run with another N, or a single-process run, resumes where the last owner committed.

``format.json`` (``{"version": 2}``, written by the first shared open) marks a log that may hold
per-member offsets files; a log of a newer version is refused with a message.

Retention is out of scope: nothing is deleted, so no group ever misses unconsumed data.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawlstream.bus._base import (
    Bus,
    Consumer,
    Message,
    PartitionsCallback,
    Producer,
    TopicPartition,
)
from crawlstream.bus._embedded_log import Cursor, PartitionLog, PendingRecord, read_end_offset
from crawlstream.durable import write_atomically
from crawlstream.errors import BusUnavailable, ChecksumMismatch, ConfigError, StorageUnavailable

__all__ = ["FORMAT_VERSION", "EmbeddedBus", "LogState", "read_committed", "read_log_state"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_FSYNC_POLICIES = ("always", "batch", "never")
_FETCH_BYTES = 1 << 20
_PREFETCH_RECORDS = 2048
# Shared mode: an idle consumer looks for other processes' appends after 5 ms, then less and less
# often while nothing comes (doubling to 40 ms): an idle crawl costs little CPU, a busy one finds data.
_SHARED_POLL_MIN_S = 0.005
_SHARED_POLL_MAX_S = 0.04
FORMAT_VERSION = 2
_OFFSETS_GLOB = "offsets*.json"


def offsets_file_name(member: tuple[int, int]) -> str:
    """The offsets file a process writes: ``offsets.json`` for a whole group, else per member."""
    index, count = member
    return "offsets.json" if count == 1 else f"offsets.{index}-of-{count}.json"


def read_committed(group_dir: Path) -> dict[TopicPartition, int]:
    """A group's committed offsets on disk, without any lock: per partition, the value of the
    most recently written offsets file that has it (files are replaced atomically)."""
    found: list[tuple[int, str, Path]] = []
    for path in group_dir.glob(_OFFSETS_GLOB):
        if path.name.endswith(".tmp"):
            continue
        try:
            found.append((path.stat().st_mtime_ns, path.name, path))
        except FileNotFoundError:
            continue
    out: dict[TopicPartition, int] = {}
    for _, _, path in sorted(found):  # oldest first: newer files overwrite
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            raise BusUnavailable(
                f"unreadable offsets file {path}: {exc}; it is replaced atomically, so this is "
                "outside damage: delete it to restart the group from the beginning"
            ) from exc
        for topic, parts in raw.items():
            for p, offset in parts.items():
                out[TopicPartition(topic, int(p))] = int(offset)
    return out


def _check_name(kind: str, name: str) -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"invalid {kind} name {name!r}: expected 1-249 characters of [A-Za-z0-9._-] "
            "(it becomes a directory name); rename it"
        )
    return name


@dataclass(frozen=True)
class LogState:
    """What ``read_log_state`` found: log ends per topic (one per partition) and each group's
    committed offsets (``{group: {topic: {partition: next offset}}}``)."""

    end_offsets: dict[str, list[int]]
    committed: dict[str, dict[str, dict[int, int]]]


def read_log_state(root: Path) -> LogState:
    """Committed and end offsets of the embedded log at ``root`` (``<data_dir>/bus``), read-only.

    Takes no lock and writes nothing, so it is safe beside a running crawl of one or several
    processes (a status page); values are a moment's view (a batch being appended is not counted).
    """
    ends: dict[str, list[int]] = {}
    for meta_path in sorted((root / "topics").glob("*/meta.json")):
        try:
            partitions = int(json.loads(meta_path.read_text())["partitions"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        ends[meta_path.parent.name] = [read_end_offset(meta_path.parent / str(p)) for p in range(partitions)]
    committed: dict[str, dict[str, dict[int, int]]] = {}
    for group_dir in sorted(p for p in (root / "groups").glob("*") if p.is_dir()):
        by_topic: dict[str, dict[int, int]] = {}
        for tp, offset in sorted(read_committed(group_dir).items()):
            by_topic.setdefault(tp.topic, {})[tp.partition] = offset
        committed[group_dir.name] = by_topic
    return LogState(ends, committed)


def _write_json_atomic(path: Path, data: Any, *, fsync: bool) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # writers never share it
    write_atomically(path, json.dumps(data, sort_keys=True).encode(), fsync=fsync, tmp=tmp)


class _Topic:
    def __init__(self, name: str, logs: list[PartitionLog]) -> None:
        self.name = name
        self.logs = logs


class _Group:
    """One consumer group's shared state. Fields are guarded by the bus condition."""

    def __init__(self, name: str, directory: Path, committed: dict[TopicPartition, int]) -> None:
        self.name = name
        self.directory = directory
        self.committed = committed
        self.io_lock = threading.Lock()  # serialises offsets-file writes
        self.generation = 0
        self.subscriptions: dict[int, tuple[str, ...]] = {}  # member id -> topics
        self.targets: dict[int, set[TopicPartition]] = {}
        self.holders: dict[TopicPartition, int] = {}  # partition -> member holding it now


class EmbeddedBus(Bus):
    """The embedded durable log (see the module docstring for layout and durability).

    ``default_partitions`` is used for topics created implicitly (produce or
    ``Producer.partition_count`` on an unknown topic, like Kafka's auto-create).
    ``segment_bytes`` bounds a segment file before the log rolls to a new one.
    """

    def __init__(
        self,
        root: Path,
        *,
        default_partitions: int = 8,
        fsync: str = "batch",
        segment_bytes: int = 64 * 1024 * 1024,
        member: tuple[int, int] | None = None,
        solo_groups: Collection[str] = (),
        lock_wait_s: float = 0.0,
        first: bool = False,
    ) -> None:
        if member is not None and not 0 <= member[0] < member[1]:
            raise ConfigError(f"member must be (index, count) with 0 <= index < count, got {member}")
        if fsync not in _FSYNC_POLICIES:
            raise ConfigError(f"fsync policy must be one of {_FSYNC_POLICIES}, got {fsync!r}")
        if default_partitions <= 0 or segment_bytes <= 0:
            raise ConfigError("default_partitions and segment_bytes must be positive")
        self.root = Path(root)
        self.default_partitions = default_partitions
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.member = member
        self.shared = member is not None
        self.solo_groups = frozenset(solo_groups)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # group state changes; see _wake_all
        self._topics: dict[str, _Topic] = {}
        self._groups: dict[str, _Group] = {}
        self._data_versions: dict[str, int] = {}  # topic -> flushes so far
        self._waiters: dict[_EmbeddedConsumer, frozenset[str]] = {}  # consumer -> its topics
        self._next_member = 0
        self._closed = False
        self._lock_fd = self._acquire_process_lock(lock_wait_s, first=first)
        try:
            self._check_format()
            self._load_topics()
        except BaseException:
            self._release_process_lock()
            raise
        logger.info(
            "embedded bus open at %s: %d topics, fsync=%s", self.root, len(self._topics), fsync
        )

    @classmethod
    def from_settings(cls, settings: Any) -> EmbeddedBus:
        return cls(
            Path(settings.data_dir) / "bus",
            default_partitions=settings.bus.partitions,
            fsync=settings.bus.fsync,
            segment_bytes=settings.bus.segment_bytes,
        )

    # -- process lock ---------------------------------------------------------------------

    def _acquire_process_lock(self, wait_s: float, *, first: bool) -> int:
        """Exclusive (one process) or shared (the members of one run); retried for ``wait_s``
        (a new run waits out the processes of a killed one that are still stopping). ``first``
        (shared): the run's first process takes it exclusively, then shares it, so no process
        of an earlier run is still at work when this run's members start."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BusUnavailable(f"cannot open the embedded log at {self.root}: {exc}") from exc
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared and not first else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise BusUnavailable(
                    f"the embedded log at {self.root} is already open in another process "
                    f"(pid {holder}); stop that process or use a different data dir "
                    "(CRAWLSTREAM_DATA_DIR)"
                ) from exc
        if not self.shared or first:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        if self.shared and first:
            fcntl.flock(fd, fcntl.LOCK_SH)  # the run's other members may join now
        return fd

    def _check_format(self) -> None:
        path = self.root / "format.json"
        try:
            version = int(json.loads(path.read_text())["version"])
        except FileNotFoundError:
            version = 1
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BusUnavailable(f"unreadable {path}: {exc}; expected {{\"version\": N}}") from exc
        if version > FORMAT_VERSION:
            raise BusUnavailable(
                f"the embedded log at {self.root} has format version {version}, newer than this "
                f"crawlstream reads ({FORMAT_VERSION}): upgrade crawlstream, or use another data dir"
            )
        if self.shared and version < FORMAT_VERSION:
            _write_json_atomic(path, {"version": FORMAT_VERSION}, fsync=self.fsync != "never")

    def _release_process_lock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- topics ---------------------------------------------------------------------------

    def _load_topics(self) -> None:
        topics_dir = self.root / "topics"
        if not topics_dir.is_dir():
            return
        for meta_path in sorted(topics_dir.glob("*/meta.json")):
            name = meta_path.parent.name
            try:
                partitions = int(json.loads(meta_path.read_text())["partitions"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise BusUnavailable(
                    f"unreadable topic metadata {meta_path}: {exc}; expected "
                    '{"partitions": N}; restore it (N = the number of partition directories)'
                ) from exc
            self._topics[name] = self._open_topic(name, partitions)

    @staticmethod
    def _read_meta(path: Path) -> int | None:
        try:
            return int(json.loads(path.read_text())["partitions"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BusUnavailable(f"unreadable topic metadata {path}: {exc}") from exc

    def _open_topic(self, name: str, partitions: int) -> _Topic:
        directory = self.root / "topics" / name
        logs = [
            PartitionLog(
                directory / str(p), name, p, segment_bytes=self.segment_bytes, fsync=self.fsync,
                shared=self.shared,
            )
            for p in range(partitions)
        ]
        return _Topic(name, logs)

    def _create_topic(self, name: str, partitions: int) -> _Topic:
        """Create ``name`` unless it exists; returns it either way. Takes the bus lock."""
        _check_name("topic", name)
        with self._cond:
            self._check_open()
            topic = self._topics.get(name)
            if topic is not None:
                return topic
            if partitions <= 0:
                raise ConfigError(f"a topic needs at least one partition, got {partitions}")
            directory = self.root / "topics" / name
            existing = self._read_meta(directory / "meta.json") if self.shared else None
            if existing is not None:  # another process of the run created it meanwhile
                topic = self._topics[name] = self._open_topic(name, existing)
                return topic
            directory.mkdir(parents=True, exist_ok=True)
            topic = self._open_topic(name, partitions)
            _write_json_atomic(
                directory / "meta.json", {"partitions": partitions}, fsync=self.fsync != "never"
            )
            self._topics[name] = topic
            logger.info("created topic %s with %d partitions", name, partitions)
            for group in self._groups.values():
                if any(name in topics for topics in group.subscriptions.values()):
                    self._rebalance(group)
            self._wake_all()
            return topic

    def _topic(self, name: str, *, create: bool) -> _Topic:
        topic = self._topics.get(name)
        if topic is not None:
            return topic
        if create:
            return self._create_topic(name, self.default_partitions)
        raise BusUnavailable(
            f"unknown topic {name!r}: create it first (create_topics) or produce to it"
        )

    def create_topics(self, topics: Iterable[str], partitions: int) -> None:
        for name in topics:
            topic = self._create_topic(name, partitions)
            if len(topic.logs) != partitions:
                logger.info(
                    "topic %s already exists with %d partitions (asked for %d): kept",
                    name, len(topic.logs), partitions,
                )

    def partition_count(self, topic: str) -> int:
        return len(self._topic(topic, create=False).logs)

    def topics(self) -> list[str]:
        """Names of the existing topics."""
        return sorted(self._topics)

    def end_offsets(self, topic: str) -> list[int]:
        """The log end (next offset) of each partition of ``topic``."""
        return [log.end_offset for log in self._topic(topic, create=False).logs]

    def start_offsets(self, topic: str) -> list[int]:
        """The first offset of each partition of ``topic`` (0: the embedded log deletes nothing)."""
        return [log.start_offset for log in self._topic(topic, create=False).logs]

    # -- producers and consumers -----------------------------------------------------------

    def producer(self) -> Producer:
        self._check_open()
        return _EmbeddedProducer(self)

    def consumer(self, group_id: str) -> Consumer:
        self._check_open()
        return _EmbeddedConsumer(self, self._group(group_id))

    def _group(self, name: str) -> _Group:
        _check_name("group", name)
        with self._cond:
            group = self._groups.get(name)
            if group is None:
                directory = self.root / "groups" / name
                group = _Group(name, directory, read_committed(directory))
                self._groups[name] = group
            return group

    def group_share(self, group: str) -> tuple[int, int]:
        """(index, count): this process owns partition p of ``group``'s topics when p % count == index."""
        if self.member is None or group in self.solo_groups:
            return (0, 1)
        return self.member

    def _new_member(self) -> int:
        with self._cond:
            self._next_member += 1
            return self._next_member

    def _rebalance(self, group: _Group) -> None:
        """Recompute every member's target share (range per topic). Caller holds the lock."""
        group.generation += 1
        targets: dict[int, set[TopicPartition]] = {m: set() for m in group.subscriptions}
        all_topics = sorted({t for topics in group.subscriptions.values() for t in topics})
        for name in all_topics:
            topic = self._topics.get(name)
            if topic is None:
                continue  # subscribed before it exists: assigned when it is created
            members = sorted(m for m, topics in group.subscriptions.items() if name in topics)
            index, of = self.group_share(group.name)
            mine = [p for p in range(len(topic.logs)) if p % of == index]
            per, extra = divmod(len(mine), len(members))
            start = 0
            for i, member in enumerate(members):
                count = per + (1 if i < extra else 0)
                targets[member].update(TopicPartition(name, p) for p in mine[start : start + count])
                start += count
        group.targets = targets
        logger.info(
            "group %s rebalancing (generation %d, %d members)",
            group.name, group.generation, len(group.subscriptions),
        )
        self._wake_all()

    def _wake_all(self) -> None:
        """Wake every waiting consumer (group state changed). Caller holds the lock."""
        self._cond.notify_all()
        for consumer in self._waiters:
            consumer._wake.notify()

    def _published(self, topics: Iterable[str]) -> None:
        """New data in ``topics``: wake only the consumers subscribed to one of them (a wake-up
        costs a consumer its poll, and every service of a process shares one interpreter)."""
        flushed = set(topics)
        with self._lock:
            for name in flushed:
                self._data_versions[name] = self._data_versions.get(name, 0) + 1
            for consumer, subscribed in self._waiters.items():
                if not flushed.isdisjoint(subscribed):
                    consumer._wake.notify()

    def _sync_dirty(self) -> None:
        """fsync every segment written since its last fsync (the 'batch' policy's barrier)."""
        if self.fsync != "batch":
            return
        for topic in list(self._topics.values()):
            for log in topic.logs:
                if log.dirty:
                    try:
                        log.sync()
                    except OSError as exc:
                        raise StorageUnavailable(f"fsync of {log.directory} failed: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise BusUnavailable(f"the embedded bus at {self.root} is closed")

    def corrupt_records_skipped(self) -> int:
        """Corrupt records readers have reported and skipped since open (see ChecksumMismatch)."""
        return sum(log.corrupt_records_skipped for t in self._topics.values() for log in t.logs)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._wake_all()
        for topic in self._topics.values():
            for log in topic.logs:
                log.close()
        self._release_process_lock()
        logger.info("embedded bus at %s closed", self.root)

    def __enter__(self) -> EmbeddedBus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _EmbeddedProducer(Producer):
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


class _EmbeddedConsumer(Consumer):
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
