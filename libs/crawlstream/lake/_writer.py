"""``LakeWriter``: buffers rows per (dataset_id, hh) and publishes sorted, deduplicated files.

Contract for callers (the ``crawlstream ingest`` command, the parquet-sink service):

* ``add*`` only buffers; rows become durable when a file is published: on ``flush()``,
  ``close()``, when a partition reaches ``file_max_rows``, or when all buffers together pass
  ``buffer_max_rows`` (the largest partition is flushed). A service commits its consumer
  offsets only after ``flush()`` returned.
* Every file is sorted by (domain, url) and holds each (dataset_id, url) once (first row
  kept). Duplicates *across* files (a replay, two ingests) are removed by readers and by
  ``crawlstream index compact``; see docs/decisions/004-lake-row-groups.md.
* Files appear whole (``ObjectStore.writing``: locally temp name, fsync, rename, fsync dir; on
  S3 a local spool file uploaded after it is complete, never a half object at a final key).
* Parquet page checksums are written (CRC32 per page), so a reader verifies what it got from
  object storage; they cost ~0.1% of the lake's bytes (ADR 029).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crawlstream.lake._files import REPLACES_KEY, as_store, partition_dir
from crawlstream.lake._schema import LAKE_SCHEMA, split_urls
from crawlstream.objectstore import ObjectStore
from crawlstream.settings import LakeSettings

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["LAKE_ZSTD_LEVEL", "LakeWriter", "WriteTotals", "WrittenFile", "parquet_options", "write_lake_file"]

logger = logging.getLogger(__name__)

# Encodings measured in docs/decisions/007-lake-derived-columns.md and 010-lake-index-bytes.md:
# dictionary + RLE for the low-cardinality columns (rows are sorted, so runs are long), front
# coding for the sorted paths (PLAIN loses over the whole lake even at zstd 19: 11.52 vs 11.47).
DICTIONARY_COLUMNS = ["domain", "scheme", "host_prefix", "port"]
COLUMN_ENCODING = {"path_query": "DELTA_BYTE_ARRAY", "ts": "DELTA_BINARY_PACKED", "extras": "PLAIN"}
LAKE_ZSTD_LEVEL: int = LakeSettings().zstd_level
"""Level of the files that stay: ``crawlstream ingest`` and compaction (the sink writes faster)."""
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9.]")  # a file name's tag: no '-' or '/' of its own
_UNCOMPRESSED = ("scheme", "port")  # a page of a few bytes: a zstd frame would add ~10 to it


def parquet_options(zstd_level: int) -> dict[str, Any]:
    """``pq.write_table`` arguments (codecs, encodings, statistics) of a lake file."""
    return {
        "compression": {c: "none" if c in _UNCOMPRESSED else "zstd" for c in LAKE_SCHEMA.names},
        "compression_level": {c: zstd_level for c in LAKE_SCHEMA.names if c not in _UNCOMPRESSED},
        "use_dictionary": DICTIONARY_COLUMNS,
        "column_encoding": COLUMN_ENCODING,
        "write_statistics": ["domain"],  # lets DuckDB & co. prune row groups by domain
        "write_page_checksum": True,  # readers of object storage verify pages (ADR 029)
    }


@dataclass(frozen=True, slots=True)
class WrittenFile:
    dataset_id: int
    hh: str
    path: Path | str  # a local lake: the file's path; on S3: its s3:// URI
    num_rows: int
    duplicates_dropped: int
    size_bytes: int
    rel: str = ""  # relative to the lake's location (urls/...)


@dataclass(slots=True)
class WriteTotals:
    """What a writer has published so far: counts, not a list (a sink runs for months)."""

    files: int = 0
    rows: int = 0
    bytes: int = 0
    duplicates_dropped: int = 0


@dataclass(slots=True)
class _Buffer:
    urls: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    ts_ms: list[int | None] = field(default_factory=list)
    extras: list[str | None] = field(default_factory=list)


def _hh(domain: str) -> str:
    from crawlstream.urls import domain_prefix

    return domain_prefix(domain)


def write_lake_file(
    table: pa.Table,
    store: ObjectStore | Path,
    directory: str,
    *,
    row_group_rows: int,
    zstd_level: int,
    replaces: Sequence[str] = (),
    tag: str = "",
    name: str = "",
) -> tuple[str, int]:
    """Publish ``table`` (already in lake order and schema) whole under ``directory`` (relative
    to the store); return (its relative path, size). ``tag`` names the writer in the file name
    (``part-<ms>-<tag>-<random>``: which sink member wrote it); the random part alone keeps two
    writers' names apart. ``name`` replaces that generated name: a job that names its files
    deterministically (``crawlstream spark-ingest``) overwrites them when it runs again."""
    import json

    store = as_store(store)
    kind = "part-c-" if replaces else "part-"  # compaction output is recognisable by name
    if name and not (name.startswith("part-") and name.endswith(".parquet") and "/" not in name
                     and name.startswith("part-c-") == bool(replaces)):
        raise ValueError(f"lake file name {name!r}: expected part-*.parquet (part-c-* only for compaction)")
    middle = f"{_TAG_UNSAFE.sub('_', tag)[:40]}-" if tag else ""
    name = name or f"{kind}{int(time.time() * 1000):013d}-{middle}{uuid.uuid4().hex[:12]}.parquet"
    rel = f"{directory}/{name}"
    if replaces:
        table = table.replace_schema_metadata({REPLACES_KEY: json.dumps(list(replaces)).encode()})
    with store.writing(rel) as staging:
        pq.write_table(
            table,
            staging,
            row_group_size=row_group_rows,
            **parquet_options(zstd_level),
            # The Arrow schema costs ~700 B per file (many files are small); the Parquet types map
            # back to LAKE_SCHEMA. Compacted files need it: it carries `replaces`.
            store_schema=bool(replaces),
        )
        size = staging.stat().st_size
    return rel, size


def sort_dedupe(urls: pa.Array, domains: pa.Array) -> tuple[pa.Array, int]:
    """Indices putting rows in (domain, url) order, first of each equal url kept; and #dropped."""
    t = pa.table({"domain": domains, "url": urls})
    order = pc.sort_indices(t, sort_keys=[("domain", "ascending"), ("url", "ascending")])
    sorted_urls = urls.take(order)
    n = len(sorted_urls)
    if n < 2:
        return order, 0
    differs = pc.not_equal(sorted_urls.slice(1), sorted_urls.slice(0, n - 1))
    keep = pa.concat_arrays([pa.array([True]), differs])
    kept = order.filter(keep)
    return kept, n - len(kept)


