"""Per-domain frontier files: the record codec, domain-name validation and the file store.

Redis-side metadata (offsets, ready queue) belongs to ``crawlstream.politeness``.
"""

from crawlstream.frontier._domains import LANE_SUFFIX, validate_domain
from crawlstream.frontier._marks import AppendMark, AppendMarks
from crawlstream.frontier._records import (
    HEADER_SIZE,
    MAX_PRIORITY,
    MAX_URL_BYTES,
    FrontierEntry,
    decode_header,
    decode_records,
    encode_header,
    encode_record,
    lane_priority,
    priority_from_real,
)
from crawlstream.frontier._store import FileState, FrontierFiles

__all__ = [
    "HEADER_SIZE",
    "LANE_SUFFIX",
    "MAX_PRIORITY",
    "MAX_URL_BYTES",
    "AppendMark",
    "AppendMarks",
    "FileState",
    "FrontierEntry",
    "FrontierFiles",
    "decode_header",
    "decode_records",
    "encode_header",
    "encode_record",
    "lane_priority",
    "priority_from_real",
    "validate_domain",
]
