"""One re-entrant lock per partition: calls on one Scheduler are serialized per partition."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager


class PartitionLocks:
    """Locks by partition, created on first use. Re-entrant: ``due`` enqueues released revisits
    and completes expired tickets while it holds the same locks."""

    def __init__(self) -> None:
        self._locks: dict[int, threading.RLock] = {}
        self._guard = threading.Lock()

    def lock(self, partition: int) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(partition)
            if lock is None:
                lock = self._locks[partition] = threading.RLock()
            return lock

    @contextmanager
    def holding(self, partitions: Iterable[int]) -> Iterator[None]:
        """Hold the locks of ``partitions`` (sorted by the caller: one order, no deadlock)."""
        with ExitStack() as held:
            for partition in partitions:
                held.enter_context(self.lock(partition))
            yield
