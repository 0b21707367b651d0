"""Topic names: a fixed contract with external producers and consumers. Never retype them."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ALL_TOPICS",
    "CONTENT_STORED",
    "FETCH_REQUESTS",
    "FETCH_RESULTS",
    "IN_LAKE_HEADER",
    "REPLAY_SOURCES",
    "URLS_DISCOVERED",
    "URLS_FRONTIER",
    "URLS_RECORDS",
    "dlq_topic",
]

URLS_DISCOVERED: Final = "urls.discovered"
URLS_FRONTIER: Final = "urls.frontier"
FETCH_REQUESTS: Final = "fetch.requests"
FETCH_RESULTS: Final = "fetch.results"
CONTENT_STORED: Final = "content.stored"
URLS_RECORDS: Final = "urls.records"

ALL_TOPICS: Final = (
    URLS_DISCOVERED,
    URLS_FRONTIER,
    FETCH_REQUESTS,
    FETCH_RESULTS,
    CONTENT_STORED,
    URLS_RECORDS,
)

# The topics replay rebuilds from (the lake, the URL index and the content store's url index
# all derive from them): Kafka keeps them forever, the embedded log never deletes them. The
# others are work queues whose state lives elsewhere (Bloom snapshots, frontier files,
# Redis, the content store) and expire after bus.work_retention_hours.
REPLAY_SOURCES: Final = frozenset({CONTENT_STORED, URLS_RECORDS})


# Header of a urls.records message whose row `crawlstream ingest` has already written to the
# lake: the live Parquet sink skips it, replay writes it (the topic stays the whole record).
IN_LAKE_HEADER: Final = "crawlstream-in-lake"


def dlq_topic(topic: str) -> str:
    """The dead-letter topic for ``topic``: where undecodable messages go, with error headers."""
    return f"{topic}.dlq"
