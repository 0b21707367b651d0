"""``IndexReader``: serve domain -> datasets -> URLs from one pinned index version.

Contract for callers (the query API):

* ``with reader.pin() as idx:`` — everything done through ``idx`` reads one version, even
  if ``manifest.json`` flips meanwhile; the version's files stay on disk while pinned (a
  shared ``flock`` on its ``PIN`` file, which ``gc`` respects).
* Files are opened by the exact paths the manifest lists; nothing is listed per request.
  Index files are memory-mapped; Parquet footers (``ParquetFile``) sit in a small LRU cache,
  decoded row groups in one bounded by bytes; a page reads only the row groups covering
  ``[offset, offset+limit)``, found from per-segment row counts, so a deep offset costs the
  same as the first page. A ``cached_only`` pin never reads Parquet (:class:`NotCached`).
* Answers follow the dedupe rule: one row per (dataset_id, url); across files the row from
  the lowest file id (earliest indexed) wins. URLs of a (domain, dataset) are ordered by URL.
* Thread-safe.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard
from pyroaring import BitMap

from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.index._formats import (
    FileEntry,
    Segment,
    decode_block,
    decode_files,
    domain_offsets,
    dtdr_entry,
    inline_segments,
    postings_block,
    postings_block_of,
    run_row_starts,
)
from crawlstream.index._manifest import MANIFEST_NAME, Manifest, VersionInfo, index_dir
from crawlstream.lake import host_prefix, segment_rows
from crawlstream.urls import domain_prefix

__all__ = ["DatasetCount", "IndexReader", "NotCached", "PinnedIndex", "UrlItem", "UrlPage"]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ROW_COLUMNS = ["scheme", "host_prefix", "port", "path_query", "ts"]
DICT_COLUMNS = ["scheme", "host_prefix"]


class NotCached(Exception):
    """A ``cached_only`` pin needed a row group that is not in the reader's cache."""


class DatasetCount(NamedTuple):  # a tuple: ~4x cheaper to make than a frozen dataclass
    dataset_id: int
    url_count: int


@dataclass(frozen=True, slots=True)
class UrlItem:
    url_key: int
    url: str
    ts_ms: int | None


@dataclass(frozen=True, slots=True)
class UrlPage:
    """A page; ``rows`` are the items as plain ``(url_key, url, ts_ms)`` tuples (the API encodes
    those directly: 100 frozen dataclasses cost ~70 µs more than the tuples)."""

    total: int
    rows: list[tuple[int, str, int | None]]
    next_offset: int | None

    @property
    def items(self) -> list[UrlItem]:
        return [UrlItem(k, u, t) for k, u, t in self.rows]


class _Lru(Generic[K, V]):
    """A thread-safe LRU bounded by entries and, with ``weigh``, by the sum of the values' weights."""

    def __init__(self, capacity: int, *, budget: int = 0, weigh: Callable[[V], int] | None = None) -> None:
        self.capacity = capacity
        self.budget = budget
        self._weigh = weigh
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return None
            self._data.move_to_end(key)
            return found[0]

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        with self._lock:
            found = self._data.get(key)
            if found is not None:
                self._data.move_to_end(key)
                return found[0]
        value = load()
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            old = self._data.pop(key, None)  # another thread may have loaded it meanwhile
            self._weight += weight - (old[1] if old is not None else 0)
            self._data[key] = (value, weight)
            while len(self._data) > self.capacity or (self._weigh is not None and self._weight > self.budget):
                self._weight -= self._data.popitem(last=False)[1][1]
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weight = 0


def _map(path: Path) -> mmap.mmap | None:
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


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


