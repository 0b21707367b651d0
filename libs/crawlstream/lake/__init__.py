"""The Parquet lake: ``urls/dataset_id=<id>/domain_prefix=<hh>/part-*.parquet``.

Writer (:class:`LakeWriter`), schema and URL split, atomic publication, listing and
partition compaction. Readers of served answers go through ``crawlstream.index``.
"""

from crawlstream.lake._compact import compact_partition
from crawlstream.lake._files import (
    COMPACTED_PREFIX,
    REPLACES_KEY,
    LakeFile,
    is_compacted,
    list_lake_files,
    partition_dir,
    read_replaces,
    segment_rows,
)
from crawlstream.lake._schema import LAKE_COLUMNS, LAKE_SCHEMA, join_url, split_url
from crawlstream.lake._writer import LakeWriter, WrittenFile, build_table, write_lake_file

__all__ = [
    "COMPACTED_PREFIX",
    "LAKE_COLUMNS",
    "LAKE_SCHEMA",
    "REPLACES_KEY",
    "LakeFile",
    "LakeWriter",
    "WrittenFile",
    "build_table",
    "compact_partition",
    "is_compacted",
    "join_url",
    "list_lake_files",
    "partition_dir",
    "read_replaces",
    "segment_rows",
    "split_url",
    "write_lake_file",
]
