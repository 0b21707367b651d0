"""Real low-disk conditions for the disk-floor tests: a floor just under the real free space, and a
ballast file that takes the disk below it (``posix_fallocate``: instant, no data written)."""

from __future__ import annotations

import os
from pathlib import Path

from crawlstream.durable import MIB, DiskFloor

# Each side of the floor: other processes on this machine write to the same disk meanwhile.
MARGIN = 1024 * MIB


def floor_mib(path: Path) -> int:
    """A floor (MB) ``MARGIN`` under the free space now: the disk is above it until a ballast is laid."""
    return (DiskFloor(path, 1).free_bytes() - MARGIN) // MIB


class Ballast:
    """A file of ``2 * MARGIN`` allocated bytes under ``directory``: laid, the disk is ~MARGIN below
    the floor of ``floor_mib``; lifted, ~MARGIN above it."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "ballast.bin"

    def lay(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, 2 * MARGIN)
        finally:
            os.close(fd)

    def lift(self) -> None:
        self.path.unlink(missing_ok=True)
