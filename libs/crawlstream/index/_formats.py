"""Byte layouts of an index version. Pure: bytes, str, ints and arrays in and out; no I/O.

Files of one version (``index/<version>/``):

* ``domains.zst`` — the sorted unique registered domains, ``\\n``-delimited, zstd.
  ``domain_id`` is a domain's rank in that order. Readers find a domain by binary search
  over the decompressed blob (line offsets computed once per version open; ADR 003).
* ``domain_to_datasets.roar`` — the seed's DTDR layout, exactly:
  ``[DTDR][ver=1:u32][N_domains:u64][index_offset:u64][bitmaps...][N x {start:u64, len:u32}]``.
* ``postings.bin`` — the runs of every lake file (ADR 008): a *run* is the rows of one
  domain inside one lake file, ``(domain_id, dataset_id, file_id, rows)``. Runs are grouped
  into blocks by ``int(hh, 16) % blocks`` (every row of a lake file then sits in one block) and
  sorted by ``(domain_id, dataset_id, file_id)``; since a file is sorted by domain, a run's
  first row is the sum of the rows of the same file's earlier runs, so row offsets are never
  stored. Layout: ``[PST4][ver=4:u32][blocks:u32][0:u32]``, ``blocks + 1`` u64 block offsets,
  then the blocks. A block is ``[n_runs:u32][n_multi:u32][n_files:u32][crc32:u32]`` + zstd
  of u32 columns: the block's file table (file_id, dataset_id; sorted by dataset, file),
  then per run the domain_id delta, the file's table index as a delta from the domain's
  previous run (absolute for a domain's first run: a domain's runs go up the table), rows;
  then the exact distinct URL count of every (domain, dataset) with more than one run
  (``n_multi`` x {first run index, count}). A run's dataset is its file's (ADR 010). Each
  column is byte-transposed (its 4 byte planes one after another) so zstd sees the long
  runs of zero high bytes.
* ``files.tsv.zst`` — the files registry (see :class:`FileEntry`).

All integers little-endian.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard
from pyroaring import BitMap

from crawlstream.errors import ChecksumMismatch

__all__ = [
    "BLOCK_HEADER",
    "CHECKSUM_CHUNK",
    "DTDR_ENTRIES",
    "DTDR_ENTRY",
    "DTDR_HEADER",
    "PST_HEADER",
    "SMALL_SET",
    "SMALL_SET_HEADER",
    "FileEntry",
    "Runs",
    "Segment",
    "checksum_entry",
    "decode_block",
    "decode_files",
    "domain_offsets",
    "dtdr_codes",
    "dtdr_entry",
    "dtdr_header",
    "encode_block",
    "encode_dtdr",
    "encode_dtdr_pairs",
    "encode_files",
    "encode_postings",
    "file_checksums",
    "inline_segments",
    "is_current_postings",
    "postings_block",
    "postings_head_size",
    "run_row_starts",
    "small_sets_section",
    "starts_of",
]

DTDR_MAGIC = b"DTDR"
PST_MAGIC = b"PST4"
FORMAT_VERSION = 1
PST_VERSION = 4

DTDR_HEADER = struct.Struct("<4sIQQ")  # magic, ver, N_domains, index_offset
DTDR_ENTRY = struct.Struct("<QI")  # bitmap_start, bitmap_len
DTDR_ENTRIES = np.dtype([("start", "<u8"), ("len", "<u4")])  # DTDR_ENTRY as a numpy record
PST_HEADER = struct.Struct("<4sIII")  # magic, ver, blocks, reserved
BLOCK_HEADER = struct.Struct("<IIII")  # n_runs, n_multi, n_files, crc32 of the compressed body


@dataclass(frozen=True, slots=True)
class Runs:
    """Parallel arrays, one entry per run, sorted by (domain_id, dataset_id, file_id).

    ``multi`` maps the index of the first run of each (domain, dataset) with several runs
    (rows in several files until compaction) to its exact distinct URL count.
    """

    domain_id: Any  # numpy int64 arrays
    dataset_id: Any
    file_id: Any
    rows: Any
    multi_first: Any
    multi_count: Any

    def __len__(self) -> int:
        return len(self.domain_id)


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

    def rg_starts(self) -> list[int]:
        """The first row of every row group, then the file's row count (for ``inline_segments``)."""
        return list(itertools.accumulate(self.rg_rows, initial=0))


