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
   carried forward, and readers merge it. Steps 3-4 run one lake prefix ``hh`` at a time (a
   domain's runs are all in one prefix), ``index.build_workers`` at once, each spilled to
   ``index/.spill-<version>`` so memory does not grow with the lake (ADR 031);
5. merge the prefixes' sorted domain lists into the global ids and write every file of the
   version, streamed, into ``index/.tmp-<version>``, fsync, rename to ``index/<version>`` (on
   S3: each file uploaded whole under ``index/<version>/``, a version name no other builder can
   pick);
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
import tempfile
import time
import uuid
from collections import ChainMap, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from crawlstream.durable import replacing
from crawlstream.index._build_blocks import (
    _UNITS,
    BlockResult,
    PrevVersion,
    RunTable,
    concat_runs,
    count_fragmented,
    decompressing,
    merge_runs,
    respill_full,
    spill_block,
    stream_chunks,
)
from crawlstream.index._build_merge import file_checksums_of, merge_domains, write_postings
from crawlstream.index._formats import (
    FileEntry,
    Segment,
    decode_files,
    encode_files,
    is_current_postings,
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
# What one block in flight is assumed to take (ADR 031): the budget / this = blocks at once.
_BLOCK_MB = 64
_UPLOAD_WHOLE = 8 << 20


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
        ``lake.zstd_level``. ``scan_threads``: lake files read at once (default 4 locally, 16 on S3).
        ``progress`` (an attribute, a no-op by default): called as a build or compaction moves on
        (each lake prefix scanned, each partition compacted, the domain list written); the
        index-compactor sets its heartbeat there, so a build longer than the liveness probe's
        bound is not taken for a hung one."""
        self.lake_store = as_store(root)
        self.index_store = index_store if index_store is not None else self.lake_store
        self.index = index if index is not None else IndexSettings()
        self.lake = lake if lake is not None else LakeSettings()
        # S3: each file costs a HEAD and ranged GETs; more of them in flight (4 -> 16 threads: the
        # 1,536-file Reddit lake's scan 8.1 -> 6.2 s on loopback, 2 busy cores; more on a real network)
        self.scan_threads = scan_threads or (4 if self.lake_store.is_local else 16)
        self.clock = clock
        self.progress: Callable[[], None] = lambda: None

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
        version = self._next_version(manifest)
        with self._spilling(version) as spill:
            # 3-4. scan the new files and merge with the previous version, block by block
            files, results, rows_scanned = self._scan_new(prev, prev_files, new, dropped, spill)
            phases["blocks"] = time.perf_counter() - started - sum(phases.values())
            # 5. write the version
            info = self._write_version(version, spill, results, files, retired, rows_scanned)
            phases["write"] = time.perf_counter() - started - sum(phases.values())
        # 6. flip
        self._flip(manifest, tag, info)
        elapsed = time.perf_counter() - started
        pairs = int(info.stats["pairs"])
        logger.info("index version %s flipped: %d new files, %d rows scanned, %d pairs in %.2fs",
                    version, len(new), rows_scanned, pairs, elapsed)
        return BuildResult(version, full, len(new), rows_scanned, len(dropped), int(info.stats["domains"]),
                           pairs, int(info.stats["fragmented_pairs"]), elapsed, compacted,
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

    def _next_version(self, manifest: Manifest | None) -> str:
        seq = 1
        if manifest is not None:
            seq = max(int(v.version.split("-", 1)[0]) for v in manifest.versions) + 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
        if not self._local:  # two builders racing on S3 must never write into the same directory
            return f"{seq:06d}-{stamp}-{uuid.uuid4().hex[:8]}"
        return f"{seq:06d}-{stamp}"

    def _scan_file(self, file_id: int, dataset_id: int, hh: str, rel: str) -> tuple[FileEntry, RunTable]:
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
        table = RunTable(
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

    def _distinct_urls(self, segs: list[Segment], files: Mapping[int, FileEntry]) -> int:
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

    # -- block by block (ADR 031) ------------------------------------------------------

    @property
    def _workers(self) -> int:
        return self.index.build_workers or os.cpu_count() or 1

    @property
    def _blocks_at_once(self) -> int:
        """Units scanned and merged, or blocks encoded, at once: the workers, as many as the memory
        budget holds at ``_BLOCK_MB`` each (a unit holds 1/256 of the version's runs, a block 1/shards)."""
        return max(1, min(self._workers, self.index.build_memory_mb // _BLOCK_MB))

    @property
    def _merge_chunk(self) -> int:
        """Names per batch of a unit's spilled list: the merge holds about one batch of every unit."""
        return int(min(1 << 16, max(16, (self.index.build_memory_mb << 20) // (64 * _UNITS * 100))))

    @contextlib.contextmanager
    def _spilling(self, version: str) -> Iterator[Path]:
        """The build's scratch directory: ``index/.spill-<version>`` (``gc`` removes one a killed
        build left), or a local temporary directory for an index on S3; removed at the end."""
        if self._local:
            spill = self.index_store.local_path("index") / f".spill-{version}"
            shutil.rmtree(spill, ignore_errors=True)
            spill.mkdir(parents=True)
        else:
            spill = Path(tempfile.mkdtemp(prefix=f"crawlstream-build-{version}-"))
        try:
            yield spill
        finally:
            shutil.rmtree(spill, ignore_errors=True)

    def _scan_new(
        self, prev: VersionInfo | None, prev_files: list[FileEntry], new: list[LakeFile], dropped: set[str],
        spill: Path,
    ) -> tuple[list[FileEntry], list[BlockResult], int]:
        """Steps 3-4, one lake prefix (unit) per task: (the version's files: the previous ones but
        ``dropped``, then ``new`` with fresh ids; the spilled blocks; the rows scanned)."""
        next_id = max((f.file_id for f in prev_files), default=-1) + 1
        jobs: dict[int, list[tuple[int, LakeFile]]] = defaultdict(list)
        for i, lf in enumerate(new):
            jobs[int(lf.hh, 16)].append((next_id + i, lf))
        dropped_ids = np.array([f.file_id for f in prev_files if f.path in dropped], np.int64)
        prev_by_id = {f.file_id: f for f in prev_files}
        old = self._prev_version(prev, prev_files, spill) if prev is not None else None
        scanned: dict[int, FileEntry] = {}

        def one(unit: int, scan_pool: ThreadPoolExecutor) -> BlockResult:
            parts: list[RunTable] = []
            multi: dict[tuple[str, int], int] = {}
            touched: set[tuple[str, int]] = set()
            if old is not None:
                carried, multi, touched = old.carried(unit, dropped_ids)
                parts.append(carried)
            found = list(scan_pool.map(lambda j: self._scan_file(j[0], j[1].dataset_id, j[1].hh, j[1].path),
                                       jobs.get(unit, [])))
            mine = {e.file_id: e for e, _ in found}
            scanned.update(mine)
            parts += [t for _, t in found]
            domains, runs, pair_first, is_new = merge_runs(concat_runs(parts))
            files = ChainMap(mine, prev_by_id)
            runs = count_fragmented(domains, runs, pair_first, is_new, files, multi, touched,
                                    lambda segs: self._distinct_urls(segs, files))
            result = spill_block(unit, spill / f"u{unit}", domains, runs, pair_first,
                                 chunk=self._merge_chunk, full_dtdr=False)
            del domains, runs, parts, found
            pa.default_memory_pool().release_unused()  # mimalloc keeps freed pages: the peak grew with units
            return result

        with ThreadPoolExecutor(self.scan_threads) as scan_pool, \
                ThreadPoolExecutor(self._blocks_at_once) as pool:  # numpy, pyarrow, zstd drop the GIL
            units = sorted(set(jobs) | {int(f.hh, 16) for f in prev_files})  # a small lake has few prefixes
            results = []
            for result in pool.map(lambda u: one(u, scan_pool), units):
                results.append(result)
                self.progress()
        if any(r.max_dataset >= 1 << 16 or r.max_card > 4096 for r in results):
            results = [respill_full(r, chunk=self._merge_chunk) for r in results]
        files = [f for f in prev_files if f.path not in dropped] + [scanned[next_id + i] for i in range(len(new))]
        return files, results, sum(scanned[next_id + i].num_rows for i in range(len(new)))

    def _prev_version(self, prev: VersionInfo, prev_files: list[FileEntry], spill: Path) -> PrevVersion:
        """The previous version, read one postings block at a time (its names spilled by block)."""
        rel, names_rel = prev.files["postings"], prev.files["domains"]
        chunk_bytes = max(1 << 12, (self.index.build_memory_mb << 20) // 256)
        if self._local:
            path = self.index_store.local_path(rel)

            def read_range(offset: int, n: int) -> bytes:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    return fh.read(n)

            with open(self.index_store.local_path(names_rel), "rb") as fh:
                return PrevVersion(read_range, stream_chunks(decompressing(fh)), prev.shards, prev_files, spill,
                                   chunk_bytes=chunk_bytes)

        def read_s3(offset: int, n: int) -> bytes:
            with self.index_store.open_input(rel) as fh:
                return self.index_store.read_range(fh, rel, offset, n)

        with self.index_store.open_input(names_rel) as fh:
            return PrevVersion(read_s3, stream_chunks(decompressing(fh)), prev.shards, prev_files, spill,
                               chunk_bytes=chunk_bytes)

    def _write_version(
        self, version: str, spill: Path, results: list[BlockResult], files: list[FileEntry], retired: list[str],
        rows_scanned: int,
    ) -> VersionInfo:
        """Step 5: every file of the version written to disk from the spilled blocks, then published."""
        out = self.index_store.local_path("index") / f".tmp-{version}" if self._local else spill / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        try:
            merge_domains(results, out, spill, level=_ZSTD_LEVEL, chunk=self._merge_chunk)
            self.progress()
            write_postings(results, out / "postings.bin", shards=self.shards, level=_POSTINGS_ZSTD_LEVEL,
                           workers=self._blocks_at_once)
            cctx = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
            (out / "files.tsv.zst").write_bytes(cctx.compress(encode_files(sorted(files, key=lambda f: f.file_id))))
            (out / PIN_NAME).write_bytes(b"")
            order = ["domains.zst", "domain_to_datasets.roar", "postings.bin", "files.tsv.zst", PIN_NAME]
            sums = file_checksums_of({n: out / n for n in order}, blocks=self.shards)
            self._publish_version(version, out, order)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        rel = f"index/{version}"
        names: dict[str, Any] = {"domains": f"{rel}/domains.zst", "d2d_roar": f"{rel}/domain_to_datasets.roar",
                                 "files_tsv": f"{rel}/files.tsv.zst", "postings": f"{rel}/postings.bin",
                                 "pin": f"{rel}/{PIN_NAME}"}
        stats = {
            "domains": sum(r.domains for r in results),
            "pairs": sum(r.pairs for r in results),
            "urls": sum(r.urls for r in results),
            "files": len(files),
            "datasets": sorted({f.dataset_id for f in files}),
            "rows_scanned": rows_scanned,
            "fragmented_pairs": sum(r.fragmented for r in results),
            "index_bytes": sum(s["size"] for s in sums.values()),
            "index_bytes_by_file": {k: s["size"] for k, s in sums.items() if s["size"]},
            "retired": retired,
            "built_by": builder_id(),
        }
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        return VersionInfo(version, created, self.shards, names, stats, sums)

    def _upload(self, rel: str, path: Path) -> None:
        """One file of a version to S3: a small one as one PUT from memory, a big one streamed
        from disk (never more than ``_UPLOAD_WHOLE`` bytes read in)."""
        if path.stat().st_size <= _UPLOAD_WHOLE:
            self.index_store.write(rel, path.read_bytes())
        else:
            self.index_store.upload(rel, path)

    def _publish_version(self, version: str, out: Path, order: list[str]) -> None:
        """The files in ``out`` under ``index/<version>/``: locally ``out`` (``index/.tmp-<version>``)
        fsynced and renamed whole; on S3 each file uploaded (in parallel), unreferenced until the flip."""
        if not self._local:
            with ThreadPoolExecutor(max_workers=max(1, min(8, len(order)))) as pool:
                list(pool.map(lambda n: self._upload(f"index/{version}/{n}", out / n), order))
            return
        with replacing(self.index_store.local_path("index") / version, tmp=out):
            pass  # fsyncs each file and the directory, renames it

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
                    self.progress()
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
            for tmp in [*idir.glob(".tmp-*"), *idir.glob(".spill-*")]:
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
                self.progress()
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
            unused = self.unused_retired(manifest.versions, kept)
            self.progress()
            for rel in unused:
                with contextlib.suppress(FileNotFoundError):
                    self.lake_store.local_path(rel).unlink()
                    result.removed_lake_files.append(rel)
                self.progress()
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
