"""The revisit schedule: when each fetched page is due again, and what its last response said.

ADR 022. The scheduler appends one record per page whose fetch succeeded (2xx, 304) and
reads them back once they are due, to put the URL in its domain's frontier again with the
validators the fetcher turns into a conditional request. O(pages) state lives here, on disk,
never in Redis (the scheduler's Redis stays O(domains)); Redis only holds each partition's
read cursor.

Layout: ``<root>/<partition>/<bucket_ms>.rv``, one append-only file per ``bucket_ms``-wide
slice of due times. A record's due time is "now + revisit age" when it is written, so a file
only receives records while its slice lies ahead, and it is read once its slice has started.
A file whose slice has ended and whose records were all handed out is deleted (after the
cursor that says so was stored). Within a file records are in write order, which is due
order for one writer with a steady clock; a reader stops at the first record not yet due.

Record (pure codec below): a little-endian ``crawlstream.durable`` frame (u32 payload length,
u32 crc32 of the payload), payload = u64 due_ms, u64 url_key, u16 depth, then five
u16-length-prefixed UTF-8 strings: domain, url, ETag, Last-Modified, content hash (empty =
none). A torn tail, and a record that fails its CRC or does not decode, end the good records:
reading stops before it, and the first append of a process cuts the file there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crawlstream.durable import encode_frame, fsync_dir, iter_frames
from crawlstream.errors import StorageUnavailable

__all__ = [
    "RevisitCursor",
    "RevisitFiles",
    "RevisitRecord",
    "Validators",
    "decode_revisits",
    "encode_revisit",
]

_FIXED = struct.Struct("<QQH")
_LEN = struct.Struct("<H")
_MAX_PAYLOAD = 64 * 1024
_MAX_FIELD_BYTES = 0xFFFF
_READ_CHUNK_BYTES = 1024 * 1024
_SUFFIX = ".rv"


@dataclass(frozen=True)
class Validators:
    """What a page's last response said, for its next visit: the ETag and Last-Modified to send
    back (If-None-Match / If-Modified-Since) and the hash of its body (an identical 2xx body
    is then reported ``unchanged``). Empty strings are stored as None."""

    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None

    def encode(self) -> bytes:
        """For the scheduler's Redis (header values never contain a newline)."""
        return "\n".join((self.etag or "", self.last_modified or "", self.content_hash or "")).encode()

    @classmethod
    def decode(cls, raw: bytes | str | None) -> Validators | None:
        if raw is None:
            return None
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        parts = [*text.split("\n"), "", "", ""][:3]
        return cls(parts[0] or None, parts[1] or None, parts[2] or None)

    def after(self, response: Validators, status: int) -> Validators:
        """The validators to keep after ``response``: a 304 repeats what it does not restate
        (RFC 9110 lets it omit them), anything else replaces them."""
        if status != 304:
            return response
        return Validators(
            response.etag or self.etag,
            response.last_modified or self.last_modified,
            response.content_hash or self.content_hash,
        )


@dataclass(frozen=True)
class RevisitRecord:
    """One page due for a revisit at ``due_ms``."""

    due_ms: int
    url_key: int
    depth: int
    domain: str
    url: str
    validators: Validators


@dataclass(frozen=True)
class RevisitCursor:
    """Where a partition's reading stands: the bucket file being read and the offset in it."""

    bucket_ms: int = 0
    offset: int = 0


def _field(value: str | None) -> bytes:
    raw = (value or "").encode("utf-8", "surrogatepass")[:_MAX_FIELD_BYTES]
    return _LEN.pack(len(raw)) + raw


def encode_revisit(record: RevisitRecord) -> bytes:
    """One record (pure). Over-long validators are cut at 65,535 bytes (the fetcher keeps
    header values far shorter)."""
    v = record.validators
    payload = (
        _FIXED.pack(record.due_ms, record.url_key & 0xFFFFFFFFFFFFFFFF, min(max(record.depth, 0), 0xFFFF))
        + _field(record.domain)
        + _field(record.url)
        + _field(v.etag)
        + _field(v.last_modified)
        + _field(v.content_hash)
    )
    return encode_frame(payload)


def decode_revisits(data: bytes | memoryview, base_offset: int = 0) -> tuple[list[tuple[RevisitRecord, int]], int]:
    """Whole records of ``data`` with the file offset after each; stops at the first torn or
    corrupt one. Returns ``(records, valid_end)`` (offsets counted from ``base_offset``)."""
    out: list[tuple[RevisitRecord, int]] = []
    end = base_offset
    for frame in iter_frames(data, base_offset=base_offset, min_size=_FIXED.size, max_size=_MAX_PAYLOAD):
        if not frame.intact:
            break  # damage ends the good records, as a torn tail does
        payload = frame.payload
        try:
            due_ms, key, depth = _FIXED.unpack_from(payload)
            at = _FIXED.size
            fields: list[str] = []
            for _ in range(5):
                (n,) = _LEN.unpack_from(payload, at)
                at += _LEN.size
                if at + n > len(payload):
                    raise ValueError("field past the record's end")
                fields.append(bytes(payload[at : at + n]).decode("utf-8", "surrogatepass"))
                at += n
        except (struct.error, ValueError):  # UnicodeDecodeError is a ValueError
            break  # the CRC matched bytes no encoder writes: corrupt all the same
        end = frame.end
        domain, url, etag, modified, chash = fields
        validators = Validators(etag or None, modified or None, chash or None)
        out.append((RevisitRecord(due_ms, key, depth, domain, url, validators), end))
    return out, end


