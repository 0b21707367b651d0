"""Real low-disk conditions for the disk-floor tests: a floor just under the real free space, and a
ballast file that takes the disk below it (``posix_fallocate``: instant, no data written)."""

from __future__ import annotations

import os
from pathlib import Path

from crawlstream.durable import MIB, DiskFloor

# How far below the floor a laid ballast takes the disk; the floor is twice as far under the free
# space. Other tests of a parallel run write and delete gigabytes meanwhile (the soak, the brokers).
MARGIN = 1024 * MIB


def floor_mib(path: Path) -> int:
    """A floor (MB) ``2 * MARGIN`` under the free space now: the disk is above it until a ballast is laid."""
    return (DiskFloor(path, 1).free_bytes() - 2 * MARGIN) // MIB


class Ballast:
    """A file under ``directory`` that, laid, takes the disk ~MARGIN below a floor of ``floor_mib``
    MB; lifted, the disk is back where it was.

    It is sized when laid, not when the floor was taken: a fixed size once left the disk above the
    floor in CI, after another test freed space in between."""

    def __init__(self, directory: Path, floor_mib: int) -> None:
        self.path = directory / "ballast.bin"
        self._floor = floor_mib * MIB

    def lay(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        probe = DiskFloor(self.path.parent, self._floor)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(5):  # top it up if space was freed while it was laid
                free = probe.free_bytes()
                if free < self._floor - MARGIN // 2:
                    return
                held = os.fstat(fd).st_blocks * 512
                os.posix_fallocate(fd, 0, held + free - self._floor + MARGIN)
            raise AssertionError(f"the disk stays above the floor: {probe.describe()}")
        finally:
            os.close(fd)

    def lift(self) -> None:
        self.path.unlink(missing_ok=True)