def postings_block_of(hh: str, blocks: int) -> int:
    """The postings block of a domain prefix ``hh``: the builder writes and readers look up there."""
    return int(hh, 16) % blocks


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


def encode_dtdr(bitmaps: Sequence[bytes]) -> bytes:
    """The seed's DTDR file from each domain's serialized Roaring bitmap (index = domain_id).

    Identical bitmaps are stored once and shared by the index entries of their domains.
    """
    parts = [b""]  # header placeholder
    offset = DTDR_HEADER.size
    index = bytearray()
    stored: dict[bytes, int] = {}
    for bm in bitmaps:
        start = stored.get(bm)
        if start is None:
            start = stored[bm] = offset
            parts.append(bm)
            offset += len(bm)
        index += DTDR_ENTRY.pack(start, len(bm))
    parts[0] = DTDR_HEADER.pack(DTDR_MAGIC, FORMAT_VERSION, len(bitmaps), offset)
    parts.append(bytes(index))
    return b"".join(parts)


_ROARING_RUN_COOKIE = 12347  # CRoaring portable format; high 16 bits = containers - 1
SMALL_SET_HEADER = 9  # cookie (4), run bitset (1), key (2), cardinality - 1 (2)
SMALL_SET = 8  # the most datasets a domain's set stores in the compact form