class RevisitFiles:
    """The revisit files of every partition under ``root``; ``bucket_ms`` sets how wide a
    slice of due times one file holds (wider: fewer files, later deletion of read ones).

    Caller's contract (the scheduler): one owner per partition at a time, calls on a
    partition serialized; ``append`` then ``sync`` before committing the bus offsets of the
    results that produced the records; ``read_due`` hands out records from a cursor the
    caller stores, and ``remove_read`` runs only after the new cursor is stored.
    """

    def __init__(self, root: Path, bucket_ms: int) -> None:
        self.root = Path(root)
        self.bucket_ms = max(1, int(bucket_ms))
        self._dirty: set[Path] = set()
        self._checked: set[Path] = set()

    def _dir(self, partition: int) -> Path:
        return self.root / str(int(partition))

    def _path(self, partition: int, bucket_ms: int) -> Path:
        return self._dir(partition) / f"{bucket_ms}{_SUFFIX}"

    def buckets(self, partition: int) -> list[int]:
        """Bucket starts (ms) of the partition's files, oldest first."""
        try:
            names = os.listdir(self._dir(partition))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageUnavailable(f"cannot list revisit files of partition {partition} ({exc})") from exc
        return sorted(int(n[: -len(_SUFFIX)]) for n in names if n.endswith(_SUFFIX) and n[: -len(_SUFFIX)].isdigit())

    def append(self, partition: int, records: Sequence[RevisitRecord]) -> None:
        """Append ``records`` to the files of their due times (one write per file)."""
        by_bucket: dict[int, list[bytes]] = {}
        for record in records:
            by_bucket.setdefault(record.due_ms - record.due_ms % self.bucket_ms, []).append(encode_revisit(record))
        if not by_bucket:
            return
        try:
            self._dir(partition).mkdir(parents=True, exist_ok=True)
            for bucket, encoded in by_bucket.items():
                path = self._path(partition, bucket)
                if path not in self._checked:
                    self._cut_torn_tail(path)
                    self._checked.add(path)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, b"".join(encoded))
                finally:
                    os.close(fd)
                self._dirty.add(path)
        except OSError as exc:
            raise StorageUnavailable(f"cannot append to the revisit files of partition {partition} ({exc})") from exc

    def _cut_torn_tail(self, path: Path) -> None:
        """A record cut short by a crash would hide every record appended after it: drop it."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        _, end = decode_revisits(data)
        if end < len(data):
            with open(path, "r+b") as fh:
                fh.truncate(end)

    def sync(self) -> int:
        """fsync the files appended to since the last call (and their directories)."""
        dirty, self._dirty = self._dirty, set()
        try:
            for path in dirty:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            for directory in {p.parent for p in dirty}:
                fsync_dir(directory)
        except FileNotFoundError:
            pass  # read and removed meanwhile
        except OSError as exc:
            raise StorageUnavailable(f"cannot fsync revisit files ({exc})") from exc
        return len(dirty)

    def read_due(
        self, partition: int, cursor: RevisitCursor, now_ms: int, limit: int
    ) -> tuple[list[RevisitRecord], RevisitCursor, int | None]:
        """Up to ``limit`` records due at ``now_ms`` from ``cursor`` on.

        Returns (records, the cursor after them, when the next record is due: None when no
        record waits). A file is left for the next one only once its slice has ended, so
        records still being appended to it are not skipped.
        """
        out: list[RevisitRecord] = []
        for bucket in self.buckets(partition):
            if bucket < cursor.bucket_ms:
                continue  # read already (removed by remove_read)
            if bucket > now_ms:
                return out, cursor, bucket
            offset = cursor.offset if bucket == cursor.bucket_ms else 0
            path = self._path(partition, bucket)
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    while len(out) < limit:
                        chunk = fh.read(_READ_CHUNK_BYTES)
                        decoded, end = decode_revisits(chunk, offset)
                        if not decoded:
                            break
                        for record, after in decoded:
                            if record.due_ms > now_ms:
                                return out, RevisitCursor(bucket, offset), record.due_ms
                            out.append(record)
                            offset = after
                            if len(out) >= limit:
                                return out, RevisitCursor(bucket, offset), now_ms
                        fh.seek(end)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageUnavailable(f"cannot read revisit file {path} ({exc})") from exc
            if bucket + self.bucket_ms > now_ms:
                return out, RevisitCursor(bucket, offset), None  # its slice is still open: stay
            cursor = RevisitCursor(bucket + self.bucket_ms, 0)  # read to its end: the next file
        return out, cursor, None

    def remove_read(self, partition: int, cursor: RevisitCursor) -> int:
        """Delete the files before ``cursor`` (every record of theirs was handed out)."""
        removed = 0
        for bucket in self.buckets(partition):
            if bucket >= cursor.bucket_ms:
                break
            path = self._path(partition, bucket)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageUnavailable(f"cannot remove revisit file {path} ({exc})") from exc
            self._checked.discard(path)
            self._dirty.discard(path)
            removed += 1
        return removed