class LakeWriter:
    """Write canonical URL rows into the lake; see the module docstring for the contract."""

    def __init__(
        self,
        root: ObjectStore | Path,
        *,
        config: LakeSettings | None = None,
        on_file: Callable[[WrittenFile], None] | None = None,
        io_threads: int = 8,
        file_tag: str = "",
    ) -> None:
        """``config``: the ``lake.*`` settings (taken whole; their defaults when None): this writer
        reads ``row_group_rows``, ``file_max_rows``, ``buffer_max_rows`` and ``zstd_level``.
        ``file_tag``: the writer's name in its files' names (a sink member's staging name).
        ``root``: the lake's store (``open_objects(lake_location(settings), settings.s3)``), or a
        local directory."""
        self.store = as_store(root)
        self.config = config if config is not None else LakeSettings()
        self.on_file = on_file
        self.io_threads = io_threads
        self.file_tag = file_tag
        self._buffers: dict[tuple[int, str], _Buffer] = {}
        self._buffered = 0
        self._hh_cache: dict[str, str] = {}
        self.totals = WriteTotals()

    @classmethod
    def from_settings(cls, settings: Settings, *, zstd_level: int | None = None, **kwargs: Any) -> LakeWriter:
        """A writer with the lake settings; ``zstd_level`` replaces ``lake.zstd_level`` (the sink's
        ``lake.sink_zstd_level``); ``kwargs``: ``on_file``, ``io_threads``, ``file_tag``."""
        config = settings.lake if zstd_level is None else replace(settings.lake, zstd_level=zstd_level)
        from crawlstream.objectstore import lake_location, open_objects

        return cls(open_objects(lake_location(settings), settings.s3), config=config, **kwargs)

    def __enter__(self) -> LakeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()

    @property
    def buffered_rows(self) -> int:
        return self._buffered

    def add(
        self,
        dataset_id: int,
        url: str,
        domain: str,
        ts_ms: int | None = None,
        extras: str | None = None,
    ) -> None:
        """Buffer one row. ``url`` must be canonical and ``domain`` its registered domain."""
        hh = self._hh_cache.get(domain)
        if hh is None:
            if len(self._hh_cache) > 1_000_000:
                self._hh_cache.clear()
            hh = self._hh_cache[domain] = _hh(domain)
        buf = self._buffers.get((dataset_id, hh))
        if buf is None:
            buf = self._buffers[(dataset_id, hh)] = _Buffer()
        buf.urls.append(url)
        buf.domains.append(domain)
        buf.ts_ms.append(ts_ms)
        buf.extras.append(extras)
        self._buffered += 1
        if len(buf.urls) >= self.config.file_max_rows:
            self._flush_partition((dataset_id, hh))
        elif self._buffered >= self.config.buffer_max_rows:
            biggest = max(self._buffers, key=lambda k: len(self._buffers[k].urls))
            self._flush_partition(biggest)

    def add_canonical(
        self, dataset_id: int, canonical: Any, ts_ms: int | None = None, extras: str | None = None
    ) -> None:
        """Buffer a ``crawlstream.urls.CanonicalUrl``."""
        self.add(dataset_id, canonical.url, canonical.domain, ts_ms, extras)

    def flush(self) -> list[WrittenFile]:
        """Publish every buffered partition; return the files written by this call. If a file
        cannot be published (``StorageUnavailable``) its rows stay buffered and the error is
        raised after the others were published: a caller never forgets rows it did not publish."""
        written: list[WrittenFile] = []
        # Sorting is CPU (GIL) bound; writing + fsync is I/O bound and overlaps in threads,
        # which matters because small datasets spread over 256 prefixes make many small files.
        with ThreadPoolExecutor(max_workers=self.io_threads) as pool:
            pending = []
            for key in sorted(self._buffers):
                buf = self._buffers.pop(key)
                if not buf.urls:
                    continue
                self._buffered -= len(buf.urls)
                table, dropped = build_table(buf.urls, buf.domains, buf.ts_ms, buf.extras)
                fut = pool.submit(self._write_file, table, key)
                pending.append((key, buf, table.num_rows, dropped, fut))
            failed: BaseException | None = None
            for (dataset_id, hh), buf, rows, dropped, fut in pending:
                try:
                    rel, size = fut.result()
                except Exception as exc:  # storage down: keep the rows, a later flush publishes them
                    self._buffers[(dataset_id, hh)] = buf
                    self._buffered += len(buf.urls)
                    failed = failed or exc
                    continue
                written.append(self._record(self._written(dataset_id, hh, rel, rows, dropped, size)))
            if failed is not None:
                raise failed
        return written

    def _record(self, written: WrittenFile) -> WrittenFile:
        logger.debug("lake file %s: %d rows (%d duplicates dropped)", written.path, written.num_rows,
                     written.duplicates_dropped)
        totals = self.totals
        totals.files += 1
        totals.rows += written.num_rows
        totals.bytes += written.size_bytes
        totals.duplicates_dropped += written.duplicates_dropped
        if self.on_file is not None:
            self.on_file(written)
        return written

    def close(self) -> None:
        self.flush()

    def _flush_partition(self, key: tuple[int, str]) -> None:
        buf = self._buffers.pop(key, None)
        if buf is None or not buf.urls:
            return
        dataset_id, hh = key
        self._buffered -= len(buf.urls)
        table, dropped = build_table(buf.urls, buf.domains, buf.ts_ms, buf.extras)
        try:
            rel, size = self._write_file(table, key)
        except Exception:
            self._buffers[key] = buf  # kept for a later flush (see ``flush``)
            self._buffered += len(buf.urls)
            raise
        self._record(self._written(dataset_id, hh, rel, table.num_rows, dropped, size))

    def _written(self, dataset_id: int, hh: str, rel: str, rows: int, dropped: int, size: int) -> WrittenFile:
        path = self.store.local_path(rel) if self.store.is_local else self.store.uri(rel)
        return WrittenFile(dataset_id, hh, path, rows, dropped, size, rel)

    def _write_file(self, table: pa.Table, key: tuple[int, str]) -> tuple[str, int]:
        return write_lake_file(
            table,
            self.store,
            partition_dir(*key),
            row_group_rows=self.config.row_group_rows,
            zstd_level=self.config.zstd_level,
            tag=self.file_tag,
        )


