"""File edges of the store: append-only files and positional reads (the store's small files are
published whole with ``crawlstream.durable.write_atomically``).

Every write is one ``os.write`` of a whole record on an unbuffered descriptor, so a kill -9
leaves either the whole record in the page cache or a torn tail that start-up truncates;
``fsync`` is what makes it survive power loss (the ``fsync`` policy decides when).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from crawlstream.durable import fsync_dir
from crawlstream.errors import StorageUnavailable

__all__ = ["AppendFile", "ReadCache"]

logger = logging.getLogger(__name__)


class AppendFile:
    """An append-only file; ``append`` returns the offset the bytes were written at."""

    def __init__(self, path: Path, *, fsync_each: bool) -> None:
        self.path = path
        self._fsync_each = fsync_each
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StorageUnavailable(f"could not open {path} for append: {exc}") from exc
        self.size = os.fstat(self._fd).st_size
        if created:
            fsync_dir(path.parent)

    def append(self, data: bytes) -> int:
        offset = self.size
        try:
            written = os.write(self._fd, data)
            while written < len(data):  # short writes are rare but legal
                written += os.write(self._fd, data[written:])
            if self._fsync_each:
                os.fsync(self._fd)
        except OSError as exc:
            raise StorageUnavailable(f"append to {self.path} failed at offset {offset}: {exc}") from exc
        self.size += len(data)
        return offset

    def sync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageUnavailable(f"fsync of {self.path} failed: {exc}") from exc

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ReadCache:
    """Open read descriptors by path, so a warm read is one ``pread``.

    Shared by threads (the puts' thread, API readers, a maintenance step removing a segment):
    every use of a descriptor, and its close, happens under one lock. Without it a descriptor
    closed by one thread (``forget``, or ``close`` when the cache is full) could be closed
    again by another after the kernel gave its number to a file opened meanwhile (the index
    log), or read after it was reused. A ``pread`` of one record takes microseconds.
    """

    def __init__(self, max_open: int = 256) -> None:
        self._fds: dict[Path, int] = {}
        self._max_open = max_open
        self._lock = threading.Lock()

    def pread(self, path: Path, offset: int, length: int) -> bytes:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                if len(self._fds) >= self._max_open:
                    self._close_all()
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError as exc:
                    raise StorageUnavailable(f"segment {path} cannot be opened: {exc}") from exc
                self._fds[path] = fd
            try:
                return os.pread(fd, length, offset)
            except OSError as exc:
                raise StorageUnavailable(f"read of {path} at {offset} failed: {exc}") from exc

    def forget(self, path: Path) -> None:
        with self._lock:
            fd = self._fds.pop(path, None)
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._close_all()

    def _close_all(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
