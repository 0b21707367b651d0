"""Byte layouts of the content store: segment records and CRC-framed log records.

Pure: no I/O, no clock, no environment. An external reader can reproduce every layout
here from this module alone (it mirrors the IIPC warc-zstd idea: the fixed record header
lives in a zstd *skippable frame*, so ``zstd -d`` over a segment yields, per record, its
metadata line followed by its body).

Segment record, format version 3 (little endian). A *single* record (hot and warm tiers)::

    skippable frame: u32 magic 0x184D2A5D | u32 payload_size | HEADER | u32 crc32(HEADER)
    zstd frame: frame_size bytes, decompressing to  meta (JSON line, meta_len bytes) | body
    (REF records, which only name an identical stored body by content hash, have a frame
    holding the metadata alone; a hot body stored as the fetcher compressed it is two frames
    back to back, the metadata's then the body's, both without a dictionary: ``zstd -d``
    yields the same bytes, and the frame_size and frame_checksum cover both)

HEADER = version u8 (3), kind u8, dict_id u32, url_key u64, seq u64, fetched_at_ms i64,
raw_size u64, frame_size u64, content_hash 16 bytes (xxh3_128 of the raw body),
frame_checksum u64 (xxh3_64 of the stored zstd frame), meta_len u32.

A *group* record (cold and archive tiers) holds several members in one zstd frame, so
each page also compresses against the pages before it (docs/decisions/002)::

    skippable frame: u32 magic | u32 payload_size | GROUP | count x MEMBER | u32 crc32(GROUP + MEMBERs)
    zstd frame: frame_size bytes, decompressing to  member 0 content | member 1 content | ...

GROUP = version u8 (3), kind u8 (3, or 4), dict_id u32, frame_size u32, frame_checksum u64, count u16.
Kind 4 (archive tier only, ADR 026): the frame is one bzip2 stream (no dictionary, dict_id 0)
instead of a zstd frame, written when it is the smaller of the two: prose-like text, whose
Burrows-Wheeler sort finds context an LZ window does not. ``zstd -d`` stops at such a record
(``bzip2 -d`` reads its frame); every other record is as above.
MEMBER = kind u8 (body or ref), meta_len u32, body_size u32, checksum u64 (xxh3_64 of the
member's content: its metadata line, then its body). A member's metadata line also carries
its seq ("q") and fetched_at_ms ("f"); a ref member's also the body's hash ("h") and size
("z"). Reading member i decompresses the frame's first members up to i's end.

The metadata (url, content type, title, status; for fetched pages also the HTTP response
head and server address, ``_response``) sits inside the compressed frame so it compresses
against the domain dictionary; the binary header is all a scan needs to frame,
check and skip records.

Log record: u32 payload_len | u32 crc32(payload) | payload (compact JSON object): a little-endian
frame of ``crawlstream.durable`` (``encode_frame``, read with ``iter_frames``).

The url index is a SQLite database (``_index_db``); the snapshots of the layout before it are
read once, to migrate, by ``_index_legacy``.
"""

from __future__ import annotations

import contextlib
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import xxhash

from crawlstream.durable import encode_frame, iter_frames
from crawlstream.errors import BadDataError, ChecksumMismatch

__all__ = [
    "KIND_BODY",
    "KIND_GROUP",
    "KIND_GROUP_BZIP2",
    "KIND_REF",
    "SKIPPABLE_MAGIC",
    "VERSION",
    "GroupHeader",
    "Member",
    "RecordHeader",
    "ScanItem",
    "TornRecord",
    "UnsupportedFormat",
    "content_hash",
    "decode_log_records",
    "decode_meta",
    "decode_record_header",
    "encode_group",
    "encode_log_record",
    "encode_meta",
    "encode_record",
    "frame_checksum",
    "member_checksum",
    "scan_records",
]

