"""``IndexReader``: serve domain -> datasets -> URLs from one pinned index version.

Contract for callers (the query API):

* ``with reader.pin() as idx:`` — everything done through ``idx`` reads one version, even
  if ``manifest.json`` flips meanwhile. Locally the version's files stay on disk while pinned
  (a shared ``flock`` on its ``PIN`` file, which ``gc`` respects). ``pin(version=V)`` serves a
  version that is no longer current while the manifest still lists it (a paging client keeps
  the version it started on); one no longer listed raises :class:`VersionGone`.
* Files are opened by the exact paths the manifest lists; nothing is listed per request.
  Local index files are memory-mapped; on S3 (``index.uri``/``lake.uri``) the manifest is
  re-read at most every ``manifest_poll_s``, small files are held in memory and each postings
  block is one ranged GET (``_storage``), every read verified against the manifest's CRC32s
  (:class:`ChecksumMismatch`, never a wrong answer). Decoded postings blocks sit in an LRU
  bounded by bytes; Parquet footers (``ParquetFile``) in a small LRU, decoded row groups in
  one bounded by bytes; Parquet page checksums are verified. A page reads only the row groups
  covering ``[offset, offset+limit)``, found from per-segment row counts, so a deep offset
  costs the same as the first page. A ``cached_only`` pin never reads Parquet, nor anything
  from S3 (:class:`NotCached`).
* Answers follow the dedupe rule: one row per (dataset_id, url); across files the row from
  the lowest file id (earliest indexed) wins. URLs of a (domain, dataset) are ordered by URL.
* Thread-safe.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.index._formats import Segment, inline_segments
from crawlstream.index._manifest import MANIFEST_NAME, Manifest, VersionInfo
from crawlstream.index._storage import Breaker, LocalFiles, Lru, NotCached, RangedFile, RemoteFiles, VersionGone
from crawlstream.index._version import Version, block_weight
from crawlstream.lake import host_prefix, segment_rows
from crawlstream.objectstore import ObjectStore, RetryPolicy, parse_location

__all__ = ["DatasetCount", "IndexReader", "NotCached", "PinnedIndex", "UrlItem", "UrlPage", "VersionGone"]

logger = logging.getLogger(__name__)

ROW_COLUMNS = ["scheme", "host_prefix", "port", "path_query", "ts"]
DICT_COLUMNS = ["scheme", "host_prefix"]
MANIFEST_REL = f"index/{MANIFEST_NAME}"
_PASS_THROUGH = (StorageUnavailable, FileNotFoundError, VersionGone, NotCached)


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


def _local(root: Path | str) -> ObjectStore:
    return ObjectStore(parse_location(root), pafs.LocalFileSystem())


class IndexReader:
    """Opens the current index version (``index/manifest.json`` of the index location) and hands out pins.

    ``IndexReader(root)`` reads a local directory; ``index_store``/``lake_store`` (from
    ``open_objects``, see :meth:`from_settings`) may be S3 prefixes."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        index_store: ObjectStore | None = None,
        lake_store: ObjectStore | None = None,
        parquet_files_cached: int = 256,
        row_groups_cached: int = 4096,
        row_group_cache_bytes: int = 128 << 20,
        postings_cache_bytes: int = 256 << 20,
        manifest_poll_s: float = 1.0,
        whole_file_max_bytes: int = 16 << 20,
        idle_versions_kept: int = 2,
    ) -> None:
        if index_store is None:
            if root is None:
                raise ValueError("IndexReader needs a root directory or an index store")
            index_store = _local(root)
        self._index = index_store
        self._lake = lake_store if lake_store is not None else (_local(root) if root is not None else index_store)
        self.remote = not index_store.is_local
        self.root = index_store.local_path("") if not self.remote else None
        self._lake_root = str(self._lake.local_path("")) if self._lake.is_local else ""
        self._manifest_path = "" if self.root is None else str(self.root / MANIFEST_REL)  # stat'ed per pin
        self.manifest_poll_s = manifest_poll_s
        self.whole_file_max_bytes = whole_file_max_bytes
        self.idle_versions_kept = idle_versions_kept if self.remote else 0  # locally: unpin at once (gc)
        self.breaker = Breaker()
        self._lock = threading.Lock()
        self._manifest: Manifest | None = None
        self._manifest_key: Any = None  # local: (inode, mtime, size); S3: the ETag
        self._next_poll = 0.0
        self._polling = False
        self._current: Version | None = None
        self._versions: dict[str, Version] = {}
        self._idle: OrderedDict[str, Version] = OrderedDict()  # S3: unpinned old versions kept open
        self._blocks: Lru[Any, Any] = Lru(1 << 30, budget=postings_cache_bytes, weigh=block_weight)
        self._parquet: Lru[str, tuple[pq.ParquetFile, threading.Lock]] = Lru(parquet_files_cached)
        self._row_groups: Lru[tuple[Any, ...], pa.Table] = Lru(
            row_groups_cached, budget=row_group_cache_bytes, weigh=lambda t: t.nbytes
        )
        # URL lookups read a row group of every dataset of a domain: in a cache of their own (a
        # quarter of the pages' budget) they cannot evict the row groups pages are served from
        self._lookups: Lru[tuple[Any, ...], pa.Table] = Lru(
            row_groups_cached, budget=row_group_cache_bytes // 4, weigh=lambda t: t.nbytes
        )
        self._pairs: Lru[tuple[str, int, int], tuple[int, bool, list[Segment], list[int]] | None] = Lru(4096)
        self._merged: Lru[tuple[str, int, int], list[tuple[int, str, int | None]]] = Lru(16)

    @classmethod
    def from_settings(cls, settings: Any) -> IndexReader:
        """The reader of ``index.uri`` / ``lake.uri``. On S3 a read gives up after
        min(``s3.deadline_s``, ``api.request_timeout_s``): a request fails (503) rather than outlive
        its own timeout."""
        from crawlstream.objectstore import index_location, lake_location, open_objects

        index = open_objects(index_location(settings), settings.s3)
        lake = open_objects(lake_location(settings), settings.s3)
        deadline = min(settings.s3.deadline_s, settings.api.request_timeout_s)
        for store in (index, lake):
            if not store.is_local:
                store.retry = RetryPolicy(deadline_s=deadline)
        return cls(
            index_store=index,
            lake_store=lake,
            row_groups_cached=settings.index.row_groups_cached,
            row_group_cache_bytes=settings.index.row_group_cache_mb << 20,
            postings_cache_bytes=settings.index.postings_cache_mb << 20,
            manifest_poll_s=settings.index.manifest_poll_s,
        )

    @property
    def index_store(self) -> ObjectStore:
        return self._index

    @property
    def lake_store(self) -> ObjectStore:
        return self._lake

    # -- versions ----------------------------------------------------------------------

    def _open(self, info: VersionInfo) -> Version:
        if self.root is not None:
            return Version(LocalFiles(self.root, info), info, self._blocks)
        files = RemoteFiles(self._index, info, cache=self._blocks, breaker=self.breaker,
                            whole_max=self.whole_file_max_bytes)
        return Version(files, info, self._blocks)

    def _install(self, manifest: Manifest, version: Version, key: Any) -> Version:
        """Make ``version`` current (under the lock); returns the instance now serving it."""
        existing = self._versions.get(version.version)
        if existing is not None and existing is not version:
            version.close()  # another thread opened it meanwhile
            version = existing
        self._versions[version.version] = version
        self._idle.pop(version.version, None)
        self._manifest = manifest
        self._manifest_key = key
        if self._current is not None and self._current is not version:
            self._current.current = False
            self._maybe_close(self._current)
        if self._current is not version:
            logger.info("index reader now serves version %s", version.version)
        version.current = True
        self._current = version
        listed = {i.version for i in manifest.versions}
        for name in [n for n in self._idle if n not in listed]:
            self._close_idle(name)
        return version

    def _refresh_local(self) -> Version:
        """The current version, re-reading manifest.json only when its inode/mtime changed (under the lock)."""
        path = self._manifest_path
        for _attempt in range(3):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise StorageUnavailable(
                    f"no index at {path}: run `crawlstream index build` first"
                ) from None
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if key == self._manifest_key and self._current is not None:
                return self._current
            manifest = Manifest.from_bytes(Path(path).read_bytes())
            info = manifest.current()
            try:
                version = self._versions.get(info.version) or self._open(info)
            except FileNotFoundError:
                continue  # gc removed it between our read and open: the manifest has moved on
            return self._install(manifest, version, key)
        raise StorageUnavailable(f"index manifest {path} keeps naming removed versions; check the builder")

    def _refresh_remote(self, cached_only: bool) -> None:
        """Poll the manifest on S3 when due (at most every ``manifest_poll_s``), outside the lock:
        requests meanwhile keep the current version. A failed poll keeps serving it too."""
        with self._lock:
            if self._current is not None and (time.monotonic() < self._next_poll or self._polling):
                return
            if cached_only:
                raise NotCached("index manifest poll due")
            self._polling = True
        try:
            self._poll()
        except (StorageUnavailable, ChecksumMismatch) as exc:
            if self._current is None:
                raise
            logger.warning("index manifest poll failed; still serving version %s: %s", self._current.version, exc)
        finally:
            with self._lock:
                self._polling = False
                self._next_poll = time.monotonic() + self.manifest_poll_s

    def _poll(self) -> None:
        for _attempt in range(3):
            found = self.breaker.call(lambda: self._index.read_tagged(MANIFEST_REL))
            if found is None:
                raise StorageUnavailable(
                    f"no index at {self._index.uri(MANIFEST_REL)}: run `crawlstream index build` first"
                )
            data, tag = found
            if tag == self._manifest_key and self._current is not None:
                return
            manifest = Manifest.from_bytes(data)
            info = manifest.current()
            with self._lock:
                version = self._versions.get(info.version)
            try:
                version = version or self._open(info)
            except (FileNotFoundError, VersionGone):
                continue  # gc removed it between our read and open: the manifest has moved on
            with self._lock:
                self._install(manifest, version, tag)
            return
        raise StorageUnavailable(f"index manifest {self._index.uri(MANIFEST_REL)} keeps naming removed versions")

    def _maybe_close(self, v: Version) -> None:
        """Close an unpinned old version (under the lock); on S3 the last few stay open while the
        manifest lists them (paging clients come back to them; reopening costs several GETs)."""
        if v.refs or v.current:
            return
        listed = self._manifest is not None and any(i.version == v.version for i in self._manifest.versions)
        if listed and self.idle_versions_kept:
            self._idle[v.version] = v
            self._idle.move_to_end(v.version)
            while len(self._idle) > self.idle_versions_kept:
                self._close_idle(next(iter(self._idle)))
            return
        self._idle.pop(v.version, None)
        self._versions.pop(v.version, None)
        v.close()

    def _close_idle(self, name: str) -> None:
        v = self._idle.pop(name)
        if v.refs == 0 and not v.current:
            self._versions.pop(name, None)
            v.close()

    def pin(self, *, cached_only: bool = False, version: str | None = None) -> PinnedIndex:
        """The current version (or ``version``, if the manifest still lists it), pinned.
        ``cached_only``: the pin raises :class:`NotCached` instead of reading a row group that is
        not cached, or anything from S3 (the API answers such a request on the event loop, where
        a read would block it, and retries a miss on its thread pool)."""
        if version is not None:
            return self._pin_version(version, cached_only)
        if self.remote:
            self._refresh_remote(cached_only)
            with self._lock:
                v = self._current
                if v is None:
                    raise StorageUnavailable(f"no index version is open from {self._index}")
                v.refs += 1
        else:
            with self._lock:
                v = self._refresh_local()
                v.refs += 1
        return PinnedIndex(self, v, cached_only)

    def _pin_version(self, name: str, cached_only: bool) -> PinnedIndex:
        """Pin version ``name`` if the manifest lists it (opening it if needed), else VersionGone."""
        self.pin(cached_only=cached_only).release()  # the manifest as fresh as for any request
        for attempt in range(3):
            with self._lock:
                manifest = self._manifest
                info = next((i for i in manifest.versions if i.version == name), None) if manifest else None
                v = self._versions.get(name) if info is not None else None
                if v is not None:
                    v.refs += 1
                    self._idle.pop(name, None)
                    return PinnedIndex(self, v, cached_only)
            if cached_only:
                raise NotCached(f"index version {name} is not open")
            if info is None:
                if attempt == 0 and self.remote:  # it may be newer than our last poll (another replica)
                    self._poll()
                    continue
                break
            try:
                opened = self._open(info)
            except (FileNotFoundError, VersionGone):
                break
            with self._lock:
                if name in self._versions:  # another request opened it meanwhile
                    opened.close()
                    continue
                opened.current = False
                opened.refs += 1
                self._versions[name] = opened
                return PinnedIndex(self, opened, cached_only)
        current = self._current.version if self._current is not None else "none"
        raise VersionGone(f"index version {name} is no longer kept (now serving {current}): "
                          "start over from the first page without a version")

    def _unpin(self, v: Version) -> None:
        with self._lock:
            v.refs -= 1
            self._maybe_close(v)

    def close(self) -> None:
        with self._lock:
            for v in list(self._versions.values()):
                v.current = False
                self._idle.pop(v.version, None)
                if v.refs == 0:
                    self._versions.pop(v.version, None)
                    v.close()
            self._current = None
            self._manifest_key = None
            self._blocks.clear()

    # -- lake access -------------------------------------------------------------------

    def _open_parquet(self, rel: str) -> tuple[pq.ParquetFile, threading.Lock]:
        """An open lake file. Locally an ``OSFile`` (no filesystem resolution); on S3 a
        :class:`RangedFile` with ``pre_buffer`` (a row group's columns in one GET). The few-valued
        string columns stay dictionaries (16k rows decode to 16k indices, not 16k strings); page
        checksums are verified where the writer recorded them."""
        if self._lake.is_local:
            source: Any = pa.OSFile(os.path.join(self._lake_root, rel))
            pre_buffer = False
        else:
            handle = self.breaker.call(lambda: self._lake.open_input(rel))
            source, pre_buffer = RangedFile(self._lake, handle, rel, self.breaker), True
        pf = pq.ParquetFile(source, pre_buffer=pre_buffer, read_dictionary=DICT_COLUMNS,
                            page_checksum_verification=True)
        return pf, threading.Lock()

    def _row_group(
        self, rel: str, rg: int, *, lookup: bool = False, columns: tuple[str, ...] | None = None
    ) -> pa.Table:
        """A decoded row group (``ROW_COLUMNS``, or ``columns``: cached under their own key).
        A file that fails to decode (a page checksum, a damaged footer) is opened and read once
        more (a torn network read), then raises ``ChecksumMismatch``: never wrong rows."""
        def load() -> pa.Table:
            for attempt in (0, 1):
                try:
                    pf, lock = self._parquet.get_or_load(rel, lambda: self._open_parquet(rel))
                    with lock:
                        return pf.read_row_group(rg, columns=list(columns or ROW_COLUMNS), use_threads=False)
                except _PASS_THROUGH:
                    raise
                except (OSError, pa.ArrowException, ChecksumMismatch) as exc:
                    self._parquet.pop(rel)
                    if attempt:
                        logger.error("lake file %s row group %d cannot be decoded: %s", self._lake.uri(rel), rg, exc)
                        raise ChecksumMismatch(f"lake file {self._lake.uri(rel)} row group {rg} is corrupt ({exc}); "
                                               "restore or rewrite the file") from exc
                    logger.warning("lake file %s row group %d failed to decode; reading it again", rel, rg)
            raise AssertionError("unreachable")

        key: tuple[Any, ...] = (rel, rg) if columns is None else (rel, rg, *columns)
        return (self._lookups if lookup else self._row_groups).get_or_load(key, load)


class PinnedIndex:
    """One version of the index, fixed for the life of this object (a request)."""

    def __init__(self, reader: IndexReader, version: Version, cached_only: bool = False) -> None:
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
        counts = self._v.counts(domain, domain_id, self._cached_only)
        return [DatasetCount(ds, counts.get(ds, 0)) for ds in self._v.datasets_bitmap(domain_id, self._cached_only)]

    def _key(self, domain: str, dataset_id: int) -> tuple[int, int, bool, list[Segment], list[int]] | None:
        did = self._v.domain_id(domain)
        if did is None:
            return None
        v = self._v

        def load() -> tuple[int, bool, list[Segment], list[int]] | None:
            pair = v.pair(domain, did, dataset_id, self._cached_only)
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
        for ds in self._v.datasets_bitmap(did, self._cached_only):
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
