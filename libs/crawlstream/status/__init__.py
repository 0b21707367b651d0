"""What the status page (``/status`` of the query API) shows, read from what each part of the
pipeline already records, without opening anything another process owns. ADR 020."""

from crawlstream.status._collect import TOP_DOMAINS, OffsetsSource, StatusCollector
from crawlstream.status._embedded_offsets import EmbeddedOffsets
from crawlstream.status._store_stats import STORE_STATS_FILE, read_store_stats, save_store_stats
from crawlstream.status._topk import TopCounts

__all__ = [
    "STORE_STATS_FILE",
    "TOP_DOMAINS",
    "EmbeddedOffsets",
    "OffsetsSource",
    "StatusCollector",
    "TopCounts",
    "read_store_stats",
    "save_store_stats",
]
