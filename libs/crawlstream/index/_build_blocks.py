"""Steps 3-4 of a build one lake prefix at a time (ADR 031).

Every run of a domain sits in the lake files of one prefix ``hh`` (a function of the domain;
postings block ``int(hh, 16) % shards`` is the union of its prefixes' runs), so a prefix's runs
can be scanned, merged and their fragmented pairs counted without any other: a *unit*'s domains
are sorted by name with *local* ids (ranks inside the unit), which keep the global order since
every global id is a rank in the union of the units' disjoint name lists. A unit's result is
spilled to disk (its names, runs, DTDR set codes) so the build holds only the units in flight,
1/256 of the version's runs each whatever the block count; ``_build_merge`` then assigns the
global ids and writes the version.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from crawlstream.index._formats import (
    PST_HEADER,
    FileEntry,
    Runs,
    Segment,
    decode_block,
    dtdr_codes,
    inline_segments,
    run_row_starts,
)
from crawlstream.urls import domain_prefix_number

_UNITS = 256  # lake prefixes: hh is two hex digits

__all__ = ["BlockResult", "PrevVersion", "RunTable", "concat_runs", "count_fragmented", "merge_runs",
           "spill_block", "url_count"]


@dataclass
class RunTable:
    """Runs as parallel arrays keyed by domain *string* (ids change between versions)."""

    domains: pa.Array  # string per run
    dataset_id: np.ndarray
    file_id: np.ndarray
    rows: np.ndarray
    is_new: np.ndarray  # bool: the run comes from a file scanned by this build


def concat_runs(parts: list[RunTable]) -> RunTable:
    if not parts:
        e = np.zeros(0, np.int64)
        return RunTable(pa.array([], pa.string()), e, e, e, e.astype(bool))
    return RunTable(
        pa.concat_arrays([p.domains for p in parts]),
        np.concatenate([p.dataset_id for p in parts]),
        np.concatenate([p.file_id for p in parts]),
        np.concatenate([p.rows for p in parts]),
        np.concatenate([p.is_new for p in parts]),
    )


def merge_runs(table: RunTable) -> tuple[pa.Array, Runs, np.ndarray, np.ndarray]:
    """Step 4's merge of one unit (lake prefix): its domains sorted by name (their local ids), the runs
    sorted by (domain, dataset, file) with a domain split by a row-group boundary of one file
    joined into one run (no fragmented pairs counted yet), the first run of each (domain,
    dataset) pair, and whether each run comes from a file this build scanned."""
    # one hash pass over the runs' domain strings, then a sort of the distinct ones
    encoded = pc.dictionary_encode(table.domains)
    by_name = pc.sort_indices(encoded.dictionary).to_numpy(zero_copy_only=False)
    domains = encoded.dictionary.take(pa.array(by_name))
    rank = np.empty(len(by_name), np.int64)
    rank[by_name] = np.arange(len(by_name))
    did = rank[encoded.indices.to_numpy(zero_copy_only=False)]
    order = np.lexsort((table.file_id, table.dataset_id, did))
    did, ds, fid, rows, is_new = (did[order], table.dataset_id[order], table.file_id[order],
                                  table.rows[order], table.is_new[order])
    starts = np.flatnonzero((np.diff(did, prepend=-1) != 0) | (np.diff(ds, prepend=-1) != 0)
                            | (np.diff(fid, prepend=-1) != 0))
    rows = np.add.reduceat(rows, starts) if len(starts) else rows
    is_new = np.maximum.reduceat(is_new, starts) if len(starts) else is_new
    did, ds, fid = did[starts], ds[starts], fid[starts]
    pair_first = np.flatnonzero((np.diff(did, prepend=-1) != 0) | (np.diff(ds, prepend=-1) != 0))
    none = np.zeros(0, np.int64)
    return domains, Runs(did, ds, fid, rows, none, none), pair_first, is_new


def count_fragmented(
    domains: pa.Array,
    runs: Runs,
    pair_first: np.ndarray,
    is_new: np.ndarray,
    files_by_id: Mapping[int, FileEntry],
    prev_multi: dict[tuple[str, int], int],
    touched_keys: set[tuple[str, int]],
    distinct_urls: Callable[[list[Segment]], int],
) -> Runs:
    """``runs`` with the exact count of each fragmented pair (rows in more than one file):
    carried forward from the previous version, or recounted from its URLs (cross-file
    dedupe) when its runs changed."""
    did, ds, fid, rows = runs.domain_id, runs.dataset_id, runs.file_id, runs.rows
    pair_runs = np.diff(np.append(pair_first, len(did)))
    multi = pair_first[pair_runs > 1]
    multi_count = np.zeros(len(multi), np.int64)
    if len(multi):
        row_start = run_row_starts(did, fid, rows)
        pair_new = np.maximum.reduceat(is_new, pair_first)[pair_runs > 1]
        for k, (first, n_runs, fresh) in enumerate(zip(multi.tolist(), pair_runs[pair_runs > 1].tolist(),
                                                       pair_new.tolist(), strict=True)):
            key = (domains[int(did[first])].as_py(), int(ds[first]))
            if not fresh and key not in touched_keys and key in prev_multi:
                multi_count[k] = prev_multi[key]
                continue
            segs: list[Segment] = []
            for r in range(first, first + n_runs):
                f = files_by_id[int(fid[r])]
                segs += inline_segments(f.file_id, int(row_start[r]), int(rows[r]), f.rg_starts())
            multi_count[k] = distinct_urls(segs)
    return Runs(did, ds, fid, rows, multi, multi_count)


def url_count(runs: Runs, pair_first: np.ndarray) -> int:
    """Exact URLs: the rows of single-file pairs plus the fragmented pairs' counts."""
    single = np.ones(len(pair_first), bool)
    single[np.searchsorted(pair_first, runs.multi_first)] = False
    pair_rows = np.add.reduceat(runs.rows, pair_first) if len(pair_first) else np.zeros(0, np.int64)
    return int(pair_rows[single].sum()) + int(runs.multi_count.sum())


