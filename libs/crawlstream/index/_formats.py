"""Byte layouts of an index version. Pure: bytes, str and ints in and out; no I/O.

Files of one version (``index/<version>/``):

* ``domains.zst`` — the sorted unique registered domains, ``\\n``-delimited, zstd.
  ``domain_id`` is a domain's rank in that order.
* ``domains.idx`` — the lookup structure (ADR 003): ``[DDX1][ver:u32][N:u64][blob_len:u64]``
  then ``N`` xxh3_64 hashes sorted ascending (u64), the rank of each (u32), and ``N + 1``
  offsets (u64) of each domain inside the decompressed ``domains.zst`` blob. Memory-mapped;
  a lookup is one hash, a binary search and one string comparison (the "collision map" is
  implicit: equal hashes sit next to each other and the string comparison decides).
* ``domain_to_datasets.roar`` — the seed's DTDR layout, exactly:
  ``[DTDR][ver=1:u32][N_domains:u64][index_offset:u64][bitmaps...][N x {start:u64, len:u32}]``.
* ``postings/<shard>.idx`` + ``postings/<shard>.dat`` — shard = ``domain_id % shards``. The
  idx is ``[PDX1][ver=2:u32][N:u64][crc32 of the records:u64]`` then ``N`` fixed 20-byte
  records ``{domain_id, dataset_id, url_count, file_id, row_start}`` (u32 each) sorted by
  ``(domain_id, dataset_id)``, binary-searchable in place. The common case is *inline*: the
  pair's rows are the contiguous rows ``[row_start, row_start + url_count)`` of one lake
  file (files are sorted by domain), split into row groups with the registry's per-row-group
  counts. A *fragmented* pair (rows in several files, until compaction) has
  ``file_id = 0xFFFFFFFF`` and ``row_start`` = offset of its payload in the dat file:
  ``[body_len:u32][crc32:u32][body]`` (seed §9), body = varints
  ``flags, n, n x (file_id, row_group, row_start, row_count)``.
* ``files.tsv.zst`` — the files registry (see :class:`FileEntry`).

All integers little-endian.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from crawlstream.errors import ChecksumMismatch

__all__ = [
    "DDX_HEADER",
    "DTDR_HEADER",
    "FLAG_FRAGMENTED",
    "FRAGMENTED_FILE_ID",
    "IDX_RECORD",
    "PDX_HEADER",
    "PDX_VERSION",
    "FileEntry",
    "Segment",
    "decode_files",
    "decode_payload",
    "decode_varints",
    "encode_domains_idx",
    "encode_dtdr",
    "encode_files",
    "encode_payload",
    "encode_varints",
    "frame_payload",
    "inline_segments",
    "read_framed_payload",
]

DDX_MAGIC = b"DDX1"
DTDR_MAGIC = b"DTDR"
PDX_MAGIC = b"PDX1"
FORMAT_VERSION = 1

DDX_HEADER = struct.Struct("<4sIQQ")  # magic, ver, N, blob_len
DTDR_HEADER = struct.Struct("<4sIQQ")  # magic, ver, N_domains, index_offset
DTDR_ENTRY = struct.Struct("<QI")  # bitmap_start, bitmap_len
PDX_HEADER = struct.Struct("<4sIQQ")  # magic, ver, N, crc32 of the records
PDX_VERSION = 2
IDX_RECORD = struct.Struct("<IIIII")  # domain_id, dataset_id, url_count, file_id | FRAGMENTED, row_start | offset
FRAGMENTED_FILE_ID = 0xFFFFFFFF

FLAG_FRAGMENTED = 1  # the key's rows live in more than one lake file: readers merge + dedupe


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous run of one (domain, dataset)'s rows inside one row group of one lake file."""

    file_id: int
    row_group: int
    row_start: int
    row_count: int


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One lake file known to a version. ``rg_rows`` lets readers jump to a row group."""

    file_id: int
    dataset_id: int
    hh: str
    path: str  # relative to the lake root, e.g. urls/dataset_id=3/domain_prefix=af/part-....parquet
    size_bytes: int
    rg_rows: tuple[int, ...]

    @property
    def num_rows(self) -> int:
        return sum(self.rg_rows)


def encode_varints(values: Iterable[int]) -> bytes:
    out = bytearray()
    for v in values:
        if v < 0:
            raise ValueError(f"varints are unsigned; got {v}")
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def decode_varints(data: bytes | memoryview) -> list[int]:
    out: list[int] = []
    v = shift = 0
    for b in data:
        v |= (b & 0x7F) << shift
        if b & 0x80:
            shift += 7
        else:
            out.append(v)
            v = shift = 0
    if shift:
        raise ChecksumMismatch("postings payload ends inside a varint; rebuild the index version")
    return out


def encode_payload(segments: Sequence[Segment], *, fragmented: bool) -> bytes:
    ints = [FLAG_FRAGMENTED if fragmented else 0, len(segments)]
    for s in segments:
        ints += (s.file_id, s.row_group, s.row_start, s.row_count)
    body = encode_varints(ints)
    return struct.pack("<I", zlib.crc32(body)) + body


def decode_payload(data: bytes | memoryview) -> tuple[bool, list[Segment]]:
    """Return (fragmented, segments); raise ChecksumMismatch if the CRC does not match."""
    if len(data) < 5:
        raise ChecksumMismatch(f"postings payload of {len(data)} bytes is too short; rebuild the index")
    (crc,) = struct.unpack_from("<I", data, 0)
    body = bytes(data[4:])
    if zlib.crc32(body) != crc:
        raise ChecksumMismatch("postings payload CRC mismatch; the index version is corrupt: rebuild it")
    ints = decode_varints(body)
    flags, n = ints[0], ints[1]
    if len(ints) != 2 + 4 * n:
        raise ChecksumMismatch(f"postings payload declares {n} segments but holds {(len(ints) - 2) / 4}")
    segs = [Segment(ints[i], ints[i + 1], ints[i + 2], ints[i + 3]) for i in range(2, 2 + 4 * n, 4)]
    return bool(flags & FLAG_FRAGMENTED), segs


def inline_segments(file_id: int, row_start: int, row_count: int, rg_starts: Sequence[int]) -> list[Segment]:
    """Split rows ``[row_start, row_start + row_count)`` of a file at its row-group starts.

    ``rg_starts`` holds the first row of every row group plus the file's row count at the end.
    """
    import bisect

    out = []
    end = row_start + row_count
    rg = bisect.bisect_right(rg_starts, row_start) - 1
    pos = row_start
    while pos < end:
        rg_end = rg_starts[rg + 1]
        take = min(end, rg_end) - pos
        out.append(Segment(file_id, rg, pos - rg_starts[rg], take))
        pos += take
        rg += 1
    return out


def frame_payload(payload: bytes) -> bytes:
    """A payload as stored in a dat file: its length first, so the idx needs only an offset."""
    return struct.pack("<I", len(payload)) + payload


def read_framed_payload(buf: bytes | memoryview | Any, offset: int) -> bytes:
    (length,) = struct.unpack_from("<I", buf, offset)
    return bytes(buf[offset + 4 : offset + 4 + length])


def encode_dtdr(bitmaps: Sequence[bytes]) -> bytes:
    """The seed's DTDR file from each domain's serialized Roaring bitmap (index = domain_id)."""
    parts = [b""]  # header placeholder
    offset = DTDR_HEADER.size
    index = bytearray()
    for bm in bitmaps:
        index += DTDR_ENTRY.pack(offset, len(bm))
        parts.append(bm)
        offset += len(bm)
    parts[0] = DTDR_HEADER.pack(DTDR_MAGIC, FORMAT_VERSION, len(bitmaps), offset)
    parts.append(bytes(index))
    return b"".join(parts)


def dtdr_entry(buf: bytes | memoryview, domain_id: int) -> tuple[int, int]:
    magic, ver, n, index_offset = DTDR_HEADER.unpack_from(buf, 0)
    if magic != DTDR_MAGIC or ver != FORMAT_VERSION:
        raise ChecksumMismatch(f"expected a DTDR v1 file, found magic {magic!r} version {ver}")
    if not 0 <= domain_id < n:
        raise IndexError(domain_id)
    start, length = DTDR_ENTRY.unpack_from(buf, index_offset + DTDR_ENTRY.size * domain_id)
    return start, length


def encode_domains_idx(domains: Sequence[str], hashes: Sequence[int]) -> tuple[bytes, bytes]:
    """Return (``domains.zst`` plain blob, ``domains.idx``) for sorted ``domains`` and their xxh3_64."""
    blob = "\n".join(domains).encode()
    offsets = [0]
    pos = 0
    for d in domains:
        pos += len(d.encode()) + 1
        offsets.append(pos)
    order = sorted(range(len(domains)), key=hashes.__getitem__)
    idx = bytearray(DDX_HEADER.pack(DDX_MAGIC, FORMAT_VERSION, len(domains), len(blob)))
    idx += struct.pack(f"<{len(order)}Q", *(hashes[i] for i in order))
    idx += struct.pack(f"<{len(order)}I", *order)
    idx += struct.pack(f"<{len(offsets)}Q", *offsets)
    return blob, bytes(idx)


_FILES_HEADER = "file_id\tdataset_id\thh\tpath\tsize_bytes\trg_rows\n"


def encode_files(entries: Iterable[FileEntry]) -> bytes:
    lines = [_FILES_HEADER]
    for e in entries:
        rg = ",".join(map(str, e.rg_rows))
        lines.append(f"{e.file_id}\t{e.dataset_id}\t{e.hh}\t{e.path}\t{e.size_bytes}\t{rg}\n")
    return "".join(lines).encode()


def decode_files(data: bytes) -> list[FileEntry]:
    out = []
    for line in data.decode().splitlines()[1:]:
        fid, ds, hh, path, size, rg = line.split("\t")
        rows = tuple(int(x) for x in rg.split(",")) if rg else ()
        out.append(FileEntry(int(fid), int(ds), hh, path, int(size), rows))
    return out
