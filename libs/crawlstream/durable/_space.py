"""A free-space floor: writers pause while the data disk has less free space than it (ADR 033).

A write that meets a full disk fails half-way (``ENOSPC`` in the middle of a log append, a
Parquet file, an index version), and every writer then has its own recovery to run. Pausing
*before* that point, at a floor well above exhaustion, keeps every writer on its ordinary path:
what is not consumed stays in the topic, and the writes already under way (a batch, a revoke's
snapshot) still fit in the margin. Elasticsearch's "flood stage" watermark is the same idea.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from crawlstream.errors import DiskBelowFloor

__all__ = ["MIB", "DiskFloor"]

MIB = 1024 * 1024
CHECK_INTERVAL_S = 1.0  # how old a free-space reading may be (statvfs is ~2 us, a batch far more)


class DiskFloor:
    """``min_free_bytes`` on the file system holding ``path``: ``below()`` says when writers pause.

    The reading is ``f_bavail`` (what an unprivileged writer may still use, not the root
    reserve) and is cached for ``interval_s``, so a hot loop does not call ``statvfs`` per
    message; one instance may be shared by the threads of a process. A floor of 0 disables it.
    ``path`` need not exist yet: its nearest existing parent is asked (same file system).
    """

    def __init__(
        self,
        path: Path,
        min_free_bytes: int,
        *,
        interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min_free_bytes < 0:
            raise ValueError(f"min_free_bytes must be >= 0, got {min_free_bytes}")
        self.path = Path(path)
        self.min_free_bytes = min_free_bytes
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._free = 0

    @classmethod
    def mib(cls, path: Path, min_free_mib: int, *, interval_s: float = CHECK_INTERVAL_S) -> DiskFloor | None:
        """The floor of a ``..._MIN_FREE_MB`` setting; None when it is 0 (disabled)."""
        return cls(path, min_free_mib * MIB, interval_s=interval_s) if min_free_mib > 0 else None

    @property
    def enabled(self) -> bool:
        return self.min_free_bytes > 0

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use on ``path``'s file system (read now)."""
        probe = self.path
        while True:
            try:
                st = os.statvfs(probe)
            except FileNotFoundError:
                if probe == probe.parent:
                    raise
                probe = probe.parent
                continue
            return st.f_bavail * st.f_frsize

    def free(self) -> int:
        """The free bytes as of at most ``interval_s`` ago (what ``below`` judges)."""
        now = self._clock()
        if now - self._checked_at < self._interval_s:  # the hot path: no lock, no system call
            return self._free
        with self._lock:
            if now - self._checked_at >= self._interval_s:
                self._free = self.free_bytes()
                self._checked_at = now  # after the reading: a racing reader sees an old one at worst
            return self._free

    def below(self) -> bool:
        """True while the free space is under the floor (always False when disabled)."""
        return self.enabled and self.free() < self.min_free_bytes

    def describe(self) -> str:
        """"<free> MB free under <path>, the floor is <floor> MB" (for log lines and errors)."""
        return f"{self.free() // MIB} MB free under {self.path}, the floor is {self.min_free_bytes // MIB} MB"

    def check(self, what: str) -> None:
        """Raise ``DiskBelowFloor`` naming ``what`` was refused when below the floor (fresh reading)."""
        self._checked_at = float("-inf")
        if self.below():
            raise DiskBelowFloor(
                f"{what} refused: {self.describe()} (CRAWLSTREAM_DATA_DIR_MIN_FREE_MB); "
                "free some space and run it again"
            )
