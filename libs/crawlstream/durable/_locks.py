"""Advisory locks that cannot go stale: held by an open descriptor, dropped with the process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["try_lock_exclusive"]


def try_lock_exclusive(path: Path) -> int | None:
    """An fd holding a non-blocking exclusive flock on ``path`` (created if missing), or None
    if another holder has it. The kernel drops the lock when the holder dies, so it never
    goes stale; close the fd to release it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
