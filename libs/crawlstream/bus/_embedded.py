"""The embedded bus: Kafka's semantics on a durable local log, for one process.

``crawlstream run`` runs every service in one process (possibly on several threads), so
this backend gives them what Kafka gives distributed services: topics of partitions with
offsets, consumer groups with committed offsets, rebalances announced through callbacks,
and replay. The on-disk log lives in ``_embedded_log.py`` (records framed by
``_embedded_records.py``); this module owns topics, groups and offsets, ``_embedded_clients.py``
the producer and the group member working on them, ``_embedded_files.py`` the offsets files.

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
import threading
import time
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from crawlstream.bus._base import Bus, Consumer, Producer, TopicPartition
from crawlstream.bus._embedded_clients import EmbeddedConsumer, EmbeddedProducer
from crawlstream.bus._embedded_files import (
    LogState,
    _check_name,
    _write_json_atomic,
    read_committed,
    read_log_state,
)
from crawlstream.bus._embedded_log import PartitionLog
from crawlstream.errors import BusUnavailable, ConfigError, StorageUnavailable

__all__ = ["FORMAT_VERSION", "EmbeddedBus", "LogState", "read_committed", "read_log_state"]

logger = logging.getLogger(__name__)

_FSYNC_POLICIES = ("always", "batch", "never")
FORMAT_VERSION = 2


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
        self._waiters: dict[EmbeddedConsumer, frozenset[str]] = {}  # consumer -> its topics
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
        return EmbeddedProducer(self)

    def consumer(self, group_id: str) -> Consumer:
        self._check_open()
        return EmbeddedConsumer(self, self._group(group_id))

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
