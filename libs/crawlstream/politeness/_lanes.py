"""Priority lanes (issue 14, ADR 016): each domain's file of URLs that go before its FIFO file.

A lane (``FrontierFiles`` with ``lane=True``) is kept in read order, highest priority first,
then arrival, by appending when the new records sort last and by a rewrite (generation + 1,
the compaction's crash-safe steps) when one must go before unread records. Redis keeps the
priorities of its next and last unread records (``lp``, ``lz``): the claim's tie-break and
the test for "appending keeps the order".
"""

from __future__ import annotations

import heapq
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import FileState, FrontierEntry, FrontierFiles
from crawlstream.politeness._file_states import FileStates
from crawlstream.politeness._keys import PartitionKeys, as_int

logger = logging.getLogger(__name__)


def _lane_order(entry: FrontierEntry) -> int:
    return -entry.priority


class PriorityLanes:
    """Adds entries to domains' lanes in read order and reads the priority at a lane's head."""

    def __init__(self, files: FrontierFiles, client: redis.Redis, states: FileStates, stats: Counter[str]) -> None:
        self._files = files
        self._redis = client
        self._states = states
        self._stats = stats

    def add(
        self, partition: int, keys: PartitionKeys, domain: str, row: Sequence[Any], entries: Sequence[FrontierEntry]
    ) -> tuple[FileState, int, int]:
        """``insert`` into the lane whose Redis fields are ``row`` (lg, lo, ls, lp, lz), reconciled
        first; the caller stores what it returns unless ``insert`` did (see there)."""
        bounds = (as_int(row[3]), as_int(row[4]))
        state, lp, lz = self._states.lane(partition, domain, row[0:3], keys, bounds)
        return self.insert(partition, keys, domain, state, lp, lz, entries)

    def insert(
        self,
        partition: int,
        keys: PartitionKeys,
        domain: str,
        state: FileState,
        lp: int,
        lz: int,
        entries: Sequence[FrontierEntry],
    ) -> tuple[FileState, int, int]:
        """Add ``entries`` to the priority lane keeping its read order (priority, then arrival);
        returns the new state and the priorities of its next and last records (``lp``, ``lz``).

        Appends when every new entry sorts after the unread ones (no higher priority than the
        last, ``lz``: the usual case, a migration's ordered rows included); the caller stores
        the state (a crash before that leaves bytes past the stored size, which ``reconcile``
        adopts). Otherwise rewrites the unread records merged with the new ones as generation
        + 1 (``FrontierFiles.rewrite``) and stores the state at once, like a compaction: a
        crash between the rename and that write is repaired by ``reconcile``."""
        ordered = sorted(entries, key=_lane_order)  # stable: arrival order within a priority
        if state.unread_bytes == 0 or ordered[0].priority <= lz:
            new = self._files.append(partition, domain, ordered, state, lane=True)
            return new, ordered[0].priority if state.unread_bytes == 0 else lp, ordered[-1].priority
        try:
            unread = [e for e, _ in self._files.read(partition, domain, state, sys.maxsize, lane=True)]
        except ChecksumMismatch as exc:
            self._stats["damaged_files"] += 1
            logger.error("frontier lane %s (partition %d): %s; dropping its unread records", domain, partition, exc)
            unread = []
        merged = list(heapq.merge(unread, ordered, key=_lane_order))  # ties: the unread ones first
        new = self._files.rewrite(partition, domain, state, merged)
        lp, lz = merged[0].priority, merged[-1].priority
        self._redis.hset(
            keys.domain(domain), mapping={"lg": new.generation, "lo": new.offset, "ls": new.size, "lp": lp, "lz": lz}
        )
        self._stats["lane_rewrites"] += 1
        return new, lp, lz

    def head(self, partition: int, domain: str, state: FileState) -> int:
        """The priority of the lane's record at ``state.offset`` (0: none; the claim's tie-break)."""
        try:
            got = self._files.read(partition, domain, state, limit=1, lane=True)
        except ChecksumMismatch:
            return 0  # the dispatch's read reports the damage when it gets there
        return got[0][0].priority if got else 0
