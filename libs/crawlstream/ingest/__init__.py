"""Bulk import of URL datasets (text, CSV, JSONL, Parquet; gzip/zstd) into the lake."""

from crawlstream.ingest._readers import FORMATS, Batch, check_input, detect_format, iter_batches, open_decompressed
from crawlstream.ingest._run import FileStats, IngestStats, ingest_files

__all__ = [
    "FORMATS",
    "Batch",
    "FileStats",
    "IngestStats",
    "check_input",
    "detect_format",
    "ingest_files",
    "iter_batches",
    "open_decompressed",
]
