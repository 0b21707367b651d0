"""What the status page (``/status`` of the query API) shows, read from what each part of the
pipeline already records, without opening anything another process owns. ADR 020."""

from crawlstream.status._collect import TOP_DOMAINS, OffsetsSource, StatusCollector
from crawlstream.status._embedded_offsets import EmbeddedOffsets
from crawlstream.status._topk import TopCounts

__all__ = ["TOP_DOMAINS", "EmbeddedOffsets", "OffsetsSource", "StatusCollector", "TopCounts"]