class _Version:
    """The open files of one version; alive while the reader or a pin references it."""

    def __init__(self, root: Path, info: VersionInfo) -> None:
        self.info = info
        self.version = info.version
        self.refs = 0
        self.current = True
        files = info.files
        self.dtdr: mmap.mmap | None = None
        self.postings: mmap.mmap | None = None
        self._pin_fd = os.open(root / files["pin"], os.O_RDONLY)
        try:
            fcntl.flock(self._pin_fd, fcntl.LOCK_SH)
            if "postings" not in files:
                raise ChecksumMismatch(
                    f"index version {info.version} has an older postings format; "
                    "rebuild with `crawlstream index build --full`"
                )
            raw = (root / files["domains"]).read_bytes()
            self.blob = zstandard.ZstdDecompressor().decompress(raw)
            self.dtdr = _map(root / files["d2d_roar"])
            self.postings = _map(root / files["postings"])
            files_raw = zstandard.ZstdDecompressor().decompress((root / files["files_tsv"]).read_bytes())
        except BaseException:
            self.close()
            raise
        # Line offsets of the domain list, computed once per open (~3 ms per 500k domains;
        # ADR 003): a lookup is a binary search over the blob, no hash table on disk.
        self._offsets = memoryview(domain_offsets(self.blob).astype("<q").tobytes()).cast("q")
        self._domains = _Domains(self.blob, self._offsets)
        self.n_domains = len(self._domains)
        self.files: dict[int, FileEntry] = {f.file_id: f for f in decode_files(files_raw)}
        self._rg_starts: dict[int, list[int]] = {}
        self._blocks: dict[int, _Block] = {}
        self.dataset_ids = sorted({f.dataset_id for f in self.files.values()})
        self.shards = info.shards

    def close(self) -> None:
        for m in (self.dtdr, self.postings):
            if m is not None:
                m.close()
        if self._pin_fd >= 0:
            os.close(self._pin_fd)  # releases the shared lock
            self._pin_fd = -1

    def domain_at(self, domain_id: int) -> str:
        return self._domains[domain_id].decode()

    def domain_id(self, domain: str) -> int | None:
        try:
            key = domain.encode()
        except UnicodeEncodeError:
            return None  # a lone surrogate: every stored domain is valid UTF-8, none can match
        i = bisect.bisect_left(self._domains, key)
        return i if i < self.n_domains and self._domains[i] == key else None

    def datasets_bitmap(self, domain_id: int) -> BitMap:
        assert self.dtdr is not None
        start, length = dtdr_entry(memoryview(self.dtdr), domain_id)
        return BitMap.deserialize(self.dtdr[start : start + length])

    def _block(self, domain: str) -> _Block:
        b = postings_block_of(domain_prefix(domain), self.shards)
        blk = self._blocks.get(b)
        if blk is None:  # two threads may decode the same block once each: harmless
            assert self.postings is not None
            blk = self._blocks[b] = _decode_block(postings_block(self.postings, b))
        return blk

    def counts(self, domain: str, domain_id: int) -> dict[int, int]:
        """dataset_id -> exact URL count of one domain (its runs in the postings block)."""
        blk = self._block(domain)
        lo, hi = blk.span(domain_id)
        datasets = blk.dataset_id[lo:hi].tolist()
        rows = blk.rows[lo:hi].tolist()
        out: dict[int, int] = {}
        for k, ds in enumerate(datasets):
            if ds not in out:  # the first run of a pair; a fragmented pair stores its exact count
                out[ds] = rows[k] if k + 1 == len(datasets) or datasets[k + 1] != ds else blk.multi[lo + k]
        return out

    def pair(self, domain: str, domain_id: int, dataset_id: int) -> tuple[int, list[tuple[int, int, int]]] | None:
        """(exact URL count, runs as (file_id, row_start, rows)) of one (domain, dataset), or None."""
        if not 0 <= dataset_id <= 0xFFFFFFFF:
            return None
        blk = self._block(domain)
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


