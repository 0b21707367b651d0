"""Frontier file codec: a file header and length-prefixed, checksummed records. Pure.

File layout (little-endian)::

    header  = magic "CSFRONT\\0" | version u32 | generation u64          (20 bytes)
    record  = payload_len u32 | crc32(payload) u32 | payload
    payload = url_key u64 | discovered_at_ms i64 | depth u16 | attempt u16 | URL (UTF-8)

Binary records rather than escaped text lines: any ``str`` URL round-trips byte for byte
(separators, newlines, NULs, lone surrogates via ``surrogatepass``), and the CRC makes a
torn tail after kill -9 detectable, so it is cut off on open instead of being misread.
The generation in the header lets a reader tell whether Redis' offsets refer to this file
or to its pre-compaction predecessor (see ``_store``). The domain is not stored: the file
is named after it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from crawlstream.errors import ChecksumMismatch

__all__ = [
    "HEADER_SIZE",
    "MAX_URL_BYTES",
    "FrontierEntry",
    "decode_header",
    "decode_records",
    "encode_header",
    "encode_record",
]

FILE_MAGIC = b"CSFRONT\x00"
FILE_VERSION = 1
_HEADER = struct.Struct("<8sIQ")
HEADER_SIZE = _HEADER.size
_PREFIX = struct.Struct("<II")
_FIXED = struct.Struct("<QqHH")
MAX_URL_BYTES = 1 << 20  # a length beyond this is garbage (a torn or corrupt length field)
_MAX_PAYLOAD = _FIXED.size + MAX_URL_BYTES


@dataclass(frozen=True)
class FrontierEntry:
    """One URL waiting in a domain's frontier. ``attempt`` is 0 for the first fetch."""

    domain: str
    url: str
    url_key: int
    depth: int = 0
    discovered_at_ms: int = 0
    attempt: int = 0


def encode_header(generation: int) -> bytes:
    return _HEADER.pack(FILE_MAGIC, FILE_VERSION, generation)


def decode_header(data: bytes, source: str = "frontier file") -> int:
    """The generation recorded in a file header; ``ChecksumMismatch`` if it is not one."""
    if len(data) < HEADER_SIZE:
        raise ChecksumMismatch(f"{source}: expected a {HEADER_SIZE}-byte header, found {len(data)} bytes")
    magic, version, generation = _HEADER.unpack_from(data)
    if magic != FILE_MAGIC or version != FILE_VERSION:
        raise ChecksumMismatch(
            f"{source}: expected magic {FILE_MAGIC!r} v{FILE_VERSION}, found {magic!r} v{version}; "
            "this is not a crawlstream frontier file"
        )
    return int(generation)


def encode_record(entry: FrontierEntry) -> bytes:
    """One record. Depth and attempt are clamped to 0..65535; ``url_key`` is an unsigned 64-bit int."""
    url_bytes = entry.url.encode("utf-8", "surrogatepass")
    if len(url_bytes) > MAX_URL_BYTES:
        raise ValueError(f"URL of {len(url_bytes)} bytes exceeds the frontier limit of {MAX_URL_BYTES}")
    payload = (
        _FIXED.pack(
            entry.url_key & 0xFFFFFFFFFFFFFFFF,
            entry.discovered_at_ms,
            min(max(entry.depth, 0), 0xFFFF),
            min(max(entry.attempt, 0), 0xFFFF),
        )
        + url_bytes
    )
    return _PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


def decode_records(
    data: bytes | bytearray | memoryview, domain: str, base_offset: int = 0, limit: int | None = None
) -> tuple[list[tuple[FrontierEntry, int]], int]:
    """Decode whole records from ``data``; stop at the first incomplete or corrupt one.

    Returns ``([(entry, offset_after_entry), ...], valid_end)`` with offsets counted from
    ``base_offset`` (the file position of ``data[0]``). ``valid_end`` is where decoding
    stopped: a caller compares it with the data it had to tell a torn tail from the end.
    """
    view = memoryview(data)
    out: list[tuple[FrontierEntry, int]] = []
    pos = 0
    end = len(view)
    while end - pos >= _PREFIX.size and (limit is None or len(out) < limit):
        length, crc = _PREFIX.unpack_from(view, pos)
        if length < _FIXED.size or length > _MAX_PAYLOAD or pos + _PREFIX.size + length > end:
            break
        start = pos + _PREFIX.size
        payload = view[start : start + length]
        if zlib.crc32(payload) != crc:
            break
        url_key, discovered_at_ms, depth, attempt = _FIXED.unpack_from(payload)
        try:
            url = bytes(payload[_FIXED.size :]).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            break  # the CRC matched bytes no encoder writes: corrupt all the same
        pos = start + length
        out.append((FrontierEntry(domain, url, url_key, depth, discovered_at_ms, attempt), base_offset + pos))
    return out, base_offset + pos