def _column(values: Sequence[Any] | pa.Array | pa.ChunkedArray, kind: pa.DataType) -> pa.Array:
    """An Arrow column from Python values or from an Arrow column (taken as is: no round trip)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], kind)
    if isinstance(values, pa.Array):
        return values if values.type == kind else values.cast(kind)
    return pa.array(values, kind)


def build_table(
    urls: Sequence[str] | pa.Array | pa.ChunkedArray,
    domains: Sequence[str] | pa.Array | pa.ChunkedArray,
    ts_ms: Sequence[int | None] | pa.Array | pa.ChunkedArray,
    extras: Sequence[str | None] | pa.Array | pa.ChunkedArray,
) -> tuple[pa.Table, int]:
    """Rows -> a lake-ordered, deduplicated table in ``LAKE_SCHEMA``; and the #duplicates dropped.

    ``urls`` are canonical and ``domains`` their registered domains (ValueError otherwise); each
    column a Python sequence or an Arrow column (Spark's write tasks hand Arrow over as it is).
    """
    domain_arr = _column(domains, pa.string())
    url_arr = _column(urls, pa.string())
    order, dropped = sort_dedupe(url_arr, domain_arr)
    sorted_domains = domain_arr.take(order)
    schemes, prefixes, ports, paths = split_urls(url_arr.take(order), sorted_domains)
    table = pa.table(
        [
            sorted_domains,
            schemes,
            prefixes,
            ports,
            paths,
            _column(ts_ms, pa.int64()).take(order).cast(pa.timestamp("ms")),
            _column(extras, pa.string()).take(order),
        ],
        schema=LAKE_SCHEMA,
    )
    return table, dropped