class IndexReader:
    """Opens the current index version under ``<root>/index`` and hands out pins."""

    def __init__(
        self,
        root: Path,
        *,
        parquet_files_cached: int = 256,
        row_groups_cached: int = 4096,
        row_group_cache_bytes: int = 128 << 20,
    ) -> None:
        self.root = Path(root)
        self._lake_root = str(self.root)
        self._manifest_path = str(index_dir(self.root) / MANIFEST_NAME)  # stat'ed per pin: no Path ops
        self._lock = threading.Lock()
        self._manifest_stat: tuple[int, int, int] | None = None
        self._current: _Version | None = None
        self._versions: dict[str, _Version] = {}
        self._parquet: _Lru[str, tuple[pq.ParquetFile, threading.Lock]] = _Lru(parquet_files_cached)
        self._row_groups: _Lru[tuple[Any, ...], pa.Table] = _Lru(
            row_groups_cached, budget=row_group_cache_bytes, weigh=lambda t: t.nbytes
        )
        # URL lookups read a row group of every dataset of a domain: in a cache of their own (a
        # quarter of the pages' budget) they cannot evict the row groups pages are served from
        self._lookups: _Lru[tuple[Any, ...], pa.Table] = _Lru(
            row_groups_cached, budget=row_group_cache_bytes // 4, weigh=lambda t: t.nbytes
        )
        self._pairs: _Lru[tuple[str, int, int], tuple[int, bool, list[Segment], list[int]] | None] = _Lru(4096)
        self._merged: _Lru[tuple[str, int, int], list[tuple[int, str, int | None]]] = _Lru(16)

    @classmethod
    def from_settings(cls, settings: Any) -> IndexReader:
        return cls(
            settings.data_dir,
            row_groups_cached=settings.index.row_groups_cached,
            row_group_cache_bytes=settings.index.row_group_cache_mb << 20,
        )

    # -- versions ----------------------------------------------------------------------

    def _refresh(self) -> _Version:
        """The current version, re-reading manifest.json only when its inode/mtime changed."""
        path = self._manifest_path
        for _attempt in range(3):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise StorageUnavailable(
                    f"no index at {path}: run `crawlstream index build` first"
                ) from None
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if key == self._manifest_stat and self._current is not None:
                return self._current
            manifest = Manifest.from_bytes(Path(path).read_bytes())
            info = manifest.current()
            try:
                version = self._versions.get(info.version) or _Version(self.root, info)
            except FileNotFoundError:
                continue  # gc removed it between our read and open: the manifest has moved on
            self._versions[info.version] = version
            if self._current is not None and self._current is not version:
                self._current.current = False
                self._maybe_close(self._current)
            version.current = True
            self._current = version
            self._manifest_stat = key
            logger.info("index reader now serves version %s", info.version)
            return version
        raise StorageUnavailable(f"index manifest {path} keeps naming removed versions; check the builder")

    def _maybe_close(self, v: _Version) -> None:
        if v.refs == 0 and not v.current:
            self._versions.pop(v.version, None)
            v.close()

    def pin(self, *, cached_only: bool = False) -> PinnedIndex:
        """The current version, pinned. ``cached_only``: the pin raises :class:`NotCached` instead
        of reading a row group that is not cached (the API answers such a request on the event
        loop, where a Parquet read would block it, and retries a miss on its thread pool)."""
        with self._lock:
            v = self._refresh()
            v.refs += 1
        return PinnedIndex(self, v, cached_only)

    def _unpin(self, v: _Version) -> None:
        with self._lock:
            v.refs -= 1
            self._maybe_close(v)

    def close(self) -> None:
        with self._lock:
            for v in list(self._versions.values()):
                v.current = False
                if v.refs == 0:
                    self._maybe_close(v)
            self._current = None
            self._manifest_stat = None

    # -- lake access -------------------------------------------------------------------

    def _row_group(
        self, rel: str, rg: int, *, lookup: bool = False, columns: tuple[str, ...] | None = None
    ) -> pa.Table:
        """A decoded row group (``ROW_COLUMNS``, or ``columns``: cached under their own key)."""
        def load_file() -> tuple[pq.ParquetFile, threading.Lock]:
            # an open file (not a path: no filesystem resolution); the few-valued string
            # columns stay dictionaries (16k rows decode to 16k indices, not 16k strings)
            source = pa.OSFile(os.path.join(self._lake_root, rel))
            return pq.ParquetFile(source, pre_buffer=False, read_dictionary=DICT_COLUMNS), threading.Lock()

        def load() -> pa.Table:
            pf, lock = self._parquet.get_or_load(rel, load_file)
            with lock:
                return pf.read_row_group(rg, columns=list(columns or ROW_COLUMNS), use_threads=False)

        key: tuple[Any, ...] = (rel, rg) if columns is None else (rel, rg, *columns)
        return (self._lookups if lookup else self._row_groups).get_or_load(key, load)


