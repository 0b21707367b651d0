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
from crawlstream.lake._schema import (
    DERIVED_SQL,
    LAKE_COLUMNS,
    LAKE_SCHEMA,
    derive_url_key,
    derive_url_keys,
    host_prefix,
    join_url,
    lake_urls,
    register_duckdb,
    split_url,
)
from crawlstream.lake._writer import (
    LAKE_ZSTD_LEVEL,
    LakeWriter,
    WrittenFile,
    build_table,
    parquet_options,
    write_lake_file,
)

__all__ = [
    "COMPACTED_PREFIX",
    "DERIVED_SQL",
    "LAKE_COLUMNS",
    "LAKE_SCHEMA",
    "LAKE_ZSTD_LEVEL",
    "REPLACES_KEY",
    "LakeFile",
    "LakeWriter",
    "WrittenFile",
    "build_table",
    "compact_partition",
    "derive_url_key",
    "derive_url_keys",
    "host_prefix",
    "is_compacted",
    "join_url",
    "lake_urls",
    "list_lake_files",
    "parquet_options",
    "partition_dir",
    "read_replaces",
    "register_duckdb",
    "segment_rows",
    "split_url",
    "write_lake_file",
]
