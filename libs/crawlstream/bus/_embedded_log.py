"""The storage of the embedded bus: one append-only log per topic-partition on local disk.

This module owns the on-disk format and its recovery; ``_embedded.py`` builds producers,
consumers and consumer groups on top of it. It knows nothing about groups or threads other
than the one lock per partition that serialises appends.

Layout of one partition directory ``topics/<topic>/<partition>/``:

* ``<base_offset:020d>.log`` segment files. A segment is a run of records; the next segment
  starts when the active one reaches ``segment_bytes`` (checked before each append, so a
  segment may overshoot by one batch).
* ``<base_offset:020d>.idx`` a sparse offset index beside each segment: one 24-byte entry
  (``<qQq``: offset, byte position, max timestamp of the segment's records *before* that
  position) at a batch boundary every ``index_interval_bytes`` of log. It only speeds up
  seeks; it is never trusted blindly (an entry must point at a record carrying its offset),
  and it is rebuilt from the log when missing or short.

Records are framed as ``_embedded_records`` describes (length, crc32, offset, timestamp, key,
value, headers), which also encodes, decodes and verifies them.

Recovery on open: every segment's tail after its last index entry is scanned and verified.
A record that is torn (runs past the end of the file) or fails its CRC with nothing valid
after it is the remains of a write interrupted by a crash: the *last* segment is truncated
back to the last valid record (logged at WARNING). A bad record followed by a valid one is
mid-log corruption: it is never truncated and never served; readers raise
``ChecksumMismatch`` for it and skip to the next valid record (see ``PartitionLog.fetch``).

Shared mode (``shared=True``: several processes append to and read one log, ``crawlstream run
--processes N``; ADR 025). Appends take an ``fcntl`` lock on ``append.lock`` beside the segments
(after the in-process lock), catch up with what other processes appended, drop anything a
killed writer left past the published end, append, and publish the new end in ``head``
(36 bytes: base offset of the active segment, its size, the next offset, its max timestamp,
crc32 of those). Readers never read past the published end, so they never see a batch being
written; they catch up from ``head`` when they reach the end they know. Opening a partition in
shared mode runs the recovery above under the append lock and publishes its result, so
``head`` is always derived again at open, never trusted across a crash. Without ``shared``
nothing of this runs (no ``head``, no lock): the single-process path is unchanged.

Retention is out of scope: nothing is ever deleted.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crawlstream.bus._base import Message
from crawlstream.bus._embedded_records import (
    _FIXED_AFTER_CRC,
    _INCOMPLETE,
    _MAX_RECORD_BYTES,
    _NO_TIMESTAMP,
    _OK,
    _PREFIX_BYTES,
    _RECORD,
    PendingRecord,
    _peek,
    decode_records,
    encode_records,
)
from crawlstream.durable import fsync_dir
from crawlstream.errors import ChecksumMismatch, StorageUnavailable

__all__ = ["Cursor", "PartitionLog", "read_end_offset"]

logger = logging.getLogger(__name__)

_INDEX = struct.Struct("<qQq")
_HEAD_BODY = struct.Struct("<qQqq")  # active segment base, its published size, next offset, max ts
_HEAD_CRC = struct.Struct("<I")
HEAD_FILE = "head"
APPEND_LOCK_FILE = "append.lock"


@dataclass
class _Segment:
    """One segment file and its in-memory sparse index (mutated under the partition lock)."""

    base_offset: int
    log_path: Path
    fd: int
    size: int = 0
    next_offset: int = 0
    max_ts: int = _NO_TIMESTAMP
    index_offsets: list[int] = field(default_factory=list)
    index_positions: list[int] = field(default_factory=list)
    index_max_ts: list[int] = field(default_factory=list)
    index_fd: int = -1

    def read(self, pos: int, size: int) -> bytes:
        try:
            return os.pread(self.fd, size, pos)
        except OSError as exc:
            raise StorageUnavailable(f"cannot read {self.log_path} at byte {pos}: {exc}") from exc


class _FileLock:
    """An exclusive ``flock`` for a ``with`` block (the shared log's append lock)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


@dataclass
class Cursor:
    """A reader's place in one partition: the next offset, and where it is if known."""

    offset: int
    segment_base: int = -1
    position: int = -1


class PartitionLog:
    """The log of one topic-partition: append under a lock, read concurrently with ``pread``.

    ``fsync`` is ``'always'`` (each append is fsynced), ``'batch'`` (appends are written to
    the OS and fsynced by ``sync()``, which the bus calls on commit and close, and on
    segment roll) or ``'never'``.
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        *,
        segment_bytes: int,
        fsync: str,
        index_interval_bytes: int = 4096,
        shared: bool = False,
    ) -> None:
        self.directory = directory
        self.shared = shared
        self.topic = topic
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.index_interval_bytes = index_interval_bytes
        self.lock = threading.Lock()
        self.dirty = False
        self.corrupt_records_skipped = 0
        self._last_index_position = 0
        self.segments: list[_Segment] = []
        self._bases: list[int] = []
        self._lock_fd = -1
        self._head_fd = -1
        self._head_map: mmap.mmap | None = None
        self._seen_head = b""
        directory.mkdir(parents=True, exist_ok=True)
        if not shared:
            self._open()
            return
        try:
            self._lock_fd = os.open(directory / APPEND_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            self._head_fd = os.open(directory / HEAD_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageUnavailable(f"cannot open the shared-log files of {directory}: {exc}") from exc
        with self._append_lock():
            self._open()  # recovery under the append lock: no other process is mid-write
            self._write_head()
        # Read through a mapping: a catch-up that finds nothing new costs no system call.
        self._head_map = mmap.mmap(self._head_fd, _HEAD_BODY.size + _HEAD_CRC.size, access=mmap.ACCESS_READ)
        self._seen_head = b""

    # -- opening and recovery -------------------------------------------------------------

    def _open(self) -> None:
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        if not bases:
            bases = [0]
        for i, base in enumerate(bases):
            last = i == len(bases) - 1
            self.segments.append(self._open_segment(base, recover_tail=last))
        for seg, nxt in zip(self.segments, self.segments[1:], strict=False):
            if seg.next_offset < nxt.base_offset:
                logger.error(
                    "%s/%d: offsets %d..%d are missing between segments (lost before a crash?)",
                    self.topic, self.partition, seg.next_offset, nxt.base_offset - 1,
                )
            seg.next_offset = nxt.base_offset
        self._bases = [s.base_offset for s in self.segments]
        active = self.segments[-1]
        self._last_index_position = active.index_positions[-1] if active.index_positions else 0

    def _open_segment(self, base: int, *, recover_tail: bool) -> _Segment:
        log_path = self.directory / f"{base:020d}.log"
        idx_path = log_path.with_suffix(".idx")
        created = not log_path.exists()
        try:
            fd = os.open(log_path, os.O_RDWR | os.O_CREAT, 0o644)
            index_fd = os.open(idx_path, os.O_RDWR | os.O_CREAT, 0o644)
            file_size = os.fstat(fd).st_size
            raw_index = os.pread(index_fd, os.fstat(index_fd).st_size, 0)
        except OSError as exc:
            raise StorageUnavailable(f"cannot open segment {log_path}: {exc}") from exc
        if created and self.fsync != "never":
            fsync_dir(self.directory)  # a new file's name must survive a power loss too
        seg = _Segment(base, log_path, fd, size=file_size, next_offset=base, index_fd=index_fd)
        entries = [
            _INDEX.unpack_from(raw_index, i)
            for i in range(0, len(raw_index) - len(raw_index) % _INDEX.size, _INDEX.size)
        ]
        # Trust index entries only if they point inside the file and at their own offset.
        while entries:
            offset, position, _ = entries[-1]
            head = seg.read(position, _RECORD.size) if position < file_size else b""
            if len(head) == _RECORD.size and _RECORD.unpack_from(head, 0)[2] == offset:
                break
            entries.pop()
        start_pos, start_offset, max_ts = 0, base, _NO_TIMESTAMP
        if entries:
            start_offset, start_pos, max_ts = entries[-1]
        for offset, position, mts in entries:
            seg.index_offsets.append(offset)
            seg.index_positions.append(position)
            seg.index_max_ts.append(mts)
        valid_end, next_offset, max_ts, rebuilt = self._scan(seg, start_pos, start_offset, max_ts, file_size)
        seg.next_offset = next_offset
        seg.max_ts = max_ts
        if valid_end < file_size:
            if recover_tail:
                logger.warning(
                    "%s/%d: truncating a torn tail of %d bytes at byte %d of %s (a write "
                    "interrupted by a crash; nothing after offset %d was acknowledged)",
                    self.topic, self.partition, file_size - valid_end, valid_end, log_path,
                    next_offset - 1,
                )
                os.ftruncate(fd, valid_end)
                if self.fsync != "never":
                    os.fsync(fd)
                seg.size = valid_end
            else:
                logger.error(
                    "%s/%d: %d unreadable bytes at the end of sealed segment %s (byte %d); "
                    "readers skip them and report ChecksumMismatch",
                    self.topic, self.partition, file_size - valid_end, log_path, valid_end,
                )
        if rebuilt or len(entries) * _INDEX.size != len(raw_index):
            self._rewrite_index(seg)
        return seg

    def _scan(
        self, seg: _Segment, pos: int, offset: int, max_ts: int, file_size: int
    ) -> tuple[int, int, int, bool]:
        """Verify records from ``pos`` to the end of the file, adding missing index entries.

        Returns (end of the last valid record, next offset, max timestamp, index changed).
        A bad record followed by a valid one is mid-log corruption: logged and passed over
        (readers will report it); a bad record with nothing valid after it ends the scan.
        """
        chunk_bytes = 4 << 20
        rebuilt = False
        last_index_pos = seg.index_positions[-1] if seg.index_positions else -self.index_interval_bytes
        valid_end = pos
        buf = b""
        buf_start = pos
        while pos < file_size:
            if pos - buf_start + _RECORD.size > len(buf):
                buf = seg.read(pos, min(chunk_bytes, file_size - pos))
                buf_start = pos
            peeked = _peek(buf, pos - buf_start)
            if peeked is not None and peeked[3] == _INCOMPLETE and buf_start + peeked[0] <= file_size:
                # Complete on disk but larger than the chunk: read the record whole.
                buf = seg.read(pos, buf_start + peeked[0] - pos)
                buf_start = pos
                peeked = _peek(buf, 0)
            if peeked is None or peeked[3] != _OK:
                following = self._valid_record_after(seg, pos, self._declared_end(seg, pos, file_size))
                if following is None:
                    break  # a torn tail: nothing valid follows
                logger.error(
                    "%s/%d: corrupt record at byte %d of %s (offset about %d); it will not be "
                    "served", self.topic, self.partition, pos, seg.log_path, offset,
                )
                pos, offset = following
                buf, buf_start = b"", pos
                continue
            rec_end_rel, rec_offset, ts, _ = peeked
            if pos - last_index_pos >= self.index_interval_bytes:
                seg.index_offsets.append(rec_offset)
                seg.index_positions.append(pos)
                seg.index_max_ts.append(max_ts)
                last_index_pos = pos
                rebuilt = True
            if ts > max_ts:
                max_ts = ts
            offset = rec_offset + 1
            pos = buf_start + rec_end_rel
            valid_end = pos
        return valid_end, offset, max_ts, rebuilt

    @staticmethod
    def _declared_end(seg: _Segment, pos: int, limit: int) -> int | None:
        """Where the record at ``pos`` says it ends, if that is plausible and within ``limit``."""
        head = seg.read(pos, _RECORD.size)
        if len(head) < _PREFIX_BYTES:
            return None
        length = struct.unpack_from("<I", head, 0)[0]
        end = pos + _PREFIX_BYTES + length
        return end if _FIXED_AFTER_CRC <= length <= _MAX_RECORD_BYTES and end < limit else None

    def _valid_record_after(
        self, seg: _Segment, pos: int, declared_end: int | None
    ) -> tuple[int, int] | None:
        """(position, offset) of the next valid record after a bad one at ``pos``, if known.

        Candidates: where the bad record's length field says it ends, then later index
        entries. Without either, what follows is unknowable and treated as lost.
        """
        candidates = [] if declared_end is None else [declared_end]
        i = bisect.bisect_right(seg.index_positions, pos)
        candidates.extend(seg.index_positions[i:])
        for cand in candidates:
            head = seg.read(cand, _RECORD.size)
            if len(head) < _RECORD.size:
                continue
            length = _RECORD.unpack_from(head, 0)[0]
            if length > _MAX_RECORD_BYTES:
                continue
            got = _peek(seg.read(cand, _PREFIX_BYTES + length), 0)
            if got is not None and got[3] == _OK:
                return cand, got[1]
        return None

    def _rewrite_index(self, seg: _Segment) -> None:
        data = b"".join(
            _INDEX.pack(o, p, t)
            for o, p, t in zip(seg.index_offsets, seg.index_positions, seg.index_max_ts, strict=True)
        )
        os.ftruncate(seg.index_fd, 0)
        os.pwrite(seg.index_fd, data, 0)

    # -- shared mode: the published end ----------------------------------------------------

    def _append_lock(self) -> _FileLock:
        return _FileLock(self._lock_fd)

    def _write_head(self) -> None:
        active = self.segments[-1]
        body = _HEAD_BODY.pack(active.base_offset, active.size, active.next_offset, active.max_ts)
        raw = body + _HEAD_CRC.pack(zlib.crc32(body))
        os.pwrite(self._head_fd, raw, 0)
        self._seen_head = raw  # what this process knows already

    def _read_head(self) -> tuple[int, int, int, int] | None:
        """The published end, or None when it has not changed since the last read (or was
        read mid-rewrite: the next catch-up reads it again)."""
        if self._head_map is None:
            raw = os.pread(self._head_fd, _HEAD_BODY.size + _HEAD_CRC.size, 0)
        else:
            raw = self._head_map[:]
            if raw == self._seen_head:
                return None
        if len(raw) != _HEAD_BODY.size + _HEAD_CRC.size:
            return None
        if zlib.crc32(raw[: _HEAD_BODY.size]) != _HEAD_CRC.unpack_from(raw, _HEAD_BODY.size)[0]:
            return None  # read while another process rewrote it: the next catch-up reads it again
        self._seen_head = raw
        base, size, next_offset, max_ts = _HEAD_BODY.unpack_from(raw, 0)
        return base, size, next_offset, max_ts

    def _load_index_tail(self, seg: _Segment, size: int) -> None:
        """Index entries other processes added to ``seg`` (those inside its first ``size`` bytes)."""
        have = len(seg.index_offsets) * _INDEX.size
        raw = os.pread(seg.index_fd, max(0, os.fstat(seg.index_fd).st_size - have), have)
        for i in range(0, len(raw) - len(raw) % _INDEX.size, _INDEX.size):
            offset, position, mts = _INDEX.unpack_from(raw, i)
            if position >= size:
                break
            seg.index_offsets.append(offset)
            seg.index_positions.append(position)
            seg.index_max_ts.append(mts)

    def _attach(self, base: int, size: int | None, next_offset: int, max_ts: int) -> _Segment:
        """Open a segment another process created, trusting its published size (no scan)."""
        log_path = self.directory / f"{base:020d}.log"
        try:
            fd = os.open(log_path, os.O_RDWR)
            index_fd = os.open(log_path.with_suffix(".idx"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageUnavailable(f"cannot open segment {log_path}: {exc}") from exc
        if size is None:
            size = os.fstat(fd).st_size  # sealed: its writer rolled past it under the lock
        seg = _Segment(base, log_path, fd, size=size, next_offset=next_offset, max_ts=max_ts, index_fd=index_fd)
        self._load_index_tail(seg, size)
        return seg

    def _catch_up(self) -> None:
        """Take in what other processes appended (from ``head``). Caller holds ``self.lock``."""
        head = self._read_head()
        if head is None:
            return
        base, size, next_offset, max_ts = head
        active = self.segments[-1]
        if base == active.base_offset:
            if size > active.size:
                self._load_index_tail(active, size)
                active.size, active.next_offset, active.max_ts = size, next_offset, max(active.max_ts, max_ts)
            return
        if base < active.base_offset:
            return
        newer = sorted(
            b for b in (int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
            if active.base_offset < b < base
        )
        ends = [*newer, base]
        active.size = os.fstat(active.fd).st_size
        self._load_index_tail(active, active.size)
        active.next_offset = ends[0]
        for b, following in zip(newer, ends[1:], strict=True):
            self.segments.append(self._attach(b, None, following, _NO_TIMESTAMP))
        self.segments.append(self._attach(base, size, next_offset, max_ts))
        self._bases = [seg.base_offset for seg in self.segments]
        new_active = self.segments[-1]
        self._last_index_position = new_active.index_positions[-1] if new_active.index_positions else 0

    def _drop_unpublished(self) -> None:
        """Cut what a killed writer left past the published end (never acknowledged). Under the lock."""
        active = self.segments[-1]
        if os.fstat(active.fd).st_size > active.size:
            os.ftruncate(active.fd, active.size)
        index_bytes = len(active.index_offsets) * _INDEX.size
        if os.fstat(active.index_fd).st_size > index_bytes:
            os.ftruncate(active.index_fd, index_bytes)

    # -- appending ------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets (the log end; in shared mode, as published)."""
        if self.shared:
            with self.lock:
                self._catch_up()
        return self.segments[-1].next_offset

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    def surely_empty_from(self, offset: int) -> bool:
        """True when this process knows there is no record at ``offset`` or later, read without
        the lock: an idle poll of a consumer owning many partitions skips them at the cost of
        one comparison each. False when unsure (shared mode: another process may have appended;
        closed): the caller then ``fetch``-es as usual. A stale read only answers True for data
        published after the caller's wake-up check, which wakes it again."""
        segments = self.segments
        return not self.shared and bool(segments) and offset >= segments[-1].next_offset

    def append(self, records: Sequence[PendingRecord]) -> int:
        """Append ``records`` in one ``write``; returns the offset of the first. Takes the lock
        (and, shared, the append lock of every process: see the module docstring)."""
        if not self.shared:
            with self.lock:
                return self._append_locked(records)
        with self.lock, self._append_lock():
            self._catch_up()
            self._drop_unpublished()
            base = self._append_locked(records)
            self._write_head()
            return base

    def _append_locked(self, records: Sequence[PendingRecord]) -> int:
        active = self.segments[-1]
        if active.size >= self.segment_bytes:
            active = self._roll()
        base = active.next_offset
        data, batch_max_ts = encode_records(base, records)
        position = active.size
        try:
            written = os.pwrite(active.fd, data, position)
            if written != len(data):
                raise OSError(f"short write: {written} of {len(data)} bytes")
            if position - self._last_index_position >= self.index_interval_bytes or position == 0:
                os.pwrite(active.index_fd, _INDEX.pack(base, position, active.max_ts),
                          len(active.index_offsets) * _INDEX.size)
                active.index_offsets.append(base)
                active.index_positions.append(position)
                active.index_max_ts.append(active.max_ts)
                self._last_index_position = position
            if self.fsync == "always":
                os.fsync(active.fd)
        except OSError as exc:
            # Leave the file as it was so no partial batch is ever exposed or followed.
            os.ftruncate(active.fd, position)
            raise StorageUnavailable(
                f"append to {active.log_path} failed: {exc}; free disk space or fix permissions"
            ) from exc
        # Publish only after the bytes are written: readers never see past ``size``.
        active.size = position + len(data)
        if batch_max_ts > active.max_ts:
            active.max_ts = batch_max_ts
        active.next_offset = base + len(records)
        self.dirty = self.fsync == "batch"
        return base

    def _roll(self) -> _Segment:
        old = self.segments[-1]
        if self.fsync != "never":
            os.fsync(old.fd)
        if self.shared:  # a writer killed while rolling may have left the file: never published
            stale = self.directory / f"{old.next_offset:020d}.log"
            for path in (stale, stale.with_suffix(".idx")):
                if path.exists():
                    os.truncate(path, 0)
        seg = self._open_segment(old.next_offset, recover_tail=True)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._last_index_position = 0
        logger.info("%s/%d: rolled to segment %s", self.topic, self.partition, seg.log_path.name)
        return seg

    def sync(self) -> None:
        """fsync the active segment if anything was written since the last sync."""
        if not self.dirty:
            return
        self.dirty = False
        os.fsync(self.segments[-1].fd)

    def close(self) -> None:
        with self.lock:
            if self.fsync != "never":
                self.sync()
            for seg in self.segments:
                os.close(seg.fd)
                os.close(seg.index_fd)
            self.segments = []
            if self._head_map is not None:
                self._head_map.close()
                self._head_map = None
            for fd in (self._lock_fd, self._head_fd):
                if fd >= 0:
                    os.close(fd)
            self._lock_fd = self._head_fd = -1

    # -- reading --------------------------------------------------------------------------

    def _snapshot(self, offset: int) -> tuple[_Segment, int, int, _Segment | None]:
        """(segment holding ``offset``, its visible size, log end, next segment)."""
        with self.lock:
            if self.shared and offset >= self.segments[-1].next_offset:
                self._catch_up()
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            seg = self.segments[i]
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            return seg, seg.size, self.segments[-1].next_offset, nxt

    def _locate(self, seg: _Segment, offset: int) -> int:
        """A byte position in ``seg`` at or before the record with ``offset``."""
        i = bisect.bisect_right(seg.index_offsets, offset) - 1
        return seg.index_positions[i] if i >= 0 else 0

    def fetch(self, cursor: Cursor, max_count: int, max_bytes: int, out: list[Message]) -> int:
        """Append up to ``max_count`` records from ``cursor`` to ``out``; advance the cursor.

        Reads about ``max_bytes`` per ``pread`` (more only for a single larger record).
        Returns the number of records appended (0: nothing new). Raises ``ChecksumMismatch``
        when the cursor is at a corrupt record, *after* moving the cursor past it, so the
        next call goes on with the following valid record: corrupt data is never returned
        and never silently skipped.
        """
        while True:
            if cursor.offset < self.start_offset:
                cursor.offset, cursor.segment_base, cursor.position = self.start_offset, -1, -1
            seg, size, end_offset, nxt = self._snapshot(cursor.offset)
            if cursor.offset >= end_offset or max_count <= 0:
                return 0
            if cursor.segment_base != seg.base_offset or cursor.position < 0:
                cursor.segment_base = seg.base_offset
                cursor.position = self._locate(seg, cursor.offset)
            pos = cursor.position
            if pos >= size:
                if nxt is None:
                    return 0
                cursor.offset, cursor.segment_base, cursor.position = nxt.base_offset, nxt.base_offset, 0
                continue
            buf = seg.read(pos, min(max_bytes, size - pos))
            before = len(out)
            rel, next_offset, status = decode_records(
                buf, 0, self.topic, self.partition, cursor.offset, max_count, out
            )
            if status == _INCOMPLETE and rel == 0 and len(buf) < size - pos:
                # One record larger than max_bytes: read exactly that record.
                length = _RECORD.unpack_from(buf, 0)[0] if len(buf) >= _RECORD.size else 0
                buf = seg.read(pos, min(_PREFIX_BYTES + length, size - pos))
                rel, next_offset, status = decode_records(
                    buf, 0, self.topic, self.partition, cursor.offset, max_count, out
                )
            if rel > 0:
                cursor.position = pos + rel
                cursor.offset = max(cursor.offset, next_offset)
                got = len(out) - before
                if got:
                    return got
                continue  # only records before the wanted offset: read on
            if status == _OK:
                return 0
            self._skip_corrupt(seg, cursor, size, nxt, end_offset)

    def _skip_corrupt(
        self, seg: _Segment, cursor: Cursor, size: int, nxt: _Segment | None, end_offset: int
    ) -> None:
        pos = cursor.position
        bad_offset = cursor.offset
        following = self._valid_record_after(seg, pos, self._declared_end(seg, pos, size))
        if following is not None:
            cursor.position, cursor.offset = following
        elif nxt is not None:
            cursor.offset, cursor.segment_base, cursor.position = nxt.base_offset, nxt.base_offset, 0
        else:
            cursor.offset, cursor.position = end_offset, size
        self.corrupt_records_skipped += 1
        logger.error(
            "%s/%d: corrupt record at byte %d of %s; skipping offsets %d..%d",
            self.topic, self.partition, pos, seg.log_path, bad_offset, cursor.offset - 1,
        )
        raise ChecksumMismatch(
            f"{self.topic}/{self.partition}: corrupt record at byte {pos} of {seg.log_path} "
            f"(expected a valid record with offset {bad_offset}); offsets {bad_offset}.."
            f"{cursor.offset - 1} are skipped. Restore the segment from a backup if they "
            "matter; consuming goes on after them"
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset whose timestamp is >= ``timestamp_ms`` (the log end if none)."""
        with self.lock:
            segments = list(self.segments)
            sizes = [s.size for s in segments]
            end_offset = segments[-1].next_offset
        for seg, size in zip(segments, sizes, strict=True):
            # Entries carry the max timestamp *before* them (non-decreasing): start at the
            # last entry before which no record can qualify, then scan.
            i = bisect.bisect_left(seg.index_max_ts, timestamp_ms) - 1
            pos = seg.index_positions[i] if i >= 0 else 0
            want = 1 << 20
            while pos < size:
                buf = seg.read(pos, min(want, size - pos))
                want = 1 << 20
                rel = 0
                while True:
                    peeked = _peek(buf, rel)
                    if peeked is None or peeked[3] != _OK:
                        break
                    rec_end, offset, ts, _ = peeked
                    if ts >= timestamp_ms:
                        return offset
                    rel = rec_end
                if rel == 0:
                    if peeked is not None and peeked[3] == _INCOMPLETE and pos + peeked[0] <= size:
                        want = peeked[0]  # one record larger than the chunk: read it whole
                        continue
                    break  # corrupt: fetch reports it when a reader gets there
                pos += rel
        return end_offset


def read_end_offset(directory: Path) -> int:
    """The log end of one partition directory, read-only and without any lock (for status pages).

    Scans the last segment from its last usable index entry to the last complete, valid record;
    a batch being appended at that moment is simply not counted yet.
    """
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    if not bases:
        return 0
    log_path = directory / f"{bases[-1]:020d}.log"
    try:
        raw_index = (directory / f"{bases[-1]:020d}.idx").read_bytes()
    except FileNotFoundError:
        raw_index = b""
    try:
        fh = open(log_path, "rb")  # noqa: SIM115 - closed by the with below; a missing file is handled first
    except FileNotFoundError:
        return bases[-1]
    with fh:
        start, offset = 0, bases[-1]
        for i in range(len(raw_index) - len(raw_index) % _INDEX.size - _INDEX.size, -1, -_INDEX.size):
            entry_offset, position, _ = _INDEX.unpack_from(raw_index, i)
            fh.seek(position)
            head = fh.read(_RECORD.size)
            if len(head) == _RECORD.size and _RECORD.unpack_from(head, 0)[2] == entry_offset:
                start, offset = position, entry_offset
                break
        fh.seek(start)
        data = fh.read()  # from the last index entry: about index_interval_bytes plus a batch
    pos = 0
    while True:
        peeked = _peek(data, pos)
        if peeked is None or peeked[3] != _OK:
            return offset
        pos, offset = peeked[0], peeked[1] + 1
