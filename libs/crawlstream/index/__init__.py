"""The domain -> datasets -> URLs index: versioned sidecar files over the Parquet lake.

:class:`IndexBuilder` writes versions (full, incremental, compaction, gc);
:class:`IndexReader` serves them to the query API with a pinned version per request.
File layouts are in ``_formats`` (pure codecs).
"""

from crawlstream.index._builder import BuildResult, GcResult, IndexBuilder
from crawlstream.index._formats import FileEntry, Runs, Segment, decode_block, encode_block
from crawlstream.index._manifest import Manifest, ManifestConflict, VersionInfo, read_manifest
from crawlstream.index._reader import DatasetCount, IndexReader, NotCached, PinnedIndex, UrlItem, UrlPage, VersionGone

__all__ = [
    "BuildResult",
    "DatasetCount",
    "FileEntry",
    "GcResult",
    "IndexBuilder",
    "IndexReader",
    "Manifest",
    "ManifestConflict",
    "NotCached",
    "PinnedIndex",
    "Runs",
    "Segment",
    "UrlItem",
    "UrlPage",
    "VersionGone",
    "VersionInfo",
    "decode_block",
    "encode_block",
    "read_manifest",
]