@dataclass
class BlockResult:
    """What the merge needs of one spilled unit, the runs of one lake prefix ``hh`` (everything else
    is on disk under ``dir``). A postings block is the union of its prefixes' runs."""

    unit: int  # int(hh, 16)
    dir: Path
    domains: int
    name_bytes: int  # UTF-8 bytes of its names (domains.zst's size is known before it is written)
    pairs: int
    fragmented: int
    urls: int
    max_card: int  # most datasets of one of its domains
    max_dataset: int
    small_keys: np.ndarray  # (m, 2) u64: its distinct small dataset sets (see _formats.dtdr_codes)
    small_card: np.ndarray
    big: int  # its distinct serialized roaring bitmaps (``big.bin``, their offsets in ``big.idx``)


def spill_block(unit: int, d: Path, domains: pa.Array, runs: Runs, pair_first: np.ndarray, *,
                chunk: int, full_dtdr: bool) -> BlockResult:
    """Write a merged unit under ``d``: ``names.arrow`` (name, DTDR set code; batches of ``chunk``
    rows, read back batch by batch by the merge), ``runs.bin`` (the runs, local ids) and the
    distinct roaring bitmaps (``big.bin``, ``big.idx``)."""
    pair_domain, pair_dataset = runs.domain_id[pair_first], runs.dataset_id[pair_first]
    card = np.bincount(pair_domain, minlength=len(domains)) if len(domains) else np.zeros(0, np.int64)
    codes, small_keys, small_card, big = dtdr_codes(pair_domain, pair_dataset, len(domains), full=full_dtdr)
    d.mkdir(parents=True, exist_ok=True)
    table = pa.table({"name": domains, "code": pa.array(codes, pa.int64())})
    with pa.OSFile(str(d / "names.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=chunk):
            w.write_batch(batch)
    n, m = len(runs), len(runs.multi_first)
    cols = np.empty(4 * n + 2 * m, np.int64)
    for i, c in enumerate((runs.domain_id, runs.dataset_id, runs.file_id, runs.rows)):
        cols[i * n : (i + 1) * n] = c
    cols[4 * n : 4 * n + m] = runs.multi_first
    cols[4 * n + m :] = runs.multi_count
    with open(d / "big.bin", "wb") as fh:
        fh.write(b"".join(big))
    np.cumsum([0, *(len(b) for b in big)], dtype=np.int64).tofile(d / "big.idx")
    with open(d / "runs.bin", "wb") as fh:
        fh.write(struct.pack("<QQ", n, m))
        fh.write(cols.tobytes())
    return BlockResult(unit, d, len(domains), int(pc.sum(pc.binary_length(domains)).as_py() or 0),
                       len(pair_first), m, url_count(runs, pair_first), int(card.max(initial=0)),
                       int(pair_dataset.max(initial=0)), small_keys, small_card, len(big))


def load_runs(d: Path) -> Runs:
    """The runs ``spill_block`` wrote (local domain ids)."""
    with open(d / "runs.bin", "rb") as fh:
        n, m = struct.unpack("<QQ", fh.read(16))
        cols = np.frombuffer(fh.read(), np.int64)
    did, ds, fid, rows = (cols[i * n : (i + 1) * n] for i in range(4))
    return Runs(did, ds, fid, rows, cols[4 * n : 4 * n + m], cols[4 * n + m :])


def unit_of_names(names: Iterable[str]) -> np.ndarray:
    """The unit of each domain: its lake prefix ``hh`` as a number."""
    return np.fromiter(map(domain_prefix_number, names), np.int64)


class PrevVersion:
    """The previous version's runs, one unit (lake prefix) at a time: its ``domains.zst`` is streamed
    once and its names distributed to per-unit files, so no step holds the whole version."""

    def __init__(self, read_range: Callable[[int, int], bytes], domains: Iterable[bytes], shards: int,
                 files: list[FileEntry], spill: Path, *, chunk_bytes: int) -> None:
        self.read_range = read_range
        self.shards = shards
        self.files = files
        self.dir = spill / "prev"
        self.dir.mkdir(parents=True, exist_ok=True)
        head = read_range(0, PST_HEADER.size + 8 * (shards + 1))
        self.offsets = np.frombuffer(head, "<u8", offset=PST_HEADER.size).astype(np.int64)
        self._distribute(domains, chunk_bytes)

    def _distribute(self, chunks: Iterable[bytes], chunk_bytes: int) -> None:
        """Names (and their ids) of the previous dictionary into ``prev/<unit>.names|.ids``."""
        next_id, tail = 0, b""
        pending: list[bytes] = []
        size = 0

        def flush(data: bytes) -> None:
            nonlocal next_id
            names = data.decode().split("\n")
            unit = unit_of_names(names)
            ids = np.arange(next_id, next_id + len(names), dtype=np.int64)
            next_id += len(names)
            order = np.argsort(unit, kind="stable")
            bounds = np.searchsorted(unit[order], np.arange(_UNITS + 1))
            arr = np.array(names, dtype=object)
            for b in np.flatnonzero(np.diff(bounds)).tolist():
                sel = order[bounds[b] : bounds[b + 1]]
                with open(self.dir / f"{b}.names", "ab") as fh:
                    fh.write(("\n".join(arr[sel].tolist()) + "\n").encode())
                with open(self.dir / f"{b}.ids", "ab") as fh:
                    fh.write(ids[sel].tobytes())

        for piece in chunks:
            pending.append(piece)
            size += len(piece)
            if size >= chunk_bytes:
                data = tail + b"".join(pending)
                cut = data.rfind(b"\n")
                if cut >= 0:
                    flush(data[:cut])
                    tail = data[cut + 1 :]
                else:
                    tail = data
                pending, size = [], 0
        data = tail + b"".join(pending)
        if data:
            flush(data)

    def carried(self, unit: int, dropped_ids: np.ndarray
                ) -> tuple[RunTable, dict[tuple[str, int], int], set[tuple[str, int]]]:
        """The previous runs of lake prefix ``unit`` but those of files a compaction replaced, its
        fragmented pairs' counts, and the pairs that lost rows (to be recounted)."""
        mine = np.fromiter((f.file_id for f in self.files if int(f.hh, 16) == unit), np.int64)
        ids_path = self.dir / f"{unit}.ids"
        if not len(mine) or not ids_path.exists():
            return concat_runs([]), {}, set()
        b = unit % self.shards  # the previous block of this prefix (blocks hold whole prefixes)
        runs = decode_block(self.read_range(int(self.offsets[b]), int(self.offsets[b + 1] - self.offsets[b])))
        keep = np.isin(runs.file_id, mine)
        ids = np.fromfile(ids_path, np.int64)
        names = pa.array((self.dir / f"{unit}.names").read_bytes().decode().split("\n")[:-1], pa.string())
        domains = names.take(pa.array(np.searchsorted(ids, runs.domain_id[keep])))
        multi: dict[tuple[str, int], int] = {}
        local = np.cumsum(keep) - 1  # a kept run's index among the kept runs
        for first, count in zip(runs.multi_first.tolist(), runs.multi_count.tolist(), strict=True):
            if keep[first]:
                multi[(domains[int(local[first])].as_py(), int(runs.dataset_id[first]))] = count
        ds, fid, rows = runs.dataset_id[keep], runs.file_id[keep], runs.rows[keep]
        gone = np.isin(fid, dropped_ids)
        touched: set[tuple[str, int]] = set()
        if gone.any():  # pairs that lose rows to a compaction are recounted
            touched.update(zip(domains.filter(pa.array(gone)).to_pylist(), ds[gone].tolist(), strict=True))
        stay = pa.array(~gone)
        return (RunTable(domains.filter(stay), ds[~gone], fid[~gone], rows[~gone], np.zeros(int((~gone).sum()), bool)),
                multi, touched)


def stream_chunks(reader: Any, size: int = 1 << 20) -> Iterable[bytes]:
    """The decompressed bytes of a zstd stream reader, ``size`` at a time."""
    while True:
        piece = reader.read(size)
        if not piece:
            return
        yield piece


def decompressing(fh: Any) -> Any:
    return zstandard.ZstdDecompressor().stream_reader(fh)


def respill_full(r: BlockResult, *, chunk: int) -> BlockResult:
    """Block ``r`` again with every domain's datasets as a roaring bitmap: a version with a dataset
    id >= 2**16 or a domain in more than 4096 datasets stores them all so (``encode_dtdr``)."""
    runs = load_runs(r.dir)
    with pa.OSFile(str(r.dir / "names.arrow")) as src:
        domains = pa.ipc.open_file(src).read_all().column(0).combine_chunks()
    did, ds = runs.domain_id, runs.dataset_id
    pair_first = np.flatnonzero((np.diff(did, prepend=-1) != 0) | (np.diff(ds, prepend=-1) != 0))
    return spill_block(r.unit, r.dir, domains, runs, pair_first, chunk=chunk, full_dtdr=True)
