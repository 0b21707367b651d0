"""The Parquet lake: ``urls/dataset_id=<id>/domain_prefix=<hh>/part-*.parquet`` in an object store
(a local directory or an S3 prefix, ``crawlstream.objectstore``).

Writer (:class:`LakeWriter`), schema and URL split, atomic publication, listing and
partition compaction; the alias map (redirect hops, raw forms) as rows of two reserved
datasets (``_aliases``). Readers of served answers go through ``crawlstream.index``.
"""

from crawlstream.lake._aliases import (
    ALIAS_DATASETS,
    MAX_REDIRECT_HOPS,
    RAW_FORMS_DATASET,
    REDIRECTS_DATASET,
    RawForm,
    RedirectChain,
    RedirectHop,
    extras_json,
    follow_redirects,
    is_alias_dataset,
    parse_raw_form,
    parse_redirect,
    raw_form_extras,
    redirect_extras,
)
from crawlstream.lake._compact import compact_partition, read_lake_table
from crawlstream.lake._files import (
    COMPACTED_PREFIX,
    REPLACES_KEY,
    LakeFile,
    as_store,
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
    split_urls,
)
from crawlstream.lake._writer import (
    LAKE_ZSTD_LEVEL,
    LakeWriter,
    WriteTotals,
    WrittenFile,
    build_table,
    parquet_options,
    write_lake_file,
)

__all__ = [
    "ALIAS_DATASETS",
    "COMPACTED_PREFIX",
    "DERIVED_SQL",
    "LAKE_COLUMNS",
    "LAKE_SCHEMA",
    "LAKE_ZSTD_LEVEL",
    "MAX_REDIRECT_HOPS",
    "RAW_FORMS_DATASET",
    "REDIRECTS_DATASET",
    "REPLACES_KEY",
    "LakeFile",
    "LakeWriter",
    "RawForm",
    "RedirectChain",
    "RedirectHop",
    "WriteTotals",
    "WrittenFile",
    "as_store",
    "build_table",
    "compact_partition",
    "derive_url_key",
    "derive_url_keys",
    "extras_json",
    "follow_redirects",
    "host_prefix",
    "is_alias_dataset",
    "is_compacted",
    "join_url",
    "lake_urls",
    "list_lake_files",
    "parquet_options",
    "parse_raw_form",
    "parse_redirect",
    "partition_dir",
    "raw_form_extras",
    "read_lake_table",
    "read_replaces",
    "redirect_extras",
    "register_duckdb",
    "segment_rows",
    "split_url",
    "split_urls",
    "write_lake_file",
]
