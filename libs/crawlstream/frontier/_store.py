"""Frontier files on disk: one append-only file per domain, ``<root>/<partition>/<hh>/<domain>``,
and for a domain with prioritised URLs a priority lane next to it, ``<domain>~lane``.

This module owns the bytes; the caller (the scheduler) owns the metadata in Redis and hands
it in as a ``FileState`` (generation, read offset, size). Every method validates the domain
before building a path. Not thread-safe per domain: one owner per partition appends, reads
and compacts a domain's file from one thread (the partition model guarantees one owner).

Compaction and crashes (numbered steps in ``compact``): the unread tail is written to
``<domain>~compact`` with generation g+1, fsynced, renamed over ``<domain>``, and only then
does the caller store the new state in Redis. ``reconcile`` repairs whatever a crash left:
a stray ``~compact`` file is deleted (step 3 never happened; the old file is intact); a file
whose header says g+1 while Redis says g means step 4 never happened, so the tail file is
adopted from its start; bytes past the known size are scanned and a torn record cut off.

The priority lane (every method's ``lane=True``) is the same machinery on a second file whose
records carry their priority and are kept in read order: highest priority first, then by
arrival. The caller appends when the new records sort after every unread one, and otherwise
``rewrite``s the unread records merged with the new ones as generation + 1, which is a
compaction with different content (same steps, same repair by ``reconcile``).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from crawlstream.durable import atomic_file
from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.frontier._domains import COMPACT_SUFFIX, LANE_SUFFIX, LANE_TMP_SUFFIX, validate_domain
from crawlstream.frontier._records import (
    HEADER_SIZE,
    FrontierEntry,
    decode_header,
    decode_records,
    encode_header,
    encode_record,
)

__all__ = ["FileState", "FrontierFiles"]

logger = logging.getLogger(__name__)

_READ_CHUNK = 16 * 1024
_SYNC_THREADS = 16
_TMP_SUFFIX = COMPACT_SUFFIX  # '~' is never in a valid domain, so it cannot name another domain's file


def _domain_prefix(domain: str) -> str:
    from crawlstream.urls import domain_prefix  # the fixed hh: first two hex digits of xxh3_64(domain)

    return domain_prefix(domain)


@dataclass(frozen=True)
class FileState:
    """Where a domain's file stands: its header ``generation``, next record ``offset``, valid ``size``.

    ``offset == size`` means nothing is unread. A file that does not exist yet is
    ``FileState(generation, HEADER_SIZE, HEADER_SIZE)``.
    """

    generation: int = 0
    offset: int = HEADER_SIZE
    size: int = HEADER_SIZE

    @property
    def unread_bytes(self) -> int:
        return self.size - self.offset


class FrontierFiles:
    """Append, read, reconcile and compact per-domain frontier files under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._dirty: set[Path] = set()

    def path_for(self, partition: int, domain: str, *, lane: bool = False) -> Path:
        """The file (``lane``: the priority lane) of ``domain`` (``InvalidDomain`` before any
        path exists for a bad name)."""
        validate_domain(domain)
        return self.root / str(int(partition)) / _domain_prefix(domain) / (domain + LANE_SUFFIX if lane else domain)

    def _tmp_for(self, path: Path, lane: bool) -> Path:
        if lane:
            return path.with_name(path.name.removesuffix(LANE_SUFFIX) + LANE_TMP_SUFFIX)
        return path.with_name(path.name + _TMP_SUFFIX)

    # -- writing ----------------------------------------------------------------------------

    def append(
        self, partition: int, domain: str, entries: list[FrontierEntry], state: FileState, *, lane: bool = False
    ) -> FileState:
        """Append ``entries`` after ``state.size``; return the new state (size grown).

        ``state`` must be reconciled (``reconcile``) once per process before the first append,
        so that the file really ends at ``state.size``. A missing file is created with a header.
        """
        path = self.path_for(partition, domain, lane=lane)
        data = b"".join(encode_record(e, lane=lane) for e in entries)
        try:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "wb") as fh:
                    fh.write(encode_header(state.generation, lane=lane))
                    fh.write(data)
                state = FileState(state.generation, HEADER_SIZE, HEADER_SIZE)
            else:
                with open(path, "r+b") as fh:
                    fh.seek(state.size)
                    fh.write(data)
        except OSError as exc:
            raise StorageUnavailable(f"cannot append to frontier file {path} ({exc})") from exc
        self._dirty.add(path)
        return FileState(state.generation, state.offset, state.size + len(data))

    def sync(self) -> int:
        """fsync every file appended to since the last call (before committing bus offsets).

        The files are fsynced in parallel: one sync per domain touched since the last commit
        is hundreds of journal commits when issued one by one, and the scheduler waits.
        """
        dirty, self._dirty = sorted(self._dirty), set()
        return sync_files(dirty)

    # -- reading ----------------------------------------------------------------------------

    def read(
        self, partition: int, domain: str, state: FileState, limit: int = 1, *, lane: bool = False
    ) -> list[tuple[FrontierEntry, int]]:
        """Up to ``limit`` records from ``state.offset`` (before ``state.size``), each with its end offset.

        ``ChecksumMismatch`` if a record below ``state.size`` is corrupt (the bytes were
        acknowledged once, so this is damage, not a torn tail).
        """
        if state.offset >= state.size:
            return []
        path = self.path_for(partition, domain, lane=lane)
        out: list[tuple[FrontierEntry, int]] = []
        offset = state.offset
        try:
            with open(path, "rb") as fh:
                chunk = _READ_CHUNK
                while len(out) < limit and offset < state.size:
                    fh.seek(offset)
                    data = fh.read(min(chunk, state.size - offset))
                    got, end = decode_records(data, domain, offset, limit - len(out), lane=lane)
                    if not got:
                        if len(data) < min(chunk, state.size - offset) or chunk >= state.size - offset:
                            raise ChecksumMismatch(
                                f"frontier file {path}: no valid record at offset {offset} below the "
                                f"acknowledged size {state.size}; the file is damaged"
                            )
                        chunk *= 4  # one record longer than the chunk
                        continue
                    out.extend(got)
                    offset = end
        except FileNotFoundError as exc:
            raise ChecksumMismatch(f"frontier file {path} is missing but Redis says {state}") from exc
        except OSError as exc:
            raise StorageUnavailable(f"cannot read frontier file {path} ({exc})") from exc
        return out

    # -- recovery and compaction --------------------------------------------------------------

    def read_all(self, partition: int, domain: str) -> list[FrontierEntry]:
        """Every valid record of the domain's lane, then of its file, from their headers (read and
        unread alike: for recovery scans such as the migration's journal); [] for missing files."""
        out: list[FrontierEntry] = []
        for lane in (True, False):
            path = self.path_for(partition, domain, lane=lane)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageUnavailable(f"cannot read frontier file {path} ({exc})") from exc
            out.extend(e for e, _ in decode_records(data[HEADER_SIZE:], domain, lane=lane)[0])
        return out

    def reconcile(self, partition: int, domain: str, state: FileState, *, lane: bool = False) -> FileState:
        """Make ``state`` (from Redis) and the file agree after a crash; return the true state."""
        path = self.path_for(partition, domain, lane=lane)
        tmp = self._tmp_for(path, lane)
        try:
            if tmp.exists():
                tmp.unlink()  # a compaction crashed before its rename: the old file is intact
                logger.warning("frontier %s: removed an unfinished compaction file", domain)
            try:
                with open(path, "rb") as fh:
                    header = fh.read(HEADER_SIZE)
                    file_size = os.fstat(fh.fileno()).st_size
            except FileNotFoundError:
                if state.unread_bytes > 0:
                    logger.error(
                        "frontier %s: file %s is missing; %d unread bytes are lost",
                        domain,
                        path,
                        state.unread_bytes,
                    )
                return FileState(state.generation, HEADER_SIZE, HEADER_SIZE)
            try:
                generation = decode_header(header, str(path), lane=lane)
            except ChecksumMismatch:
                if len(header) < HEADER_SIZE and state.size <= HEADER_SIZE:
                    path.unlink()  # torn while being created: nothing was ever acknowledged
                    return FileState(state.generation, HEADER_SIZE, HEADER_SIZE)
                raise
            if generation == state.generation:
                # Usual case: only bytes past the acknowledged size can be torn.
                start = state.size if state.size <= file_size else state.offset
                if start > file_size:
                    start = HEADER_SIZE
                new = FileState(generation, min(state.offset, start), start)
            else:
                if generation != state.generation + 1:
                    logger.error(
                        "frontier %s: file generation %d but Redis says %d; re-reading the file from its start",
                        domain,
                        generation,
                        state.generation,
                    )
                # Step 4 of a compaction never ran: the file holds exactly the unread tail.
                new = FileState(generation, HEADER_SIZE, HEADER_SIZE)
            return self._scan_tail(path, new, file_size, lane)
        except OSError as exc:
            raise StorageUnavailable(f"cannot reconcile frontier file {path} ({exc})") from exc

    def _scan_tail(self, path: Path, state: FileState, file_size: int, lane: bool) -> FileState:
        """Extend ``state.size`` over whole valid records up to EOF; cut a torn tail off."""
        if file_size <= state.size:
            return state
        with open(path, "r+b") as fh:
            fh.seek(state.size)
            data = fh.read()
            _, valid_end = decode_records(data, "", state.size, lane=lane)
            if valid_end < file_size:
                logger.warning(
                    "frontier %s: cut a torn tail of %d bytes at offset %d",
                    path.name,
                    file_size - valid_end,
                    valid_end,
                )
                fh.truncate(valid_end)
        return FileState(state.generation, state.offset, valid_end)

    def compact(self, partition: int, domain: str, state: FileState, *, lane: bool = False) -> FileState:
        """Rewrite the unread tail as generation + 1; the caller must then store the result.

        Steps (do not reorder; ``reconcile`` repairs a crash between any two):
        1. copy ``[offset, size)`` into ``<domain>~compact`` under a new header (generation + 1);
        2. fsync it; 3. rename it over ``<domain>`` and fsync the directory;
        4. (caller) store the returned state in Redis.
        """
        path = self.path_for(partition, domain, lane=lane)
        try:
            with open(path, "rb") as src:
                src.seek(state.offset)
                tail = src.read(state.size - state.offset)
        except OSError as exc:
            raise StorageUnavailable(f"cannot compact frontier file {path} ({exc})") from exc
        new = self._replace(path, lane, state.generation + 1, tail)
        logger.debug(
            "frontier %s: compacted %d consumed bytes (generation %d)",
            domain,
            state.offset - HEADER_SIZE,
            new.generation,
        )
        return new

    def rewrite(
        self, partition: int, domain: str, state: FileState, entries: list[FrontierEntry], *, lane: bool = True
    ) -> FileState:
        """Replace the file's unread records by ``entries`` (the caller merged the unread ones in),
        as generation + 1, by the steps of ``compact``; the caller must then store the result.
        How the priority lane takes a record that sorts before unread ones."""
        path = self.path_for(partition, domain, lane=lane)
        data = b"".join(encode_record(e, lane=lane) for e in entries)
        path.parent.mkdir(parents=True, exist_ok=True)
        return self._replace(path, lane, state.generation + 1, data)

    def _replace(self, path: Path, lane: bool, generation: int, records: bytes) -> FileState:
        """Steps 1-3 of ``compact``: ``records`` under a new header, fsynced, renamed over ``path``."""
        # 1. at the ``~compact`` / ``~lanetmp`` name that ``reconcile`` removes; 2. and 3. as the block ends.
        with atomic_file(path, tmp=self._tmp_for(path, lane)) as dst:
            dst.write(encode_header(generation, lane=lane))
            dst.write(records)
        self._dirty.discard(path)
        return FileState(generation, HEADER_SIZE, HEADER_SIZE + len(records))

    def remove(self, partition: int, domain: str) -> None:
        """Delete a domain's file and lane (their state in Redis must be reset by the caller first)."""
        self.path_for(partition, domain).unlink(missing_ok=True)
        self.path_for(partition, domain, lane=True).unlink(missing_ok=True)


def sync_files(paths: list[Path]) -> int:
    """fsync ``paths`` in parallel (a file gone since is skipped); how many were synced."""
    if len(paths) <= 1:
        return sum(_fsync_file(path) for path in paths)
    with ThreadPoolExecutor(min(_SYNC_THREADS, len(paths)), thread_name_prefix="frontier-sync") as pool:
        return sum(pool.map(_fsync_file, paths))


def _fsync_file(path: Path) -> int:
    """fsync ``path``; 0 if it is gone (compacted away since), else 1."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StorageUnavailable(f"cannot fsync frontier file {path} ({exc})") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StorageUnavailable(f"cannot fsync frontier file {path} ({exc})") from exc
    finally:
        os.close(fd)
    return 1