def dtdr_codes(pair_domain: np.ndarray, pair_dataset: np.ndarray, n_domains: int, *, full: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """One block's DTDR sets, as ``encode_dtdr_pairs`` (or, ``full``, ``encode_dtdr``) stores them:
    the one small/big split of both the in-memory encoder and the bounded build. Per domain a code
    (>= 0: its small set's row in the block's distinct small sets; < 0: ``-1 - i`` for the block's
    i-th distinct roaring bitmap), the distinct small sets' keys (two u64: the zero-padded u16
    members) and cardinalities, and the distinct bitmaps."""
    card = np.bincount(pair_domain, minlength=n_domains).astype(np.int64)
    first = starts_of(card)
    if full:
        big_mask = np.ones(n_domains, bool)
    else:
        big_mask = (card > SMALL_SET) | (np.maximum.reduceat(pair_dataset, first) >= 1 << 16
                                          if n_domains else np.zeros(0, bool))
    codes = np.zeros(n_domains, np.int64)
    rows = np.zeros((n_domains, SMALL_SET), dtype="<u2")
    small = ~big_mask
    on_small = small[pair_domain]
    pd = pair_domain[on_small]
    rows[pd, np.flatnonzero(on_small) - first[pd]] = pair_dataset[on_small]
    sd = np.flatnonzero(small)
    keys, inverse = np.unique(rows[sd].view("<u8"), axis=0, return_inverse=True)
    codes[sd] = inverse.reshape(-1)
    small_card = card[sd[np.unique(inverse.reshape(-1), return_index=True)[1]]] if len(sd) else card[:0]
    big: list[bytes] = []
    seen: dict[bytes, int] = {}
    for d in np.flatnonzero(big_mask).tolist():
        data = BitMap(pair_dataset[first[d] : first[d] + card[d]].tolist()).serialize()
        i = seen.get(data)
        if i is None:
            i = seen[data] = len(big)
            big.append(data)
        codes[d] = -1 - i
    return codes, keys.reshape(-1, 2).astype(np.uint64), small_card, big


def encode_dtdr_pairs(pair_domain: Any, pair_dataset: Any, n_domains: int) -> bytes:
    """The DTDR file from (domain_id, dataset_id) pairs sorted by (domain, dataset), unique.

    A domain in at most ``SMALL_SET`` datasets (the vast majority) gets one Roaring array
    container in the portable serialization with the run-container cookie (no container is a
    run, and under 4 containers the format has no offset header): 9 bytes + 2 per member,
    where ``BitMap.serialize`` writes 16 + 2 per member (ADR 008). Larger sets are serialized
    by pyroaring (run containers for ranges of datasets). Any portable Roaring reader
    (CRoaring, roaring-rs, Java) deserializes both. Every distinct set is stored once: the
    index entries of domains with the same datasets point at one bitmap (ADR 010).
    """
    pair_domain = np.asarray(pair_domain, dtype=np.int64)
    pair_dataset = np.asarray(pair_dataset, dtype=np.int64)
    if n_domains and np.bincount(pair_domain, minlength=n_domains).min() == 0:
        raise ValueError("every domain of the dictionary needs at least one dataset")
    codes, keys, small_card, big = dtdr_codes(pair_domain, pair_dataset, n_domains, full=False)
    section, small_sizes = small_sets_section(np.ascontiguousarray(keys).view("<u2").reshape(-1, SMALL_SET), small_card)
    big_sizes = np.array([len(data) for data in big], np.int64)
    small_starts = DTDR_HEADER.size + starts_of(small_sizes)
    big_starts = DTDR_HEADER.size + int(small_sizes.sum()) + starts_of(big_sizes)
    entries = np.zeros(n_domains, DTDR_ENTRIES)
    on_small = codes >= 0
    entries["start"][on_small], entries["len"][on_small] = small_starts[codes[on_small]], small_sizes[codes[on_small]]
    which = -1 - codes[~on_small]
    entries["start"][~on_small], entries["len"][~on_small] = big_starts[which], big_sizes[which]
    index_offset = DTDR_HEADER.size + int(small_sizes.sum()) + int(big_sizes.sum())
    return b"".join([DTDR_HEADER.pack(DTDR_MAGIC, FORMAT_VERSION, n_domains, index_offset),
                     section, *big, entries.tobytes()])


def starts_of(sizes: np.ndarray) -> np.ndarray:
    """Where each of ``sizes`` starts when they are laid one after another from 0 (int64)."""
    return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if len(sizes) else np.zeros(0, np.int64)


def small_sets_section(members: np.ndarray, cards: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The DTDR's small sets, one after another, and each one's size: a set is one Roaring array
    container in the portable format (``encode_dtdr_pairs``) from its row of ``SMALL_SET`` u16
    ``members`` (zero-padded) and its cardinality."""
    sizes = SMALL_SET_HEADER + 2 * cards
    rep = np.zeros((len(members), SMALL_SET_HEADER + 2 * SMALL_SET), dtype=np.uint8)
    rep[:, 0:4] = np.frombuffer(struct.pack("<I", _ROARING_RUN_COOKIE), np.uint8)  # 1 container
    # rep[:, 4] = 0: the run bitset (container 0 is not a run); [:, 5:7] = 0: key 0
    rep[:, 7:9] = (cards - 1).astype("<u2").view(np.uint8).reshape(-1, 2)  # cardinality - 1
    rep[:, 9:] = np.ascontiguousarray(members, dtype="<u2").view(np.uint8).reshape(-1, 2 * SMALL_SET)
    return rep[np.arange(rep.shape[1]) < sizes[:, None]].tobytes(), sizes  # row-major: set by set


def dtdr_header(buf: bytes | memoryview) -> tuple[int, int]:
    """(N_domains, index_offset) of a DTDR file starting with ``buf``."""
    magic, ver, n, index_offset = DTDR_HEADER.unpack_from(buf, 0)
    if magic != DTDR_MAGIC or ver != FORMAT_VERSION:
        raise ChecksumMismatch(f"expected a DTDR v1 file, found magic {magic!r} version {ver}")
    return n, index_offset


def dtdr_entry(buf: bytes | memoryview, domain_id: int) -> tuple[int, int]:
    n, index_offset = dtdr_header(buf)
    if not 0 <= domain_id < n:
        raise IndexError(domain_id)
    start, length = DTDR_ENTRY.unpack_from(buf, index_offset + DTDR_ENTRY.size * domain_id)
    return start, length


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


def _shuffle(values: Any) -> bytes:
    """u32 column -> its 4 byte planes, lowest first (zstd then sees runs of zero bytes)."""
    return np.ascontiguousarray(np.asarray(values, dtype="<u4").view(np.uint8).reshape(-1, 4).T).tobytes()


def _unshuffle(data: bytes, n: int) -> Any:
    return np.frombuffer(data, np.uint8).reshape(4, n).T.copy().view("<u4").ravel().astype(np.int64)


def encode_block(runs: Runs, *, level: int) -> bytes:
    """One postings block (see the module docstring); ``runs`` sorted, domain ids ascending."""
    n, m = len(runs), len(runs.multi_first)
    did = np.asarray(runs.domain_id, dtype=np.int64)
    ds, fid = np.asarray(runs.dataset_id, np.int64), np.asarray(runs.file_id, np.int64)
    order = np.lexsort((fid, ds))
    new_file = np.ones(n, bool)
    new_file[1:] = (np.diff(ds[order]) != 0) | (np.diff(fid[order]) != 0)
    local = np.empty(n, np.int64)
    local[order] = np.cumsum(new_file) - 1
    table_file, table_dataset = fid[order[new_file]], ds[order[new_file]]
    step = np.diff(local, prepend=0)  # u32 wrap-around keeps any order exact
    first = np.diff(did, prepend=-1) != 0
    step[first] = local[first]
    cols = [table_file, table_dataset, np.diff(did, prepend=0), step, runs.rows, runs.multi_first, runs.multi_count]
    body = zstandard.ZstdCompressor(level=level).compress(b"".join(_shuffle(c) for c in cols))
    return BLOCK_HEADER.pack(n, m, len(table_file), zlib.crc32(body)) + body


def decode_block(data: bytes | memoryview) -> Runs:
    """Inverse of :func:`encode_block`; ChecksumMismatch if the block is damaged."""
    if len(data) < BLOCK_HEADER.size:
        raise ChecksumMismatch(f"postings block of {len(data)} bytes is too short; rebuild the index version")
    n, m, k, crc = BLOCK_HEADER.unpack_from(data, 0)
    body = bytes(data[BLOCK_HEADER.size :])
    if zlib.crc32(body) != crc:
        raise ChecksumMismatch(
            "postings block CRC mismatch; the index version is corrupt: rebuild with `crawlstream index build --full`"
        )
    size = 4 * (2 * k + 3 * n + 2 * m)
    raw = zstandard.ZstdDecompressor().decompress(body, max_output_size=size)
    if len(raw) != size:
        raise ChecksumMismatch(f"postings block declares {n} runs but holds {len(raw)} bytes")
    cols = []
    pos = 0
    for count in (k, k, n, n, n, m, m):
        cols.append(_unshuffle(raw[pos : pos + 4 * count], count))
        pos += 4 * count
    table_file, table_dataset, deltas, step, rows, multi_first, multi_count = cols
    did = np.cumsum(deltas)
    first = np.flatnonzero(np.diff(did, prepend=-1) != 0)
    acc = np.cumsum(step)
    local = (acc - np.repeat(acc[first] - step[first], np.diff(np.append(first, n)))) & 0xFFFFFFFF
    return Runs(did, table_dataset[local], table_file[local], rows, multi_first, multi_count)


def encode_postings(blocks: Sequence[bytes]) -> bytes:
    offsets = [PST_HEADER.size + 8 * (len(blocks) + 1)]
    for b in blocks:
        offsets.append(offsets[-1] + len(b))
    return b"".join([PST_HEADER.pack(PST_MAGIC, PST_VERSION, len(blocks), 0),
                     struct.pack(f"<{len(offsets)}Q", *offsets), *blocks])


def postings_head_size(blocks: int) -> int:
    """Bytes of a ``postings.bin``'s header and block offsets (what a reader fetches at open)."""
    return PST_HEADER.size + 8 * (blocks + 1)


# Files above this size are verified chunk by chunk (a reader on S3 fetches ranges of them).
CHECKSUM_CHUNK = 256 << 10


def file_checksums(out: dict[str, bytes], *, blocks: int) -> dict[str, dict[str, Any]]:
    """Per file of a version (by file name): size and CRC32, the CRC32 of each ``CHECKSUM_CHUNK``
    of the domain-to-datasets file (a reader may fetch ranges of it), and of the postings' head
    (the blocks carry their own). Recorded in the manifest: a reader on S3 verifies every read."""
    return {name: checksum_entry(name, (data[i : i + CHECKSUM_CHUNK] for i in range(0, len(data), CHECKSUM_CHUNK)),
                                 blocks=blocks)
            for name, data in out.items()}


def checksum_entry(name: str, chunks: Iterable[bytes], *, blocks: int) -> dict[str, Any]:
    """:func:`file_checksums`' entry of one file given as consecutive ``CHECKSUM_CHUNK`` pieces
    (a file streamed from disk gets the same entry as its bytes)."""
    crc, size, crcs, head = 0, 0, [], b""
    for piece in chunks:
        if size == 0:
            head = piece[: postings_head_size(blocks)]
        crc = zlib.crc32(piece, crc)
        size += len(piece)
        crcs.append(zlib.crc32(piece))
    entry: dict[str, Any] = {"size": size, "crc32": crc}
    if name.endswith(".roar"):
        entry["chunk"] = CHECKSUM_CHUNK
        entry["chunks"] = crcs
    if name.startswith("postings"):
        entry["head_crc32"] = zlib.crc32(head)
    return entry


def is_current_postings(head: bytes) -> bool:
    """Whether a ``postings.bin`` starting with ``head`` (>= 8 bytes) has this code's format."""
    return head[:4] == PST_MAGIC and struct.unpack_from("<I", head, 4)[0] == PST_VERSION


def postings_block(buf: bytes | memoryview | Any, block: int) -> bytes:
    """The bytes of block ``block`` of a ``postings.bin`` buffer (mmap, bytes)."""
    magic, ver, n, _ = PST_HEADER.unpack_from(buf, 0)
    if not is_current_postings(bytes(buf[:8])):
        raise ChecksumMismatch(f"expected a PST4 postings file, found magic {magic!r} version {ver}; "
                               "rebuild with `crawlstream index build --full`")
    if not 0 <= block < n:
        raise IndexError(block)
    start, end = struct.unpack_from("<QQ", buf, PST_HEADER.size + 8 * block)
    return bytes(buf[start:end])


def domain_offsets(blob: bytes) -> Any:
    """Start offset of every line of the ``domains.zst`` blob, plus ``len(blob) + 1`` at the end."""
    if not blob:
        return np.zeros(1, dtype=np.int64)
    ends = np.flatnonzero(np.frombuffer(blob, np.uint8) == 10).astype(np.int64)
    return np.concatenate(([0], ends + 1, [len(blob) + 1]))


def run_row_starts(domain_id: Any, file_id: Any, rows: Any) -> Any:
    """First row in its file of every run: a file is sorted by domain, so a run starts after
    the file's runs of smaller domain ids (every run of the file must be present)."""
    order = np.lexsort((domain_id, file_id))
    r = rows[order]
    excl = np.cumsum(r) - r
    f = file_id[order]
    first = np.flatnonzero(np.diff(f, prepend=-1) != 0)
    sizes = np.diff(np.append(first, len(f)))
    excl -= np.repeat(excl[first], sizes)
    out = np.empty_like(excl)
    out[order] = excl
    return out
