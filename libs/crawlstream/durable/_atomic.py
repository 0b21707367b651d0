"""Publishing a file atomically and durably: the project's one temp + fsync + rename.

Readers must see the old file or the whole new one, never half, and a crash after the call
returns must not lose it. Every publication ends in ``_publish``: fsync the temporary file (or
each file of a temporary directory, then the directory), rename it over the target (or, for
``exclusive``, hard-link it to a target that must not exist yet), then fsync the parent
directory so the rename itself survives a power loss. Three ways in, by what the writer has:

* ``write_atomically(path, data)``: the bytes, whole;
* ``atomic_file(path)``: a binary file object to stream into (a WARC export);
* ``replacing(path)``: a temporary *path* for a library that opens it itself (pyarrow writing
  a Parquet file) or a directory to fill (an index version).

The temporary sits next to the target (same file system, so the rename is atomic); a writer
whose start-up recognises its own leftovers by name passes ``tmp``. On any error the temporary
is removed and an ``OSError`` becomes ``StorageUnavailable`` naming the target, except the
``FileExistsError`` of an ``exclusive`` publication whose target exists: the caller's answer
("someone else created it first") is not an I/O failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from crawlstream.errors import StorageUnavailable

__all__ = ["atomic_file", "fsync_dir", "replacing", "write_atomically"]


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in the directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _default_tmp(path: Path) -> Path:
    """Hidden, next to ``path``, and unique per process and thread (two writers never share it)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def _fsync_tree(tmp: Path) -> None:
    """fsync a file, or each regular file directly in a directory and then the directory."""
    if tmp.is_dir():
        for child in sorted(tmp.iterdir()):
            if child.is_file():
                _fsync_tree(child)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(tmp: Path, path: Path, *, exclusive: bool, fsync: bool, synced: bool = False) -> None:
    """THE commit: make ``tmp`` durable (unless ``synced`` already), put it at ``path``, make that durable."""
    if fsync and not synced:
        _fsync_tree(tmp)
    if exclusive:
        os.link(tmp, path)  # FileExistsError if another writer created it first
        os.unlink(tmp)
    else:
        os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def _discard(tmp: Path) -> None:
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _committing(path: Path, tmp: Path | None, *, exclusive: bool, fsync: bool, synced: bool) -> Iterator[Path]:
    tmp = _default_tmp(path) if tmp is None else tmp
    try:
        yield tmp
        _publish(tmp, path, exclusive=exclusive, fsync=fsync, synced=synced)
    except BaseException as exc:
        _discard(tmp)
        if isinstance(exc, OSError) and not (exclusive and isinstance(exc, FileExistsError)):
            raise StorageUnavailable(
                f"could not write {path}: {exc}; check the volume is writable and not full"
            ) from exc
        raise


@contextlib.contextmanager
def replacing(path: Path, *, tmp: Path | None = None, fsync: bool = True) -> Iterator[Path]:
    """Yield a temporary path to create ``path``'s new content at; publish it on a clean exit.

    The caller creates a file there (``pq.write_table(table, tmp)``), or a directory of files
    (it must create the directory; ``path`` must then not exist or be an empty directory). On
    exit: fsync it (for a directory, each file directly in it, then itself), rename it over
    ``path``, fsync ``path``'s directory. On an exception it is removed (a directory with its
    contents) and the exception re-raised, an ``OSError`` as ``StorageUnavailable``.
    ``fsync=False`` keeps the atomic rename without the two fsyncs.
    """
    with _committing(path, tmp, exclusive=False, fsync=fsync, synced=False) as staging:
        yield staging


@contextlib.contextmanager
def atomic_file(
    path: Path,
    *,
    mode: int | None = None,
    exclusive: bool = False,
    fsync: bool = True,
    tmp: Path | None = None,
) -> Iterator[BinaryIO]:
    """Yield a new binary file to write ``path``'s content into; publish it on a clean exit.

    ``mode``: the permission bits the file is created with (``0o600`` for secrets: it never
    exists with wider ones; default ``0o666`` less the umask). ``exclusive``: create ``path``
    only if it does not exist yet (``FileExistsError`` otherwise, the new file discarded).
    Everything else as ``replacing``.
    """
    with _committing(path, tmp, exclusive=exclusive, fsync=fsync, synced=True) as staging:
        staging.unlink(missing_ok=True)  # a crashed writer's leftover: O_EXCL below gives fresh bits
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())


def write_atomically(
    path: Path,
    data: bytes,
    *,
    mode: int | None = None,
    exclusive: bool = False,
    fsync: bool = True,
    tmp: Path | None = None,
) -> None:
    """Replace (or, ``exclusive``, create) ``path`` with ``data`` atomically and durably.

    ``StorageUnavailable`` on I/O errors; see ``atomic_file`` for the keywords."""
    with atomic_file(path, mode=mode, exclusive=exclusive, fsync=fsync, tmp=tmp) as fh:
        fh.write(data)
