"""Byte layouts of the content store: segment records and CRC-framed log records.

Pure: no I/O, no clock, no environment. An external reader can reproduce every layout
here from this module alone (it mirrors the IIPC warc-zstd idea: metadata lives in zstd
*skippable frames*, so ``zstd -d`` over a segment yields the concatenated bodies).

Segment record (little endian)::

    skippable frame: u32 magic 0x184D2A5D | u32 payload_size | payload
      payload = HEADER (struct below) | meta (JSON, utf-8) | u32 crc32(HEADER + meta)
    zstd frame: frame_size bytes (absent for REF records, which only name a content hash)

HEADER = version u8, kind u8, pad u16, dict_id u32, url_key u64, seq u64,
fetched_at_ms i64, raw_size u64, frame_size u64, content_hash 16 bytes (xxh3_128 of the
raw body), frame_checksum u64 (xxh3_64 of the stored zstd frame), meta_len u32.

Log record: u32 payload_len | u32 crc32(payload) | payload (compact JSON object).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import xxhash

from crawlstream.errors import BadDataError, ChecksumMismatch

__all__ = [
    "KIND_BODY",
    "KIND_REF",
    "SKIPPABLE_MAGIC",
    "RecordHeader",
    "ScanItem",
    "TornRecord",
    "content_hash",
    "decode_log_records",
    "decode_record_header",
    "encode_log_record",
    "encode_record",
    "frame_checksum",
    "scan_records",
]

SKIPPABLE_MAGIC = 0x184D2A5D
_SKIP = struct.Struct("<II")
_HEADER = struct.Struct("<BBHIQQqQQ16sQI")
_CRC = struct.Struct("<I")
_LOG = struct.Struct("<II")
VERSION = 1
KIND_BODY = 1
KIND_REF = 2
_MAGIC_BYTES = _SKIP.pack(SKIPPABLE_MAGIC, 0)[:4]
MAX_META_BYTES = 1 << 20


class TornRecord(BadDataError):
    """The buffer ends inside a record: a write was cut short (crash), not corruption."""


def content_hash(body: bytes) -> bytes:
    """xxh3_128 of the raw body: the dedupe key (16 bytes)."""
    return xxhash.xxh3_128_digest(body)


def frame_checksum(frame: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(frame)


@dataclass(frozen=True)
class RecordHeader:
    """What a segment record says about itself: enough to rebuild the index without the body."""

    kind: int
    dict_id: int
    url_key: int
    seq: int
    fetched_at_ms: int
    raw_size: int
    frame_size: int
    content_hash: bytes
    frame_checksum: int
    meta: dict[str, Any] = field(default_factory=dict)
    header_size: int = 0  # bytes before the zstd frame (skippable frame included)

    @property
    def url(self) -> str:
        return str(self.meta.get("u", ""))

    @property
    def record_size(self) -> int:
        return self.header_size + self.frame_size


def encode_record(
    *,
    kind: int,
    url_key: int,
    seq: int,
    fetched_at_ms: int,
    raw_size: int,
    chash: bytes,
    meta: dict[str, Any],
    frame: bytes = b"",
    dict_id: int = 0,
) -> bytes:
    """One record: skippable header frame followed by the zstd frame (if any)."""
    if len(chash) != 16:
        raise ValueError(f"content hash must be 16 bytes (xxh3_128), got {len(chash)}")
    meta_bytes = json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode()
    if len(meta_bytes) > MAX_META_BYTES:
        raise BadDataError(f"record metadata is {len(meta_bytes)} bytes, over {MAX_META_BYTES}; shorten the title/url")
    fixed = _HEADER.pack(
        VERSION,
        kind,
        0,
        dict_id,
        url_key,
        seq,
        fetched_at_ms,
        raw_size,
        len(frame),
        chash,
        frame_checksum(frame) if frame else 0,
        len(meta_bytes),
    )
    body = fixed + meta_bytes
    payload = body + _CRC.pack(zlib.crc32(body))
    return _SKIP.pack(SKIPPABLE_MAGIC, len(payload)) + payload + frame


def decode_record_header(buf: bytes | memoryview, offset: int = 0) -> RecordHeader:
    """Parse and check the header at ``offset``.

    Raises TornRecord if ``buf`` ends before the header (or the frame) ends, and
    ChecksumMismatch if the bytes there are not a valid header.
    """
    view = memoryview(buf)
    end = len(view)
    if offset + _SKIP.size > end:
        raise TornRecord(f"record header cut short at offset {offset}")
    magic, size = _SKIP.unpack_from(view, offset)
    if magic != SKIPPABLE_MAGIC:
        raise ChecksumMismatch(
            f"expected a record header (magic {SKIPPABLE_MAGIC:#x}) at offset {offset}, found {magic:#x}"
        )
    if size < _HEADER.size + _CRC.size or size > _HEADER.size + _CRC.size + MAX_META_BYTES:
        raise ChecksumMismatch(f"record header at offset {offset} declares an impossible size {size}")
    start = offset + _SKIP.size
    if start + size > end:
        raise TornRecord(f"record header at offset {offset} cut short")
    body = view[start : start + size - _CRC.size]
    (crc,) = _CRC.unpack_from(view, start + size - _CRC.size)
    if zlib.crc32(body) != crc:
        raise ChecksumMismatch(f"record header at offset {offset} fails its crc32")
    (version, kind, _pad, dict_id, url_key, seq, fetched_at_ms, raw_size, frame_size, chash, fsum, meta_len) = (
        _HEADER.unpack_from(body, 0)
    )
    if version != VERSION or kind not in (KIND_BODY, KIND_REF) or _HEADER.size + meta_len != len(body):
        raise ChecksumMismatch(f"record header at offset {offset} has version {version} kind {kind}: not understood")
    try:
        meta = json.loads(bytes(body[_HEADER.size :]))
    except ValueError as exc:
        raise ChecksumMismatch(f"record metadata at offset {offset} is not JSON") from exc
    header_size = _SKIP.size + size
    if offset + header_size + frame_size > end:
        raise TornRecord(f"record at offset {offset} ends past the end of the data")
    return RecordHeader(
        kind, dict_id, url_key, seq, fetched_at_ms, raw_size, frame_size, bytes(chash), fsum, meta, header_size
    )


@dataclass(frozen=True)
class ScanItem:
    """One step of a segment scan: a good record, a corrupt region, or a torn tail."""

    offset: int
    length: int
    header: RecordHeader | None  # None for a bad region
    problem: str = ""  # "" | "corrupt" | "torn"


def scan_records(buf: bytes | memoryview, start: int = 0) -> Iterator[ScanItem]:
    """Walk the records of a segment buffer, as warcio's iterator does: each with its offset.

    A record whose header or frame checksum fails is yielded as a ``corrupt`` region that
    extends to the next offset where a valid header starts (resynchronising on the
    skippable-frame magic), so one damaged record never hides the others. An incomplete
    final record is a ``torn`` region (a crash mid-append).
    """
    view = memoryview(buf)
    pos = start
    end = len(view)
    while pos < end:
        try:
            header = decode_record_header(view, pos)
            if (
                header.frame_size
                and frame_checksum(view[pos + header.header_size : pos + header.record_size]) != header.frame_checksum
            ):
                raise ChecksumMismatch(f"frame checksum mismatch at offset {pos}")
        except TornRecord:
            nxt = _resync(view, pos + 1)
            if nxt is None:
                yield ScanItem(pos, end - pos, None, "torn")
                return
            yield ScanItem(pos, nxt - pos, None, "corrupt")
            pos = nxt
            continue
        except ChecksumMismatch:
            nxt = _resync(view, pos + 1)
            stop = end if nxt is None else nxt
            yield ScanItem(pos, stop - pos, None, "corrupt")
            if nxt is None:
                return
            pos = nxt
            continue
        yield ScanItem(pos, header.record_size, header)
        pos += header.record_size


def _resync(view: memoryview, pos: int) -> int | None:
    """Next offset >= pos where a complete, valid record header starts."""
    data = view.obj if isinstance(view.obj, bytes) else bytes(view)
    while True:
        idx = data.find(_MAGIC_BYTES, pos)
        if idx < 0:
            return None
        try:
            decode_record_header(view, idx)
            return idx
        except (ChecksumMismatch, TornRecord):
            pos = idx + 1


def encode_log_record(obj: dict[str, Any]) -> bytes:
    payload = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return _LOG.pack(len(payload), zlib.crc32(payload)) + payload


def decode_log_records(buf: bytes) -> tuple[list[dict[str, Any]], int, int]:
    """Decode a log buffer: (records, valid_end, skipped).

    Stops at a torn tail (``valid_end`` is where the file should be truncated); a record
    whose crc fails but whose length is plausible is skipped and counted.
    """
    out: list[dict[str, Any]] = []
    pos = 0
    skipped = 0
    end = len(buf)
    while pos + _LOG.size <= end:
        length, crc = _LOG.unpack_from(buf, pos)
        stop = pos + _LOG.size + length
        if stop > end:
            break
        payload = buf[pos + _LOG.size : stop]
        if zlib.crc32(payload) != crc:
            skipped += 1
        else:
            try:
                out.append(json.loads(payload))
            except ValueError:
                skipped += 1
        pos = stop
    return out, pos, skipped
