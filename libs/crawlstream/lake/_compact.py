"""Lake compaction: merge one partition's files into one sorted, deduplicated file.

The merged file names the files it replaces in its Parquet metadata, so the switch is one
rename: before it the old files are live, after it they are hidden from listing (and deleted
by ``crawlstream index gc`` once no kept index version references them). Within equal URLs
the row of the earliest file (path order) is kept, the same rule readers apply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crawlstream.lake._files import partition_dir
from crawlstream.lake._schema import LAKE_SCHEMA, lake_urls
from crawlstream.lake._writer import WrittenFile, sort_dedupe, write_lake_file

__all__ = ["compact_partition"]

logger = logging.getLogger(__name__)


def compact_partition(
    root: Path,
    dataset_id: int,
    hh: str,
    rel_paths: Sequence[str],
    *,
    row_group_rows: int,
    zstd_level: int,
) -> WrittenFile:
    tables = [pq.read_table(root / p, schema=LAKE_SCHEMA) for p in sorted(rel_paths)]
    table = pa.concat_tables(tables).combine_chunks()
    order, dropped = sort_dedupe(lake_urls(table), table.column("domain").combine_chunks())
    merged = table.take(order).replace_schema_metadata(None)
    path, size = write_lake_file(
        merged,
        partition_dir(root, dataset_id, hh),
        row_group_rows=row_group_rows,
        zstd_level=zstd_level,
        replaces=sorted(rel_paths),
    )
    logger.info("compacted %d files of dataset %d/%s into %s (%d duplicates dropped)",
                len(rel_paths), dataset_id, hh, path, dropped)
    return WrittenFile(dataset_id, hh, path, merged.num_rows, dropped, size)
