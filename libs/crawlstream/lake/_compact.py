"""Lake compaction: merge one partition's files into one sorted, deduplicated file.

The merged file names the files it replaces in its Parquet metadata, so the switch is one
publication (a rename locally, one upload on S3): before it the old files are live, after it
they are hidden from listing (and deleted by ``crawlstream index gc`` once no kept index
version references them). Within equal URLs
the row of the earliest file (path order) is kept, the same rule readers apply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crawlstream.lake._files import as_store, partition_dir
from crawlstream.lake._schema import LAKE_SCHEMA, lake_urls
from crawlstream.lake._writer import WrittenFile, sort_dedupe, write_lake_file
from crawlstream.objectstore import ObjectStore

__all__ = ["compact_partition"]

logger = logging.getLogger(__name__)


def read_lake_table(store: ObjectStore, rel: str) -> pa.Table:
    """One whole lake file in ``LAKE_SCHEMA`` (through the store's file system on S3)."""
    if store.is_local:
        return pq.read_table(store.local_path(rel), schema=LAKE_SCHEMA)
    with store.open_input(rel) as fh:
        return store.retry.run(f"read {store.uri(rel)}", lambda: pq.read_table(fh, schema=LAKE_SCHEMA),
                               lambda e: isinstance(e, OSError))


def compact_partition(
    store: ObjectStore | Path,
    dataset_id: int,
    hh: str,
    rel_paths: Sequence[str],
    *,
    row_group_rows: int,
    zstd_level: int,
) -> WrittenFile:
    store = as_store(store)
    tables = [read_lake_table(store, p) for p in sorted(rel_paths)]
    table = pa.concat_tables(tables).combine_chunks()
    order, dropped = sort_dedupe(lake_urls(table), table.column("domain").combine_chunks())
    merged = table.take(order).replace_schema_metadata(None)
    rel, size = write_lake_file(
        merged,
        store,
        partition_dir(dataset_id, hh),
        row_group_rows=row_group_rows,
        zstd_level=zstd_level,
        replaces=sorted(rel_paths),
    )
    logger.info("compacted %d files of dataset %d/%s into %s (%d duplicates dropped)",
                len(rel_paths), dataset_id, hh, rel, dropped)
    path = store.local_path(rel) if store.is_local else store.uri(rel)
    return WrittenFile(dataset_id, hh, path, merged.num_rows, dropped, size, rel)
