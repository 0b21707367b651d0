"""Frontier file codec: a file header and length-prefixed, checksummed records. Pure.

File layout (little-endian)::

    header  = magic "CSFRONT\\0" | version u32 | generation u64          (20 bytes)
    record  = payload_len u32 | crc32(payload) u32 | payload   (a ``crawlstream.durable`` frame)
    payload = url_key u64 | discovered_at_ms i64 | depth u16 | attempt u16 | URL (UTF-8)

A domain's priority lane (``<domain>~lane``, see ``_store``) has its own magic
``CSFLANE\0`` and one more field, the URL's priority, after ``attempt``::

    payload = url_key u64 | discovered_at_ms i64 | depth u16 | attempt u16 | priority i32 | URL

Binary records rather than escaped text lines: any ``str`` URL round-trips byte for byte
(separators, newlines, NULs, lone surrogates via ``surrogatepass``), and the CRC makes a
torn tail after kill -9 detectable, so it is cut off on open instead of being misread. A
record that fails its CRC (or holds invalid UTF-8) ends the good records the same way: reading
stops before it and ``reconcile`` cuts the file there.
The generation in the header lets a reader tell whether Redis' offsets refer to this file
or to its pre-compaction predecessor (see ``_store``). The domain is not stored: the file
is named after it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crawlstream.durable import encode_frame, iter_frames
from crawlstream.errors import ChecksumMismatch

__all__ = [
    "HEADER_SIZE",
    "MAX_PRIORITY",
    "MAX_URL_BYTES",
    "FrontierEntry",
    "decode_header",
    "decode_records",
    "encode_header",
    "encode_record",
    "lane_priority",
    "priority_from_real",
]

FILE_MAGIC = b"CSFRONT\x00"
LANE_MAGIC = b"CSFLANE\x00"
FILE_VERSION = 1
_HEADER = struct.Struct("<8sIQ")
HEADER_SIZE = _HEADER.size
_FIXED = struct.Struct("<QqHH")
_LANE_FIXED = struct.Struct("<QqHHi")
MAX_URL_BYTES = 1 << 20  # a length beyond this is garbage (a torn or corrupt length field)
MAX_PRIORITY = (1 << 31) - 1  # DiscoveredUrl.priority is an Avro int


@dataclass(frozen=True)
class FrontierEntry:
    """One URL waiting in a domain's frontier. ``attempt`` is 0 for the first fetch.

    ``priority`` > 0 puts the URL in the domain's priority lane, read before its FIFO file
    (higher first, then by arrival); 0 (or less) is normal. Only lane records store it."""

    domain: str
    url: str
    url_key: int
    depth: int = 0
    discovered_at_ms: int = 0
    attempt: int = 0
    priority: int = 0


def lane_priority(priority: int | None) -> int:
    """The lane priority of a ``DiscoveredUrl.priority``: 0 (normal, the FIFO file) for None
    and values <= 0, else the value capped at ``MAX_PRIORITY``."""
    if priority is None or priority <= 0:
        return 0
    return min(int(priority), MAX_PRIORITY)


REAL_PRIORITY_SCALE = 1000


def priority_from_real(value: float | None) -> int:
    """The int priority of a REAL one (the seed crawler's ``frontier.priority``): x > 0 becomes
    ``round(x * 1000)`` within 1..``MAX_PRIORITY`` (1.0 -> 1000, 0.25 -> 250, 1e-9 -> 1), so
    distinct values 0.001 apart keep their order; None, NaN and x <= 0 are normal (0)."""
    if value is None or not value > 0:  # NaN fails every comparison
        return 0
    scaled = value * REAL_PRIORITY_SCALE
    return MAX_PRIORITY if scaled >= MAX_PRIORITY else max(1, round(scaled))


def encode_header(generation: int, *, lane: bool = False) -> bytes:
    return _HEADER.pack(LANE_MAGIC if lane else FILE_MAGIC, FILE_VERSION, generation)


def decode_header(data: bytes, source: str = "frontier file", *, lane: bool = False) -> int:
    """The generation recorded in a file header; ``ChecksumMismatch`` if it is not one (of a
    lane file when ``lane``, of a FIFO file otherwise: one is never read as the other)."""
    if len(data) < HEADER_SIZE:
        raise ChecksumMismatch(f"{source}: expected a {HEADER_SIZE}-byte header, found {len(data)} bytes")
    magic, version, generation = _HEADER.unpack_from(data)
    expected = LANE_MAGIC if lane else FILE_MAGIC
    if magic != expected or version != FILE_VERSION:
        raise ChecksumMismatch(
            f"{source}: expected magic {expected!r} v{FILE_VERSION}, found {magic!r} v{version}; "
            f"this is not a crawlstream frontier {'lane ' if lane else ''}file"
        )
    return int(generation)


def encode_record(entry: FrontierEntry, *, lane: bool = False) -> bytes:
    """One record. Depth and attempt are clamped to 0..65535; ``url_key`` is an unsigned 64-bit int;
    a lane record's priority is clamped to 0..``MAX_PRIORITY``."""
    url_bytes = entry.url.encode("utf-8", "surrogatepass")
    if len(url_bytes) > MAX_URL_BYTES:
        raise ValueError(f"URL of {len(url_bytes)} bytes exceeds the frontier limit of {MAX_URL_BYTES}")
    fixed = (
        entry.url_key & 0xFFFFFFFFFFFFFFFF,
        entry.discovered_at_ms,
        min(max(entry.depth, 0), 0xFFFF),
        min(max(entry.attempt, 0), 0xFFFF),
    )
    if lane:
        payload = _LANE_FIXED.pack(*fixed, min(max(entry.priority, 0), MAX_PRIORITY)) + url_bytes
    else:
        payload = _FIXED.pack(*fixed) + url_bytes
    return encode_frame(payload)


def decode_records(
    data: bytes | bytearray | memoryview,
    domain: str,
    base_offset: int = 0,
    limit: int | None = None,
    *,
    lane: bool = False,
) -> tuple[list[tuple[FrontierEntry, int]], int]:
    """Decode whole records from ``data``; stop at the first incomplete or corrupt one.

    Returns ``([(entry, offset_after_entry), ...], valid_end)`` with offsets counted from
    ``base_offset`` (the file position of ``data[0]``). ``valid_end`` is where decoding
    stopped: a caller compares it with the data it had to tell a torn tail from the end.
    ``lane``: records of a priority lane (they carry the priority).
    """
    fixed = _LANE_FIXED if lane else _FIXED
    out: list[tuple[FrontierEntry, int]] = []
    end = base_offset
    if limit is not None and limit <= 0:
        return out, end
    for frame in iter_frames(data, base_offset=base_offset, min_size=fixed.size, max_size=fixed.size + MAX_URL_BYTES):
        if not frame.intact:
            break  # damage ends the good records, as a torn tail does
        payload = frame.payload
        values = fixed.unpack_from(payload)
        try:
            url = bytes(payload[fixed.size :]).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            break  # the CRC matched bytes no encoder writes: corrupt all the same
        end = frame.end
        url_key, discovered_at_ms, depth, attempt = values[:4]
        priority = values[4] if lane else 0
        out.append((FrontierEntry(domain, url, url_key, depth, discovered_at_ms, attempt, priority), end))
        if limit is not None and len(out) >= limit:
            break
    return out, end
