"""Durable file writes shared by every store (bus log, content store, lake, index, dedupe).

Readers must see the old file or the whole new one, never half, and a crash after the call
returns must not lose it: write a temporary file, fsync it, rename it over the target, then
fsync the directory so the rename itself survives a power loss.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from crawlstream.errors import StorageUnavailable

__all__ = ["fsync_dir", "try_lock_exclusive", "write_atomically"]


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in the directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably; StorageUnavailable on I/O errors."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        raise StorageUnavailable(f"could not write {path}: {exc}; check the volume is writable and not full") from exc


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