SKIPPABLE_MAGIC = 0x184D2A5D
_SKIP = struct.Struct("<II")
_HEADER = struct.Struct("<BBIQQqQQ16sQI")
_CRC = struct.Struct("<I")
_GROUP = struct.Struct("<BBIIQH")
_MEMBER = struct.Struct("<BIIQ")
VERSION = 3
KIND_BODY = 1
KIND_REF = 2
KIND_GROUP = 3
KIND_GROUP_BZIP2 = 4
GROUP_KINDS = (KIND_GROUP, KIND_GROUP_BZIP2)
MAX_GROUP_MEMBERS = 0xFFFF
_MAGIC_BYTES = _SKIP.pack(SKIPPABLE_MAGIC, 0)[:4]
_PAYLOAD_SIZE = _HEADER.size + _CRC.size
MAX_META_BYTES = 1 << 20
_MAX_ZSTD_RATIO = 32768
"""No zstd frame decompresses to more than this many bytes per stored byte (a 4-byte RLE block
yields at most 128 KiB): a header that claims more is corrupt, whatever its crc32 says."""
_MAX_BZIP2_RATIO = 50_000_000  # bzip2's worst case is ~46 million to 1 (runs of one byte)
_JSON_ERRORS = (ValueError, RecursionError)  # RecursionError: nesting deeper than the C parser's stack


class TornRecord(BadDataError):
    """The buffer ends inside a record: a write was cut short (crash), not corruption."""


class UnsupportedFormat(BadDataError):
    """Bytes written by another (older) version of the store layout: never read as data."""


def content_hash(body: bytes | memoryview) -> bytes:
    """xxh3_128 of the raw body: the dedupe key (16 bytes)."""
    return xxhash.xxh3_128_digest(body)


