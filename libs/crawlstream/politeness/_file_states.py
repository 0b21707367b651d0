"""Frontier file states as Redis records them, checked against the files once per process.

Redis and a domain's files disagree after a crash between a file write and the Redis write
that records it (a torn tail, an append not recorded, a compaction or lane rewrite between
its rename and its Redis update); ``FrontierFiles.reconcile`` says what the file holds, and
Redis is corrected on the domain's first touch after ``load_partition``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import redis

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import HEADER_SIZE, LANE_SUFFIX, FileState, FrontierFiles
from crawlstream.politeness._keys import PartitionKeys, as_int

logger = logging.getLogger(__name__)


class FileStates:
    """Reads a domain's file (or lane) state from a Redis row, reconciled on first touch."""

    def __init__(self, files: FrontierFiles, client: redis.Redis) -> None:
        self._files = files
        self._redis = client
        self._verified: dict[int, set[str]] = {}  # per partition: domains (and lanes) checked

    def reset(self, partition: int) -> None:
        """Check every file of ``partition`` again (a new owner: the files may have moved on)."""
        self._verified[partition] = set()

    def forget(self, partition: int) -> None:
        self._verified.pop(partition, None)

    def recheck(self, partition: int, domain: str) -> None:
        """Check ``domain``'s file and lane again at their next read."""
        self._verified.setdefault(partition, set()).difference_update((domain, domain + LANE_SUFFIX))

    def fifo(self, partition: int, domain: str, row: Sequence[Any], keys: PartitionKeys) -> FileState:
        """The file state from ``row`` (gen, off, size first); on first touch in this process,
        checked against the file (torn tail, unfinished compaction) and corrected in Redis."""
        state = FileState(as_int(row[0]), as_int(row[1], HEADER_SIZE), as_int(row[2], HEADER_SIZE))
        verified = self._verified.setdefault(partition, set())
        if domain in verified:
            return state
        fixed = self._files.reconcile(partition, domain, state)
        verified.add(domain)
        if fixed != state:
            logger.warning(
                "frontier %s (partition %d): Redis said %s, file says %s; corrected",
                domain,
                partition,
                state,
                fixed,
            )
            self._redis.hset(
                keys.domain(domain),
                mapping={"gen": fixed.generation, "off": fixed.offset, "size": fixed.size},
            )
        return fixed

    def lane(
        self,
        partition: int,
        domain: str,
        row: Sequence[Any],
        keys: PartitionKeys,
        bounds: tuple[int, int] | None,
    ) -> tuple[FileState, int, int]:
        """``fifo`` for the priority lane (``row``: lg, lo, ls), with the priorities of its
        next and last unread records (``bounds``: lp, lz as stored; None: not needed). When the
        file corrects Redis they are read again from the file."""
        state = FileState(as_int(row[0]), as_int(row[1], HEADER_SIZE), as_int(row[2], HEADER_SIZE))
        lp, lz = bounds if bounds is not None else (0, 0)
        verified = self._verified.setdefault(partition, set())
        key = domain + LANE_SUFFIX  # '~' is never in a domain
        if key in verified:
            return state, lp, lz
        fixed = self._files.reconcile(partition, domain, state, lane=True)
        verified.add(key)
        if fixed == state:
            return fixed, lp, lz
        try:
            unread = [e for e, _ in self._files.read(partition, domain, fixed, sys.maxsize, lane=True)]
        except ChecksumMismatch:
            unread = []
        lp, lz = (unread[0].priority, unread[-1].priority) if unread else (0, 0)
        logger.warning(
            "frontier lane %s (partition %d): Redis said %s, file says %s; corrected", domain, partition, state, fixed
        )
        self._redis.hset(
            keys.domain(domain),
            mapping={"lg": fixed.generation, "lo": fixed.offset, "ls": fixed.size, "lp": lp, "lz": lz},
        )
        return fixed, lp, lz
