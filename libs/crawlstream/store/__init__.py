"""The content store: every page kept small and readable alone.

Append-only segments of independently decompressible zstd frames (fixed headers in skippable
frames, IIPC warc-zstd style; URL/title metadata inside the compressed frame), per-domain and
global trained dictionaries, tiers hot/warm/cold/archive with crash-safe recompression (cold and
archive pages grouped several per zstd frame, each still read alone) in bounded maintenance
steps that do not stall puts, compaction of dead space (ADR 018), a
url index on disk (one SQLite database per store root, ADR 036) with tombstones and tags,
checksums verified on every read and damaged regions quarantined.
See docs/decisions/002-content-store-layout.md for the layout and its measurements.
"""

from crawlstream.store._codec import (
    KIND_BODY,
    KIND_GROUP,
    KIND_GROUP_BZIP2,
    KIND_REF,
    SKIPPABLE_MAGIC,
    GroupHeader,
    Member,
    RecordHeader,
    ScanItem,
    TornRecord,
    UnsupportedFormat,
    content_hash,
    decode_log_records,
    decode_meta,
    decode_record_header,
    encode_group,
    encode_log_record,
    encode_meta,
    encode_record,
    member_checksum,
    scan_records,
)
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import GLOBAL_DOMAIN, DictInfo, DictionaryStore
from crawlstream.store._maintenance import StoreMaintainer
from crawlstream.store._model import TIERS, Entry, Location, Problem
from crawlstream.store._reports import RecompressReport, StoreStats, VerifyReport
from crawlstream.store._shards import ALL_CHECKSUMS, SHARDS, ShardedStore, open_store
from crawlstream.store._store import ContentStore
from crawlstream.store._warc import export_warc

__all__ = [
    "ALL_CHECKSUMS",
    "GLOBAL_DOMAIN",
    "KIND_BODY",
    "KIND_GROUP",
    "KIND_GROUP_BZIP2",
    "KIND_REF",
    "SHARDS",
    "SKIPPABLE_MAGIC",
    "TIERS",
    "ContentStore",
    "DictInfo",
    "DictionaryStore",
    "Entry",
    "GroupHeader",
    "Location",
    "Member",
    "Problem",
    "RecompressReport",
    "RecordHeader",
    "ScanItem",
    "ShardedStore",
    "StoreConfig",
    "StoreMaintainer",
    "StoreStats",
    "TornRecord",
    "UnsupportedFormat",
    "VerifyReport",
    "content_hash",
    "decode_log_records",
    "decode_meta",
    "decode_record_header",
    "encode_group",
    "encode_log_record",
    "encode_meta",
    "encode_record",
    "export_warc",
    "member_checksum",
    "open_store",
    "scan_records",
]