def frame_checksum(frame: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(frame)


def member_checksum(*content: bytes | memoryview) -> int:
    """xxh3_64 of one group member's content (metadata line + body, given whole or in consecutive
    parts): checked on every member read."""
    if len(content) == 1:
        return xxhash.xxh3_64_intdigest(content[0])
    hasher = xxhash.xxh3_64()
    for part in content:
        hasher.update(part)
    return hasher.intdigest()


def encode_meta(meta: dict[str, Any]) -> bytes:
    """The metadata line placed before the body inside the zstd frame (None values dropped)."""
    data = json.dumps(
        {k: v for k, v in meta.items() if v is not None}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    if len(data) >= MAX_META_BYTES:
        raise BadDataError(f"record metadata is {len(data)} bytes, over {MAX_META_BYTES}; shorten the title/url")
    return data + b"\n"


def decode_meta(data: bytes | memoryview) -> dict[str, Any]:
    """Inverse of ``encode_meta``; ChecksumMismatch if the bytes are not a metadata line."""
    try:
        meta = json.loads(bytes(data))
    except _JSON_ERRORS as exc:
        raise ChecksumMismatch("record metadata inside the frame is not JSON") from exc
    if not isinstance(meta, dict):
        raise ChecksumMismatch("record metadata inside the frame is not a JSON object")
    return meta


@dataclass(frozen=True)
class RecordHeader:
    """The fixed binary header of a segment record (outside the compressed frame).

    ``meta`` is filled only once the frame's metadata prefix has been decompressed (the
    store does that; this pure module cannot, it has no dictionaries).
    """

    kind: int
    dict_id: int
    url_key: int
    seq: int
    fetched_at_ms: int
    raw_size: int
    frame_size: int
    content_hash: bytes
    frame_checksum: int
    meta_len: int = 0
    header_size: int = 0  # bytes before the zstd frame (the whole skippable frame)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return str(self.meta.get("u", ""))

    @property
    def record_size(self) -> int:
        return self.header_size + self.frame_size

    @property
    def content_size(self) -> int:
        """Bytes the frame decompresses to: metadata line, then the body (BODY records)."""
        return self.meta_len + (self.raw_size if self.kind == KIND_BODY else 0)


def encode_record(
    *,
    kind: int,
    url_key: int,
    seq: int,
    fetched_at_ms: int,
    raw_size: int,
    chash: bytes,
    meta_len: int,
    frame: bytes,
    dict_id: int = 0,
) -> bytes:
    """One record: skippable header frame followed by the zstd frame.

    ``frame`` is the zstd compression of ``encode_meta(meta) + body`` (metadata alone for
    REF records) and ``meta_len`` the length of that metadata line.
    """
    if len(chash) != 16:
        raise ValueError(f"content hash must be 16 bytes (xxh3_128), got {len(chash)}")
    if not frame:
        raise ValueError("a record needs its zstd frame (metadata at least)")
    fixed = _HEADER.pack(
        VERSION,
        kind,
        dict_id,
        url_key,
        seq,
        fetched_at_ms,
        raw_size,
        len(frame),
        chash,
        frame_checksum(frame),
        meta_len,
    )
    return _SKIP.pack(SKIPPABLE_MAGIC, _PAYLOAD_SIZE) + fixed + _CRC.pack(zlib.crc32(fixed)) + frame


@dataclass(frozen=True)
class Member:
    """One member of a group record: where its content sits in the decompressed frame."""

    kind: int
    meta_len: int
    body_size: int
    checksum: int
    start: int  # offset of its content (metadata line, then body) in the decompressed frame

    @property
    def end(self) -> int:
        return self.start + self.meta_len + self.body_size


@dataclass(frozen=True)
class GroupHeader:
    """The skippable-frame header of a group record: the member table of one shared frame
    (zstd; bzip2 for ``kind`` ``KIND_GROUP_BZIP2``)."""

    dict_id: int
    frame_size: int
    frame_checksum: int
    members: tuple[Member, ...]
    header_size: int
    kind: int = KIND_GROUP

    @property
    def record_size(self) -> int:
        return self.header_size + self.frame_size

    @property
    def content_size(self) -> int:
        return self.members[-1].end


def encode_group(
    *, dict_id: int, members: list[tuple[int, int, int, int]], frame: bytes, kind: int = KIND_GROUP
) -> bytes:
    """One group record. ``members`` are (kind, meta_len, body_size, member_checksum) in frame
    order; ``frame`` is the zstd (``kind`` 3) or bzip2 (``kind`` 4, no dictionary) compression
    of their contents concatenated."""
    if kind not in GROUP_KINDS or (kind == KIND_GROUP_BZIP2 and dict_id):
        raise ValueError(f"a group is of kind 3 (zstd) or 4 (bzip2, without a dictionary), got {kind}/{dict_id}")
    if not members or len(members) > MAX_GROUP_MEMBERS:
        raise ValueError(f"a group holds 1 to {MAX_GROUP_MEMBERS} members, got {len(members)}")
    if not frame or len(frame) > 0xFFFFFFFF:
        raise ValueError(f"a group frame must be 1 byte to 4 GiB, got {len(frame)}")
    payload = _GROUP.pack(VERSION, kind, dict_id, len(frame), frame_checksum(frame), len(members)) + b"".join(
        _MEMBER.pack(kind, meta_len, body_size, checksum) for kind, meta_len, body_size, checksum in members
    )
    return _SKIP.pack(SKIPPABLE_MAGIC, len(payload) + _CRC.size) + payload + _CRC.pack(zlib.crc32(payload)) + frame


def decode_record_header(buf: bytes | memoryview, offset: int = 0) -> RecordHeader | GroupHeader:
    """Parse and check the header (single or group record) at ``offset``.

    Raises TornRecord if ``buf`` ends before the header (or the frame) ends,
    UnsupportedFormat for a valid header of another layout version, and ChecksumMismatch
    if the bytes there are not a valid header.
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
    start = offset + _SKIP.size
    if size != _PAYLOAD_SIZE:
        if _group_shaped(size):
            return _decode_group_header(view, offset, start, size)
        if size >= 80 and start + size <= end and view[start] == 1 and _v1_crc_ok(view, start, size):
            raise UnsupportedFormat(
                f"record at offset {offset} is in store format version 1; this build reads version {VERSION}. "
                "Re-ingest the pages into a new store directory (no migration exists)"
            )
        raise ChecksumMismatch(f"record header at offset {offset} declares an impossible size {size}")
    if start + size > end:
        raise TornRecord(f"record header at offset {offset} cut short")
    fixed = view[start : start + _HEADER.size]
    (crc,) = _CRC.unpack_from(view, start + _HEADER.size)
    if zlib.crc32(fixed) != crc:
        raise ChecksumMismatch(f"record header at offset {offset} fails its crc32")
    (version, kind, dict_id, url_key, seq, fetched_at_ms, raw_size, frame_size, chash, fsum, meta_len) = (
        _HEADER.unpack_from(fixed, 0)
    )
    if version != VERSION:
        raise UnsupportedFormat(
            f"record at offset {offset} is in store format version {version}; this build reads version {VERSION}"
        )
    if kind not in (KIND_BODY, KIND_REF) or meta_len >= MAX_META_BYTES or not frame_size:
        raise ChecksumMismatch(f"record header at offset {offset} has kind {kind}: not understood")
    header_size = _SKIP.size + size
    if offset + header_size + frame_size > end:
        raise TornRecord(f"record at offset {offset} ends past the end of the data")
    header = RecordHeader(
        kind, dict_id, url_key, seq, fetched_at_ms, raw_size, frame_size, bytes(chash), fsum, meta_len, header_size
    )
    _check_expansion(header, offset)
    return header


def _check_expansion(header: RecordHeader | GroupHeader, offset: int) -> None:
    """ChecksumMismatch if the header claims more content than its frame could hold: readers
    size their buffers from these fields, so a bogus one must never reach them."""
    bzip2 = header.kind == KIND_GROUP_BZIP2
    if header.content_size > header.frame_size * (_MAX_BZIP2_RATIO if bzip2 else _MAX_ZSTD_RATIO):
        codec = "bzip2" if bzip2 else "zstd"
        raise ChecksumMismatch(
            f"record at offset {offset} claims {header.content_size} content bytes from a "
            f"{header.frame_size}-byte {codec} frame, more than {codec} can expand: the header is corrupt"
        )


def _group_shaped(size: int) -> bool:
    members, rest = divmod(size - _GROUP.size - _CRC.size, _MEMBER.size)
    return 1 <= members <= MAX_GROUP_MEMBERS and rest == 0


def _decode_group_header(view: memoryview, offset: int, start: int, size: int) -> GroupHeader:
    if start + size > len(view):
        raise TornRecord(f"group header at offset {offset} cut short")
    payload = view[start : start + size - _CRC.size]
    (crc,) = _CRC.unpack_from(view, start + size - _CRC.size)
    if zlib.crc32(payload) != crc:
        raise ChecksumMismatch(f"group header at offset {offset} fails its crc32")
    version, kind, dict_id, frame_size, fsum, count = _GROUP.unpack_from(payload, 0)
    if version != VERSION:
        raise UnsupportedFormat(
            f"record at offset {offset} is in store format version {version}; this build reads version {VERSION}"
        )
    consistent = kind == KIND_GROUP or (kind == KIND_GROUP_BZIP2 and not dict_id)
    if not consistent or count != (size - _GROUP.size - _CRC.size) // _MEMBER.size or not frame_size:
        raise ChecksumMismatch(f"group header at offset {offset} is inconsistent (kind {kind}, {count} members)")
    members: list[Member] = []
    pos = 0
    for i in range(count):
        mkind, meta_len, body_size, checksum = _MEMBER.unpack_from(payload, _GROUP.size + i * _MEMBER.size)
        if mkind not in (KIND_BODY, KIND_REF) or meta_len >= MAX_META_BYTES or (mkind == KIND_REF and body_size):
            raise ChecksumMismatch(f"group header at offset {offset}: member {i} is not understood")
        members.append(Member(mkind, meta_len, body_size, checksum, pos))
        pos += meta_len + body_size
    header_size = _SKIP.size + size
    if offset + header_size + frame_size > len(view):
        raise TornRecord(f"group record at offset {offset} ends past the end of the data")
    header = GroupHeader(dict_id, frame_size, fsum, tuple(members), header_size, kind)
    _check_expansion(header, offset)
    return header


def _v1_crc_ok(view: memoryview, start: int, size: int) -> bool:
    """True if the payload is a well-formed version-1 header (crc32 over all but the last 4 bytes)."""
    (crc,) = _CRC.unpack_from(view, start + size - _CRC.size)
    return zlib.crc32(view[start : start + size - _CRC.size]) == crc


@dataclass(frozen=True)
class ScanItem:
    """One step of a segment scan: a good record, a corrupt region, or a torn tail."""

    offset: int
    length: int
    header: RecordHeader | GroupHeader | None  # None for a bad region
    problem: str = ""  # "" | "corrupt" | "torn"
    frame_ok: bool = True  # False: a group whose frame fails its checksum (members are checked one by one)


def scan_records(buf: bytes | memoryview, start: int = 0) -> Iterator[ScanItem]:
    """Walk the records of a segment buffer, as warcio's iterator does: each with its offset.

    A record whose header or frame checksum fails is yielded as a ``corrupt`` region that
    extends to the next offset where a valid header starts (resynchronising on the
    skippable-frame magic), so one damaged record never hides the others. A group record
    whose header is valid but whose frame fails its checksum is yielded with its header and
    ``frame_ok=False``: its members carry their own checksums, so the intact ones can still
    be read. An incomplete final record is a ``torn`` region (a crash mid-append).
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)  # _resync searches view.obj, which for a memoryview slice is the whole parent
    view = memoryview(buf)
    pos = start
    end = len(view)
    while pos < end:
        frame_ok = True
        try:
            header = decode_record_header(view, pos)
            if frame_checksum(view[pos + header.header_size : pos + header.record_size]) != header.frame_checksum:
                if not isinstance(header, GroupHeader):
                    raise ChecksumMismatch(f"frame checksum mismatch at offset {pos}")
                frame_ok = False
        except TornRecord:
            nxt = _resync(view, pos + 1)
            if nxt is None:
                yield ScanItem(pos, end - pos, None, "torn")
                return
            yield ScanItem(pos, nxt - pos, None, "corrupt")
            pos = nxt
            continue
        except (ChecksumMismatch, UnsupportedFormat):
            nxt = _resync(view, pos + 1)
            stop = end if nxt is None else nxt
            yield ScanItem(pos, stop - pos, None, "corrupt")
            if nxt is None:
                return
            pos = nxt
            continue
        yield ScanItem(pos, header.record_size, header, frame_ok=frame_ok)
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
        except (ChecksumMismatch, TornRecord, UnsupportedFormat):
            pos = idx + 1


def encode_log_record(obj: dict[str, Any]) -> bytes:
    return encode_frame(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def decode_log_records(buf: bytes) -> tuple[list[dict[str, Any]], int, int]:
    """Decode a log buffer: (records, valid_end, skipped).

    Stops at a torn tail (``valid_end`` is where the file should be truncated); a record
    whose crc fails but whose length is plausible is skipped and counted, and so is one
    whose payload is not a JSON object: this format's answer to the damage that
    ``crawlstream.durable.iter_frames`` reports.
    """
    out: list[dict[str, Any]] = []
    pos = 0
    skipped = 0
    for frame in iter_frames(buf):
        pos = frame.end
        record = None
        if frame.intact:
            with contextlib.suppress(*_JSON_ERRORS):
                record = json.loads(bytes(frame.payload))
        if isinstance(record, dict):
            out.append(record)
        else:
            skipped += 1
    return out, pos, skipped
