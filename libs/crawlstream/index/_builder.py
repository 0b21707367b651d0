"""Build, compact and garbage-collect index versions from the lake.

Order of a build (do not reorder: readers depend on step 6 being last):

1. take ``index/.build.lock`` (one builder at a time; local disk: on S3 the flip's
   compare-and-swap is what keeps two builders apart);
2. list the lake; new files = published files the previous version does not know and no
   live file replaces; dropped files = known files a new (compacted) file replaces;
3. scan only the new files' ``domain`` column (dictionary indices + row-group metadata) into
   *runs* (domain, dataset, file, rows), vectorised (numpy), no per-row Python;
4. merge with the previous version's runs (minus runs of files a compaction replaced);
   a (domain, dataset) whose rows now live in more than one file is *fragmented*: its
   exact count is recomputed from its URLs (cross-file dedupe) when its runs changed, else
   carried forward, and readers merge it;
5. write every file of the version into ``index/.tmp-<version>``, fsync, rename to
   ``index/<version>`` (on S3: each file uploaded whole under ``index/<version>/``, a version
   name no other builder can pick);
6. flip ``manifest.json``: locally an atomic rename under the build lock; on S3 a
   compare-and-swap on the manifest's ETag (the one commit point: if another builder flipped
   since step 2 this build fails with ``ManifestConflict``). A crash or a lost swap before 6
   leaves the old version serving; the orphaned directory is removed by ``gc``.

The lake is read through its ``ObjectStore`` (``open_input``: on S3 a HEAD, then ranged GETs
of the footer and the ``domain`` column), in ``scan_threads`` threads so S3 reads overlap.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard
from pyroaring import BitMap

from crawlstream.durable import replacing
from crawlstream.index._formats import (
    FileEntry,
    Runs,
    Segment,
    decode_block,
    decode_files,
    encode_block,
    encode_dtdr,
    encode_dtdr_pairs,
    encode_files,
    encode_postings,
    file_checksums,
    inline_segments,
    is_current_postings,
    postings_block,
    postings_block_of,
    run_row_starts,
)
from crawlstream.index._manifest import (
    PIN_NAME,
    Manifest,
    ManifestConflict,
    VersionInfo,
    publish_manifest,
    read_manifest,
    read_manifest_tagged,
    try_lock_exclusive,
    write_manifest,
)
from crawlstream.lake import (
    LakeFile,
    as_store,
    compact_partition,
    is_compacted,
    list_lake_files,
    read_replaces,
)
from crawlstream.objectstore import ObjectStore
from crawlstream.settings import IndexSettings, LakeSettings

if TYPE_CHECKING:
    from crawlstream.settings import Settings


__all__ = ["BuildResult", "GcResult", "IndexBuilder", "builder_id"]

logger = logging.getLogger(__name__)


def builder_id() -> str:
    """Who writes a version (its manifest entry's ``built_by``): host and process, for operators."""
    return f"{socket.gethostname()}:{os.getpid()}"


# Levels measured on the full benchmark's 502k domains / 2.6M runs (ADR 008): domains.zst
# 0.379 B/URL at 6 (0.31 s) vs 0.384 at 9 (0.78 s) and 0.358 at 19 (15.8 s); postings
# 0.418 B/URL at 3 (0.11 s) vs 0.395 at 9 (0.93 s): the build-rate goal buys level 3.
_ZSTD_LEVEL = 6
_POSTINGS_ZSTD_LEVEL = 3


@dataclass
class _RunTable:
    """Runs as parallel arrays keyed by domain *string* (ids change between versions)."""

    domains: pa.Array  # string per run
    dataset_id: np.ndarray
    file_id: np.ndarray
    rows: np.ndarray
    is_new: np.ndarray  # bool: the run comes from a file scanned by this build


def _concat_runs(parts: list[_RunTable]) -> _RunTable:
    if not parts:
        e = np.zeros(0, np.int64)
        return _RunTable(pa.array([], pa.string()), e, e, e, e.astype(bool))
    return _RunTable(
        pa.concat_arrays([p.domains for p in parts]),
        np.concatenate([p.dataset_id for p in parts]),
        np.concatenate([p.file_id for p in parts]),
        np.concatenate([p.rows for p in parts]),
        np.concatenate([p.is_new for p in parts]),
    )


def _merge_runs(table: _RunTable) -> tuple[pa.Array, Runs, np.ndarray, np.ndarray]:
    """Step 4's merge: the domains sorted by name (their ids), the runs sorted by (domain,
    dataset, file) with a domain split by a row-group boundary of one file joined into one run
    (no fragmented pairs counted yet), the first run of each (domain, dataset) pair, and
    whether each run comes from a file this build scanned."""
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
    # a domain split by a row-group boundary of one file is one run
    starts = np.flatnonzero((np.diff(did, prepend=-1) != 0) | (np.diff(ds, prepend=-1) != 0)
                            | (np.diff(fid, prepend=-1) != 0))
    rows = np.add.reduceat(rows, starts) if len(starts) else rows
    is_new = np.maximum.reduceat(is_new, starts) if len(starts) else is_new
    did, ds, fid = did[starts], ds[starts], fid[starts]
    pair_first = np.flatnonzero((np.diff(did, prepend=-1) != 0) | (np.diff(ds, prepend=-1) != 0))
    none = np.zeros(0, np.int64)
    return domains, Runs(did, ds, fid, rows, none, none), pair_first, is_new


def _domain_to_datasets(runs: Runs, pair_first: np.ndarray, n_domains: int) -> bytes:
    """``domain_to_datasets.roar``: each domain's datasets (roaring bitmaps when ids or
    cardinalities are large, else the compact pairs form)."""
    pair_domain, pair_dataset = runs.domain_id[pair_first], runs.dataset_id[pair_first]
    card = np.bincount(pair_domain, minlength=n_domains) if n_domains else np.zeros(0, np.int64)
    if n_domains and (pair_dataset.max(initial=0) >= 1 << 16 or card.max(initial=0) > 4096):
        members: list[list[int]] = [[] for _ in range(n_domains)]
        for d, ds in zip(pair_domain.tolist(), pair_dataset.tolist(), strict=True):
            members[d].append(ds)
        return encode_dtdr([BitMap(m).serialize() for m in members])
    return encode_dtdr_pairs(pair_domain, pair_dataset, n_domains)


def _postings_blocks(runs: Runs, files: list[FileEntry], shards: int) -> list[bytes]:
    """The postings' blocks: 256 hh values onto ``shards`` blocks, so all runs of a lake file
    land in one block."""
    file_block = {f.file_id: postings_block_of(f.hh, shards) for f in files}
    max_id = max(file_block, default=0)
    block_of = np.zeros(max_id + 1, np.int64)
    for fid, block in file_block.items():
        block_of[fid] = block
    run_block = block_of[runs.file_id] if len(runs) else np.zeros(0, np.int64)
    multi_block = run_block[runs.multi_first] if len(runs.multi_first) else np.zeros(0, np.int64)
    blocks = []
    by_block = np.argsort(run_block, kind="stable")  # keeps (domain, dataset, file) order
    run_bounds = np.searchsorted(run_block[by_block], np.arange(shards + 1))
    multi_by_block = np.argsort(multi_block, kind="stable")
    multi_bounds = np.searchsorted(multi_block[multi_by_block], np.arange(shards + 1))
    for b in range(shards):
        sel = by_block[run_bounds[b] : run_bounds[b + 1]]
        msel = multi_by_block[multi_bounds[b] : multi_bounds[b + 1]]
        local_first = np.searchsorted(sel, runs.multi_first[msel])
        blocks.append(encode_block(Runs(runs.domain_id[sel], runs.dataset_id[sel], runs.file_id[sel],
                                        runs.rows[sel], local_first, runs.multi_count[msel]),
                                   level=_POSTINGS_ZSTD_LEVEL))
    return blocks


def _url_count(runs: Runs, pair_first: np.ndarray) -> int:
    """Exact URLs of the version: the rows of single-file pairs plus the fragmented pairs' counts."""
    single = np.ones(len(pair_first), bool)
    multi_pair = np.searchsorted(pair_first, runs.multi_first)
    single[multi_pair] = False
    pair_rows = np.add.reduceat(runs.rows, pair_first) if len(pair_first) else np.zeros(0, np.int64)
    return int(pair_rows[single].sum()) + int(runs.multi_count.sum())


@dataclass(frozen=True)
class BuildResult:
    version: str | None  # None: nothing new, no version written
    full: bool
    files_scanned: int
    rows_scanned: int
    files_dropped: int
    domains: int
    pairs: int
    fragmented_pairs: int
    seconds: float
    compacted_partitions: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GcResult:
    removed_versions: list[str] = field(default_factory=list)
    pinned_versions: list[str] = field(default_factory=list)
    removed_lake_files: list[str] = field(default_factory=list)
    removed_tmp_dirs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class IndexBuilder:
    """Writes index versions under ``index/`` of the index store from the lake under ``urls/``
    of the lake store (the same store unless ``index.uri`` is set)."""

    def __init__(
        self,
        root: ObjectStore | Path,
        *,
        index: IndexSettings | None = None,
        lake: LakeSettings | None = None,
        scan_threads: int | None = None,
        clock: Any = time.time,
        index_store: ObjectStore | None = None,
    ) -> None:
        """``root``: the lake's store (or a local directory); ``index_store``: the index's (default:
        the lake's). ``index``, ``lake``: the ``index.*`` and ``lake.*`` settings (taken whole;
        their defaults when None): a version has ``index.postings_shards`` postings blocks, garbage
        collection keeps ``index.keep_versions``, compaction writes ``lake.row_group_rows`` and
        ``lake.zstd_level``. ``scan_threads``: lake files read at once (default 4 locally, 16 on S3)."""
        self.lake_store = as_store(root)
        self.index_store = index_store if index_store is not None else self.lake_store
        self.index = index if index is not None else IndexSettings()
        self.lake = lake if lake is not None else LakeSettings()
        # S3: each file costs a HEAD and ranged GETs; more of them in flight (4 -> 16 threads: the
        # 1,536-file Reddit lake's scan 8.1 -> 6.2 s on loopback, 2 busy cores; more on a real network)
        self.scan_threads = scan_threads or (4 if self.lake_store.is_local else 16)
        self.clock = clock

    @property
    def shards(self) -> int:
        """Postings blocks of the versions this builder writes."""
        return self.index.postings_shards

    @property
    def root(self) -> Path:
        """The lake's local directory (local lakes only)."""
        return self.lake_store.local_path("")

    @property
    def _local(self) -> bool:
        return self.index_store.is_local

    @classmethod
    def from_settings(cls, settings: Settings) -> IndexBuilder:
        from crawlstream.objectstore import index_location, lake_location, open_objects

        return cls(open_objects(lake_location(settings), settings.s3), index=settings.index, lake=settings.lake,
                   index_store=open_objects(index_location(settings), settings.s3))

    # -- locking -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        if not self._local:  # S3: no flock; the manifest's compare-and-swap is the commit point
            yield
            return
        d = self.index_store.local_path("index")
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- build -------------------------------------------------------------------------

    def build(self, *, full: bool = False) -> BuildResult:
        """Write a new version if the lake changed (always when ``full``); flip the manifest."""
        with self._lock():
            return self._build(full=full)

    def _build(self, *, full: bool, compacted: int = 0) -> BuildResult:
        started = time.perf_counter()
        tagged = read_manifest_tagged(self.index_store)
        manifest, tag = tagged if tagged is not None else (None, None)
        prev = manifest.current() if manifest and not full else None
        if prev is not None and not self._current_format(prev):
            logger.info("index version %s has an older postings format: building a full version", prev.version)
            prev = None
        prev_files: list[FileEntry] = self._load_files(prev) if prev else []

        # 2. list the lake
        new, dropped, retired = self._lake_changes(prev, prev_files, full=full)
        if prev is not None and not new and not dropped:
            return BuildResult(None, full, 0, 0, 0, int(prev.stats.get("domains", 0)),
                               int(prev.stats.get("pairs", 0)), 0, time.perf_counter() - started)

        phases = {"list": time.perf_counter() - started}
        # 3. scan new files
        files, parts, rows_scanned = self._scan_new(new, prev_files, dropped)
        phases["scan"] = time.perf_counter() - started - sum(phases.values())

        # 4. merge with the previous version
        prev_multi: dict[tuple[str, int], int] = {}
        touched_keys: set[tuple[str, int]] = set()
        if prev is not None:
            dropped_ids = {f.file_id for f in prev_files if f.path in dropped}
            carried, prev_multi, touched_keys = self._carried_runs(prev, prev_files, dropped_ids)
            parts.insert(0, carried)
        domains, runs, pair_first, is_new = _merge_runs(_concat_runs(parts))
        runs = self._count_fragmented(domains, runs, pair_first, is_new, files, prev_multi, touched_keys)
        phases["merge"] = time.perf_counter() - started - sum(phases.values())
        # 5. write the version
        version = self._next_version(manifest)
        info = self._write_version(version, domains, runs, pair_first, files, retired, rows_scanned)
        phases["write"] = time.perf_counter() - started - sum(phases.values())
        # 6. flip
        self._flip(manifest, tag, info)
        elapsed = time.perf_counter() - started
        logger.info("index version %s flipped: %d new files, %d rows scanned, %d pairs in %.2fs",
                    version, len(new), rows_scanned, len(pair_first), elapsed)
        return BuildResult(version, full, len(new), rows_scanned, len(dropped), int(info.stats["domains"]),
                           len(pair_first), len(runs.multi_first), elapsed, compacted,
                           {k: round(v, 3) for k, v in phases.items()})

    def _flip(self, manifest: Manifest | None, tag: str | None, info: VersionInfo) -> None:
        """Make ``info`` current: locally an atomic rename (under the build lock); on S3 a
        compare-and-swap against the manifest this build started from."""
        if self._local:
            versions = (info, *(manifest.versions if manifest else ()))
            write_manifest(self.index_store.local_path(""), Manifest(info.version, versions))
            return
        stats = {**info.stats, "flipped_at": round(self.clock(), 3)}  # when the previous one retired (gc)
        info = VersionInfo(info.version, info.created_at, info.shards, info.files, stats)
        new = Manifest(info.version, (info, *(manifest.versions if manifest else ())),
                       manifest.parquet_root if manifest else "urls/")
        if not publish_manifest(self.index_store, new, tag):
            now = read_manifest(self.index_store)
            if now is not None and now.current_version == info.version:
                return  # our PUT landed but its answer was lost; the retry met our own ETag
            raise ManifestConflict(
                f"index build: another builder flipped {self.index_store.uri('index/manifest.json')} first; "
                f"version {info.version} was not published (index gc removes it); build again")

    def _lake_changes(
        self, prev: VersionInfo | None, prev_files: list[FileEntry], *, full: bool
    ) -> tuple[list[LakeFile], set[str], list[str]]:
        """Step 2: (the files to scan, the known files a compaction replaced, the retired paths)."""
        prev_retired: set[str] = set(prev.stats.get("retired", [])) if prev else set()
        known = {f.path for f in prev_files}
        listed = list(list_lake_files(self.lake_store))
        candidates = [lf for lf in listed if lf.path not in known and lf.path not in prev_retired]
        replaced: set[str] = set()
        for lf in listed if full else candidates:
            if is_compacted(lf.path):  # only compaction output can replace files
                replaced.update(read_replaces(self.lake_store, lf.path))
        new = [lf for lf in candidates if lf.path not in replaced]
        dropped = {p for p in known if p in replaced}
        retired = sorted((prev_retired | replaced) & {lf.path for lf in listed})
        return new, dropped, retired

    def _scan_new(
        self, new: list[LakeFile], prev_files: list[FileEntry], dropped: set[str]
    ) -> tuple[list[FileEntry], list[_RunTable], int]:
        """Step 3: the version's files (the previous ones but ``dropped``, then ``new`` with fresh
        ids), the new files' runs, and the rows scanned."""
        next_id = max((f.file_id for f in prev_files), default=-1) + 1
        files = [f for f in prev_files if f.path not in dropped]
        jobs = [(next_id + i, lf) for i, lf in enumerate(new)]
        parts: list[_RunTable] = []
        with ThreadPoolExecutor(max_workers=self.scan_threads) as pool:  # Parquet reads drop the GIL
            for entry, runs in pool.map(lambda j: self._scan_file(j[0], j[1].dataset_id, j[1].hh, j[1].path), jobs):
                files.append(entry)
                parts.append(runs)
        rows_scanned = sum(f.num_rows for f in files[len(files) - len(jobs):])
        return files, parts, rows_scanned

    def _carried_runs(
        self, prev: VersionInfo, prev_files: list[FileEntry], dropped_ids: set[int]
    ) -> tuple[_RunTable, dict[tuple[str, int], int], set[tuple[str, int]]]:
        """Step 4's input from the previous version: its runs but those of files a compaction
        replaced, its fragmented pairs' counts, and the pairs that lost rows (to be recounted)."""
        touched_keys: set[tuple[str, int]] = set()
        carried, prev_multi = self._load_runs(prev, prev_files)
        gone = np.isin(carried.file_id, np.fromiter(dropped_ids, np.int64, len(dropped_ids)))
        if gone.any():  # pairs that lose rows to a compaction are recounted
            gd = carried.domains.filter(pa.array(gone)).to_pylist()
            touched_keys.update(zip(gd, carried.dataset_id[gone].tolist(), strict=True))
            keep = pa.array(~gone)
            carried = _RunTable(carried.domains.filter(keep), carried.dataset_id[~gone],
                                carried.file_id[~gone], carried.rows[~gone], carried.is_new[~gone])
        return carried, prev_multi, touched_keys

    def _count_fragmented(
        self,
        domains: pa.Array,
        runs: Runs,
        pair_first: np.ndarray,
        is_new: np.ndarray,
        files: list[FileEntry],
        prev_multi: dict[tuple[str, int], int],
        touched_keys: set[tuple[str, int]],
    ) -> Runs:
        """``runs`` with the exact count of each fragmented pair (rows in more than one file):
        carried forward from the previous version, or recounted from its URLs (cross-file
        dedupe) when its runs changed."""
        did, ds, fid, rows = runs.domain_id, runs.dataset_id, runs.file_id, runs.rows
        pair_runs = np.diff(np.append(pair_first, len(did)))
        multi = pair_first[pair_runs > 1]
        multi_count = np.zeros(len(multi), np.int64)
        if len(multi):
            files_by_id = {f.file_id: f for f in files}
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
                multi_count[k] = self._distinct_urls(segs, files_by_id)
        return Runs(did, ds, fid, rows, multi, multi_count)

    def _next_version(self, manifest: Manifest | None) -> str:
        seq = 1
        if manifest is not None:
            seq = max(int(v.version.split("-", 1)[0]) for v in manifest.versions) + 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
        if not self._local:  # two builders racing on S3 must never write into the same directory
            return f"{seq:06d}-{stamp}-{uuid.uuid4().hex[:8]}"
        return f"{seq:06d}-{stamp}"

    def _scan_file(self, file_id: int, dataset_id: int, hh: str, rel: str) -> tuple[FileEntry, _RunTable]:
        """The file's registry entry and its runs, from the ``domain`` column's dictionary
        indices (one bincount per row group; a domain split by a row-group boundary gives two
        runs that the merge joins)."""
        with self._open_lake(rel) as source:
            # pre_buffer off and no inner threads: 0.13 ms instead of 0.37 ms per (small) local file.
            size, meta, col = self._read_domains(source, rel)
        rg_rows = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
        names, counts = [], []
        for chunk in col.chunks:
            c = np.bincount(chunk.indices.to_numpy(zero_copy_only=False), minlength=len(chunk.dictionary))
            present = c > 0
            names.append(chunk.dictionary.filter(pa.array(present)))
            counts.append(c[present])
        rows = np.concatenate(counts).astype(np.int64) if counts else np.zeros(0, np.int64)
        n = len(rows)
        table = _RunTable(
            pa.concat_arrays(names) if names else pa.array([], pa.string()),
            np.full(n, dataset_id, np.int64), np.full(n, file_id, np.int64), rows, np.ones(n, bool),
        )
        return FileEntry(file_id, dataset_id, hh, rel, size, rg_rows), table

    @contextlib.contextmanager
    def _open_lake(self, rel: str) -> Iterator[Any]:
        """A lake file to hand to ``pq.ParquetFile``: its local path, or an open S3 handle."""
        if self.lake_store.is_local:
            yield self.lake_store.local_path(rel)
            return
        with self.lake_store.open_input(rel) as fh:
            yield fh

    def _read_domains(self, source: Any, rel: str) -> tuple[int, pq.FileMetaData, pa.ChunkedArray]:
        """(size, metadata, ``domain`` column) of one lake file; S3 failures retried to the deadline."""
        def read() -> tuple[int, pq.FileMetaData, pa.ChunkedArray]:
            pf = pq.ParquetFile(source, read_dictionary=["domain"], pre_buffer=False)
            col = pf.read(columns=["domain"], use_threads=False).column(0)
            size = source.stat().st_size if isinstance(source, Path) else source.size()
            return size, pf.metadata, col

        if self.lake_store.is_local:
            return read()
        return self.lake_store.retry.run(f"scan {self.lake_store.uri(rel)}", read, lambda e: isinstance(e, OSError))

    def _distinct_urls(self, segs: list[Segment], files: dict[int, FileEntry]) -> int:
        """Distinct URLs of one (domain, dataset): the domain is fixed, so the other parts decide."""
        seen: set[tuple[str, str, int | None, str]] = set()
        for s in segs:
            with self._open_lake(files[s.file_id].path) as source:
                table = pq.ParquetFile(source).read_row_group(
                    s.row_group, columns=["scheme", "host_prefix", "port", "path_query"]
                ).slice(s.row_start, s.row_count)
            seen.update(zip(*(table.column(i).to_pylist() for i in range(4)), strict=True))
        return len(seen)

    def _current_format(self, info: VersionInfo) -> bool:
        """An incremental build extends only a version whose postings this code decodes."""
        rel = info.files["postings"]
        if self._local:
            with open(self.index_store.local_path(rel), "rb") as fh:
                return is_current_postings(fh.read(8))
        with self.index_store.open_input(rel) as fh:
            return is_current_postings(self.index_store.read_range(fh, rel, 0, 8))

    def _load_files(self, info: VersionInfo) -> list[FileEntry]:
        data = self.index_store.read(info.files["files_tsv"])
        return decode_files(zstandard.ZstdDecompressor().decompress(data))

    def _load_runs(
        self, info: VersionInfo, files: list[FileEntry]
    ) -> tuple[_RunTable, dict[tuple[str, int], int]]:
        """Every run of a version keyed by domain string, and its fragmented pairs' exact counts."""
        raw = zstandard.ZstdDecompressor().decompress(self.index_store.read(info.files["domains"]))
        names = pa.array(raw.decode().split("\n") if raw else [], pa.string())
        buf = self.index_store.read(info.files["postings"])
        parts = [decode_block(postings_block(buf, b)) for b in range(info.shards)]
        did = np.concatenate([r.domain_id for r in parts])
        table = _RunTable(names.take(pa.array(did)), np.concatenate([r.dataset_id for r in parts]),
                          np.concatenate([r.file_id for r in parts]), np.concatenate([r.rows for r in parts]),
                          np.zeros(len(did), bool))
        multi: dict[tuple[str, int], int] = {}
        for r in parts:
            for first, count in zip(r.multi_first.tolist(), r.multi_count.tolist(), strict=True):
                multi[(names[int(r.domain_id[first])].as_py(), int(r.dataset_id[first]))] = count
        return table, multi

    def _write_version(
        self,
        version: str,
        domains: pa.Array,
        runs: Runs,
        pair_first: np.ndarray,
        files: list[FileEntry],
        retired: list[str],
        rows_scanned: int,
    ) -> VersionInfo:
        cctx = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
        rel = f"index/{version}"
        names: dict[str, Any] = {
            "domains": f"{rel}/domains.zst",
            "d2d_roar": f"{rel}/domain_to_datasets.roar",
            "files_tsv": f"{rel}/files.tsv.zst",
            "postings": f"{rel}/postings.bin",
            "pin": f"{rel}/{PIN_NAME}",
        }
        out: dict[str, bytes] = {
            "domains.zst": cctx.compress("\n".join(domains.to_pylist()).encode()),
            "domain_to_datasets.roar": _domain_to_datasets(runs, pair_first, len(domains)),
            "postings.bin": encode_postings(_postings_blocks(runs, files, self.shards)),
            "files.tsv.zst": cctx.compress(encode_files(sorted(files, key=lambda f: f.file_id))),
            PIN_NAME: b"",
        }
        self._publish_version(version, out)
        stats = {
            "domains": len(domains),
            "pairs": len(pair_first),
            "urls": _url_count(runs, pair_first),
            "files": len(files),
            "datasets": sorted({f.dataset_id for f in files}),
            "rows_scanned": rows_scanned,
            "fragmented_pairs": len(runs.multi_first),
            "index_bytes": sum(len(b) for b in out.values()),
            "index_bytes_by_file": {k: len(v) for k, v in out.items() if v},
            "retired": retired,
            "built_by": builder_id(),
        }
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        return VersionInfo(version, created, self.shards, names, stats, file_checksums(out, blocks=self.shards))

    def _publish_version(self, version: str, out: dict[str, bytes]) -> None:
        """Every file of ``out`` under ``index/<version>/``: locally a temp directory renamed
        whole; on S3 each object uploaded whole (in parallel), unreferenced until the flip."""
        if not self._local:
            with ThreadPoolExecutor(max_workers=max(1, min(8, len(out)))) as pool:
                list(pool.map(lambda item: self.index_store.write(f"index/{version}/{item[0]}", item[1]),
                              out.items()))
            return
        idir = self.index_store.local_path("index")
        tmp = idir / f".tmp-{version}"
        final = idir / version
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        with replacing(final, tmp=tmp) as version_dir:  # fsyncs each file and the directory, renames it
            for name, data in out.items():
                (version_dir / name).write_bytes(data)

    # -- compaction --------------------------------------------------------------------

    def compact(self, *, min_files: int = 2) -> BuildResult:
        """Merge every lake partition with ``min_files`` or more files, then build incrementally."""
        with self._lock():
            manifest = read_manifest(self.index_store)
            retired = set(manifest.current().stats.get("retired", [])) if manifest else set()
            parts: dict[tuple[int, str], list[str]] = defaultdict(list)
            replaced: set[str] = set()
            listed = [lf for lf in list_lake_files(self.lake_store) if lf.path not in retired]
            for lf in listed:
                if is_compacted(lf.path):
                    replaced.update(read_replaces(self.lake_store, lf.path))
            for lf in listed:
                if lf.path not in replaced:
                    parts[(lf.dataset_id, lf.hh)].append(lf.path)
            done = 0
            for (ds, hh), paths in sorted(parts.items()):
                if len(paths) >= min_files:
                    compact_partition(self.lake_store, ds, hh, paths,
                                      row_group_rows=self.lake.row_group_rows, zstd_level=self.lake.zstd_level)
                    done += 1
            return self._build(full=False, compacted=done)

    # -- garbage collection ------------------------------------------------------------

    def gc(self, *, keep_versions: int | None = None) -> GcResult:
        """Remove versions beyond the newest ``keep_versions`` unless pinned; then orphans."""
        keep = self.index.keep_versions if keep_versions is None else keep_versions
        if not self._local:
            from crawlstream.index._gc_s3 import gc_s3

            return gc_s3(self, keep)
        result = GcResult()
        with self._lock():
            idir = self.index_store.local_path("index")
            for tmp in idir.glob(".tmp-*"):
                shutil.rmtree(tmp, ignore_errors=True)
                result.removed_tmp_dirs.append(tmp.name)
            manifest = read_manifest(idir.parent)
            if manifest is None:
                return result
            listed = {v.version for v in manifest.versions}
            kept = list(manifest.versions[:keep])
            candidates = list(manifest.versions[keep:])
            # Directories no manifest entry names (a build crashed after its rename) go too.
            orphans = [p.name for p in idir.iterdir() if p.is_dir() and not p.name.startswith(".")
                       and p.name not in listed]
            removed: list[VersionInfo] = []
            for v in candidates:
                fd = try_lock_exclusive(idir / v.version / PIN_NAME)
                if fd is None and (idir / v.version).exists():
                    result.pinned_versions.append(v.version)
                    kept.append(v)
                    continue
                try:
                    self._remove_version_dir(idir / v.version)
                finally:
                    if fd is not None:
                        os.close(fd)
                removed.append(v)
                result.removed_versions.append(v.version)
            for name in orphans:
                fd = try_lock_exclusive(idir / name / PIN_NAME)
                if fd is None and (idir / name / PIN_NAME).exists():
                    continue
                try:
                    self._remove_version_dir(idir / name)
                finally:
                    if fd is not None:
                        os.close(fd)
                result.removed_versions.append(name)
            if removed:
                write_manifest(idir.parent, Manifest(manifest.current_version, tuple(kept), manifest.parquet_root))
            # Lake files a compaction retired may go once no kept (or pinned) version uses them.
            for rel in self.unused_retired(manifest.versions, kept):
                with contextlib.suppress(FileNotFoundError):
                    self.lake_store.local_path(rel).unlink()
                    result.removed_lake_files.append(rel)
        logger.info("index gc: removed %s, pinned %s, %d lake files deleted",
                    result.removed_versions, result.pinned_versions, len(result.removed_lake_files))
        return result

    def unused_retired(self, versions: Sequence[VersionInfo], kept: Sequence[VersionInfo]) -> list[str]:
        """Lake files a compaction retired (in any of ``versions``) that no ``kept`` version reads."""
        still: set[str] = set()
        for v in kept:
            still.update(f.path for f in self._load_files(v))
        retired: set[str] = set()
        for v in versions:
            retired.update(v.stats.get("retired", []))
        return sorted(retired - still)

    @staticmethod
    def _remove_version_dir(path: Path) -> None:
        if not path.exists():
            return
        trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
        os.rename(path, trash)  # not a publication: takes the version out of sight before it is deleted
        shutil.rmtree(trash, ignore_errors=True)

    # -- info --------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        manifest = read_manifest(self.index_store)
        if manifest is None:
            return {"current_version": None, "versions": []}
        return {
            "current_version": manifest.current_version,
            "versions": [
                {"version": v.version, "created_at": v.created_at,
                 **{k: v.stats[k] for k in ("domains", "pairs", "urls", "files", "datasets",
                                            "fragmented_pairs", "index_bytes") if k in v.stats}}
                for v in manifest.versions
            ],
        }
