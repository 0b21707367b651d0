"""One open index version: its domain list, domain-to-datasets file and postings blocks.

The bytes come from a ``LocalFiles`` (memory maps) or ``RemoteFiles`` (S3) source
(``_storage``); decoded postings blocks live in the reader's block cache, bounded by bytes
(``index.postings_cache_mb``), keyed by (version, block).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard
from pyroaring import BitMap

from crawlstream.errors import ChecksumMismatch
from crawlstream.index._formats import (
    DTDR_ENTRY,
    DTDR_HEADER,
    FileEntry,
    decode_block,
    decode_files,
    domain_offsets,
    dtdr_header,
    postings_block_of,
    run_row_starts,
)
from crawlstream.index._manifest import VersionInfo
from crawlstream.index._storage import LocalFiles, Lru, NotCached, RemoteFiles
from crawlstream.urls import domain_prefix

__all__ = ["Version"]

class _Domains:
    """The sorted domain list as a sequence of ``bytes`` over the blob (for ``bisect``)."""

    def __init__(self, blob: bytes, offsets: memoryview) -> None:
        self.blob = blob
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        return self.blob[self.offsets[i] : self.offsets[i + 1] - 1]


@dataclass(slots=True)
class _Block:
    """A decoded postings block: runs sorted by (domain_id, dataset_id, file_id), as compact
    numpy columns (a request converts only its domain's slice to Python ints). Row offsets
    are derived per run when a page needs them: ``/v1/domain`` never does."""

    domain_id: Any  # int32
    dataset_id: Any  # uint32 (dataset ids are UInt32)
    file_id: Any
    rows: Any
    multi: dict[int, int]  # first run of a fragmented pair -> its exact count

    def span(self, domain_id: int) -> tuple[int, int]:
        """Runs ``[lo, hi)`` of one domain. The key has the column's dtype: with a Python int
        numpy would cast the whole column first (~15 µs per search on a 40k-run block)."""
        key = np.int32(domain_id)
        col = self.domain_id
        return int(col.searchsorted(key, "left")), int(col.searchsorted(key, "right"))

    def pair_span(self, lo: int, hi: int, dataset_id: int) -> tuple[int, int]:
        """Runs ``[a, b)`` of one dataset inside a domain's runs ``[lo, hi)`` (sorted by dataset)."""
        key = np.uint32(dataset_id)
        col = self.dataset_id[lo:hi]
        return lo + int(col.searchsorted(key, "left")), lo + int(col.searchsorted(key, "right"))

    def row_start(self, i: int) -> int:
        """First row of run ``i`` in its file, from that file's runs only (a mask over the block
        and a tiny sort: ~30 µs, where deriving every run of the block costs ~5 ms on a cold page)."""
        same = np.flatnonzero(self.file_id == self.file_id[i])
        starts = run_row_starts(self.domain_id[same], self.file_id[same], self.rows[same])
        return int(starts[int(same.searchsorted(i))])


def _decode_block(data: bytes) -> _Block:
    runs = decode_block(data)
    return _Block(runs.domain_id.astype(np.int32), runs.dataset_id.astype(np.uint32), runs.file_id.astype(np.int32),
                  runs.rows.astype(np.int32),
                  dict(zip(runs.multi_first.tolist(), runs.multi_count.tolist(), strict=True)))


def block_weight(blk: Any) -> int:
    """Bytes a cached entry holds (decoded blocks and raw ranges share the cache)."""
    if isinstance(blk, _Block):
        return int(blk.domain_id.nbytes * 4 + 64 * len(blk.multi)) + 256
    return len(blk) + 64


class Version:
    """The open files of one version; alive while the reader or a pin references it."""

    def __init__(self, files: LocalFiles | RemoteFiles, info: VersionInfo, cache: Lru[Any, Any]) -> None:
        self.info = info
        self.version = info.version
        self.refs = 0
        self.current = True
        self.source = files
        self.remote = files.remote
        self._cache = cache
        try:
            if "postings" not in info.files:
                raise ChecksumMismatch(
                    f"index version {info.version} has an older postings format; "
                    "rebuild with `crawlstream index build --full`"
                )
            self.blob = zstandard.ZstdDecompressor().decompress(files.read_small("domains"))
            files_raw = zstandard.ZstdDecompressor().decompress(files.read_small("files_tsv"))
            head = files.d2d_read(0, DTDR_HEADER.size, False)
            self._d2d_n, self._d2d_index = dtdr_header(head) if head else (0, 0)
        except BaseException:
            files.close()
            raise
        # Line offsets of the domain list, computed once per open (~3 ms per 500k domains;
        # ADR 003): a lookup is a binary search over the blob, no hash table on disk.
        self._offsets = memoryview(domain_offsets(self.blob).astype("<q").tobytes()).cast("q")
        self._domains = _Domains(self.blob, self._offsets)
        self.n_domains = len(self._domains)
        self.files: dict[int, FileEntry] = {f.file_id: f for f in decode_files(files_raw)}
        self._rg_starts: dict[int, list[int]] = {}
        self.dataset_ids = sorted({f.dataset_id for f in self.files.values()})
        self.shards = info.shards

    def close(self) -> None:
        self.source.close()

    def domain_at(self, domain_id: int) -> str:
        return self._domains[domain_id].decode()

    def domain_id(self, domain: str) -> int | None:
        try:
            key = domain.encode()
        except UnicodeEncodeError:
            return None  # a lone surrogate: every stored domain is valid UTF-8, none can match
        i = bisect.bisect_left(self._domains, key)
        return i if i < self.n_domains and self._domains[i] == key else None

    def datasets_bitmap(self, domain_id: int, cached_only: bool = False) -> BitMap:
        if not 0 <= domain_id < self._d2d_n:
            raise IndexError(domain_id)
        read = self.source.d2d_read
        start, length = DTDR_ENTRY.unpack(read(self._d2d_index + DTDR_ENTRY.size * domain_id, DTDR_ENTRY.size,
                                               cached_only))
        return BitMap.deserialize(read(start, length, cached_only))

    def _block(self, domain: str, cached_only: bool) -> _Block:
        b = postings_block_of(domain_prefix(domain), self.shards)
        key = (self.version, b)
        blk = self._cache.get(key)
        if blk is None:
            if cached_only and self.remote:
                raise NotCached(f"postings block {b}")
            blk = self._cache.get_or_load(key, lambda: self._load_block(b))
        return blk

    def _load_block(self, b: int) -> _Block:
        """Decode block ``b``; on S3 a block failing its CRC is fetched once more (a torn read)."""
        try:
            return _decode_block(self.source.block(b))
        except ChecksumMismatch:
            if not self.remote:
                raise
        return _decode_block(self.source.block(b))

    def counts(self, domain: str, domain_id: int, cached_only: bool = False) -> dict[int, int]:
        """dataset_id -> exact URL count of one domain (its runs in the postings block)."""
        blk = self._block(domain, cached_only)
        lo, hi = blk.span(domain_id)
        datasets = blk.dataset_id[lo:hi].tolist()
        rows = blk.rows[lo:hi].tolist()
        out: dict[int, int] = {}
        for k, ds in enumerate(datasets):
            if ds not in out:  # the first run of a pair; a fragmented pair stores its exact count
                out[ds] = rows[k] if k + 1 == len(datasets) or datasets[k + 1] != ds else blk.multi[lo + k]
        return out

    def pair(
        self, domain: str, domain_id: int, dataset_id: int, cached_only: bool = False
    ) -> tuple[int, list[tuple[int, int, int]]] | None:
        """(exact URL count, runs as (file_id, row_start, rows)) of one (domain, dataset), or None."""
        if not 0 <= dataset_id <= 0xFFFFFFFF:
            return None
        blk = self._block(domain, cached_only)
        a, b = blk.pair_span(*blk.span(domain_id), dataset_id)
        if a == b:
            return None
        rows = blk.rows[a:b].tolist()
        files = blk.file_id[a:b].tolist()
        runs = [(files[k], blk.row_start(a + k), rows[k]) for k in range(b - a)]
        return (blk.multi[a] if b - a > 1 else rows[0]), runs

    def rg_starts(self, file_id: int) -> list[int]:
        starts = self._rg_starts.get(file_id)
        if starts is None:
            starts = self.files[file_id].rg_starts()
            self._rg_starts[file_id] = starts
        return starts