class PinnedIndex:
    """One version of the index, fixed for the life of this object (a request)."""

    def __init__(self, reader: IndexReader, version: _Version, cached_only: bool = False) -> None:
        self._reader = reader
        self._v = version
        self._cached_only = cached_only
        self._released = False

    def __enter__(self) -> PinnedIndex:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._reader._unpin(self._v)

    @property
    def version(self) -> str:
        return self._v.version

    def domain_count(self) -> int:
        return int(self._v.n_domains)

    def dataset_ids(self) -> list[int]:
        return list(self._v.dataset_ids)

    def domain_id(self, domain: str) -> int | None:
        return self._v.domain_id(domain)

    def domain_at(self, domain_id: int) -> str:
        return self._v.domain_at(domain_id)

    def datasets_for_domain(self, domain: str) -> list[DatasetCount] | None:
        """Datasets containing ``domain`` (a registered domain) with exact URL counts; None if unknown."""
        did = self._v.domain_id(domain)
        if did is None:
            return None
        return self.datasets_for_domain_id(domain, did)

    def datasets_for_domain_id(self, domain: str, domain_id: int) -> list[DatasetCount]:
        """:meth:`datasets_for_domain` for a domain already looked up with :meth:`domain_id`."""
        counts = self._v.counts(domain, domain_id)
        return [DatasetCount(ds, counts.get(ds, 0)) for ds in self._v.datasets_bitmap(domain_id)]

    def _key(self, domain: str, dataset_id: int) -> tuple[int, int, bool, list[Segment], list[int]] | None:
        did = self._v.domain_id(domain)
        if did is None:
            return None
        v = self._v

        def load() -> tuple[int, bool, list[Segment], list[int]] | None:
            pair = v.pair(domain, did, dataset_id)
            if pair is None:
                return None
            count, runs = pair
            segs = [seg for fid, start, rows in runs for seg in inline_segments(fid, start, rows, v.rg_starts(fid))]
            starts = [0]
            for s in segs:
                starts.append(starts[-1] + s.row_count)
            return count, len(runs) > 1, segs, starts

        found = self._reader._pairs.get_or_load((v.version, did, dataset_id), load)
        if found is None:
            return None
        count, fragmented, segs, starts = found
        return did, count, fragmented, segs, starts

    def _table(self, s: Segment, *, lookup: bool = False) -> pa.Table:
        """The decoded row group holding segment ``s``; ``lookup``: for a URL lookup, which
        reads through its own cache (the pages' one is used when it holds the row group)."""
        key = (self._v.files[s.file_id].path, s.row_group)
        table = self._reader._row_groups.get(key)
        if table is None and lookup:
            table = self._reader._lookups.get(key)
        if table is None:
            if self._cached_only:
                raise NotCached(key[0])
            table = self._reader._row_group(*key, lookup=lookup)
        return table

    def _rows(self, s: Segment, domain: str, *, lookup: bool = False) -> list[tuple[int, str, int | None]]:
        return segment_rows(self._table(s, lookup=lookup), s.row_start, s.row_count, domain)

    def _merged(
        self, domain: str, did: int, dataset_id: int, segs: list[Segment]
    ) -> list[tuple[int, str, int | None]]:
        def load() -> list[tuple[int, str, int | None]]:
            rows = [r for s in segs for r in self._rows(s, domain)]  # segs sorted by file id: stable sort
            rows.sort(key=lambda r: r[1])  # keeps the earliest file's row first
            out: list[tuple[int, str, int | None]] = []
            for r in rows:
                if not out or out[-1][1] != r[1]:
                    out.append(r)
            return out

        return self._reader._merged.get_or_load((self._v.version, did, dataset_id), load)

    def urls(self, domain: str, dataset_id: int, offset: int, limit: int) -> UrlPage | None:
        """A page of the (domain, dataset)'s URLs in URL order; None if the pair is not indexed."""
        if offset < 0 or limit < 0:
            raise ValueError(f"offset and limit must be >= 0, got {offset}, {limit}")
        key = self._key(domain, dataset_id)
        if key is None:
            return None
        did, total, fragmented, segs, starts = key
        rows: list[tuple[int, str, int | None]] = []
        if fragmented:
            rows = self._merged(domain, did, dataset_id, segs)[offset : offset + limit]
        elif limit and offset < starts[-1]:
            i = bisect.bisect_right(starts, offset) - 1
            skip = offset - starts[i]
            while i < len(segs) and len(rows) < limit:
                s = segs[i]
                take = min(s.row_count - skip, limit - len(rows))
                rows += segment_rows(self._table(s), s.row_start + skip, take, domain)
                skip = 0
                i += 1
        end = offset + len(rows)
        return UrlPage(total, rows, end if end < total and rows else None)

    def lookup_url(self, url: str) -> list[int]:
        """Dataset ids holding the canonical form of ``url`` (InvalidUrl if it has none).

        Rows are matched by their URL parts, never by url_key, so colliding keys cannot mix
        URLs up (the key is derived from the URL anyway).
        """
        from crawlstream.urls import canonicalize

        canon = canonicalize(url)
        did = self._v.domain_id(canon.domain)
        if did is None:
            return []
        found = []
        for ds in self._v.datasets_bitmap(did):
            k = self._key(canon.domain, ds)
            if k is None:
                continue
            _, _, fragmented, segs, _ = k
            candidates = segs if fragmented else self._candidate_segments(segs, canon.domain, canon.url)
            if any(self._segment_has(s, canon) for s in candidates):
                found.append(ds)
        return found

    def _first_url(self, s: Segment, domain: str) -> str:
        return self._rows(Segment(s.file_id, s.row_group, s.row_start, 1), domain, lookup=True)[0][1]

    def _candidate_segments(self, segs: list[Segment], domain: str, url: str) -> list[Segment]:
        """The one segment whose URL range can hold ``url`` (segments are in URL order)."""
        lo, hi = 0, len(segs)
        while lo < hi:  # last segment whose first url <= url
            mid = (lo + hi) >> 1
            if self._first_url(segs[mid], domain) <= url:
                lo = mid + 1
            else:
                hi = mid
        return [segs[lo - 1]] if lo else []

    def _segment_has(self, s: Segment, canon: Any) -> bool:
        return self._segment_row(s, canon) is not None

    def _segment_row(self, s: Segment, canon: Any) -> int | None:
        """Row number (in its row group) of ``canon``'s row inside segment ``s``, or None."""
        t = self._table(s, lookup=True).slice(s.row_start, s.row_count)
        hits = pc.indices_nonzero(pc.equal(t.column("path_query"), pa.scalar(canon.path_query)))
        if len(hits) == 0:
            return None  # one vectorised compare keeps a miss cheap
        want = (canon.scheme, host_prefix(canon.host, canon.domain), canon.port)
        parts = t.take(hits).select(["scheme", "host_prefix", "port"]).to_pylist()
        for hit, r in zip(hits.to_pylist(), parts, strict=True):
            if (r["scheme"], r["host_prefix"], r["port"]) == want:
                return s.row_start + int(hit)
        return None

    def url_extras(self, url: str, dataset_id: int) -> str | None:
        """The ``extras`` text of canonical ``url``'s row in ``dataset_id`` (the earliest indexed
        file's, as every answer), or None when no row holds it or its extras are null.

        Used for the alias map (``crawlstream.lake._aliases``): one dataset, one row.
        """
        from crawlstream.urls import canonicalize

        canon = canonicalize(url)
        k = self._key(canon.domain, dataset_id)
        if k is None:
            return None
        _, _, fragmented, segs, _ = k
        candidates = segs if fragmented else self._candidate_segments(segs, canon.domain, canon.url)
        for s in candidates:  # sorted by file id: the earliest file's row first
            row = self._segment_row(s, canon)
            if row is not None:
                value = self._extras(s).column(0)[row].as_py()
                return value if isinstance(value, str) else None
        return None

    def _extras(self, s: Segment) -> pa.Table:
        """The ``extras`` column of segment ``s``'s row group (its own cache entry: pages never read it)."""
        rel = self._v.files[s.file_id].path
        key = (rel, s.row_group, "extras")
        table = self._reader._lookups.get(key)
        if table is None:
            if self._cached_only:
                raise NotCached(rel)
            table = self._reader._row_group(rel, s.row_group, lookup=True, columns=("extras",))
        return table
