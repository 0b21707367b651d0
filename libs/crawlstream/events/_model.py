"""The events as Python values: frozen dataclasses whose field names are the Avro names.

Pure: no I/O. Each class mirrors one ``schemas/*.avsc`` record of namespace
``crawlstream.v1`` (a test checks the field sets are equal); ``AVRO_NAME`` is the record's
full name, which is how the codec finds the schema for a class and the class for a schema.
Timestamps are ints (epoch milliseconds): the codec reads ``timestamp-millis`` as plain longs
so the hot path never builds ``datetime`` objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeAlias

from crawlstream import topics

__all__ = [
    "EVENT_TYPES",
    "TOPIC_EVENTS",
    "ContentLocation",
    "ContentStored",
    "DiscoveredUrl",
    "Event",
    "FetchRequest",
    "FetchResult",
    "UrlRecord",
]


@dataclass(frozen=True, slots=True)
class DiscoveredUrl:
    """A URL someone wants crawled (topics urls.discovered and urls.frontier)."""

    AVRO_NAME: ClassVar[str] = "crawlstream.v1.DiscoveredUrl"

    url: str
    domain: str
    url_key: int
    depth: int
    discovered_at_ms: int
    source: str
    source_url: str | None = None
    dataset_id: int | None = None
    priority: int | None = None
    raw_url: str | None = None  # the URL as written where found, when not canonical (ADR 024)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """The scheduler's order to fetch one URL now (topic fetch.requests)."""

    AVRO_NAME: ClassVar[str] = "crawlstream.v1.FetchRequest"

    url: str
    url_key: int
    domain: str
    depth: int
    attempt: int
    requested_at_ms: int
    max_body_bytes: int | None = None
    dataset_id: int | None = None
    if_none_match: str | None = None
    if_modified_since: str | None = None
    previous_content_hash: str | None = None


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What one fetch attempt produced (topic fetch.results). ``body_zstd`` is one zstd frame."""

    AVRO_NAME: ClassVar[str] = "crawlstream.v1.FetchResult"

    url: str
    url_key: int
    domain: str
    depth: int
    status: int
    outcome: str
    fetched_at_ms: int
    elapsed_ms: int
    attempt: int
    error: str | None = None
    final_url: str | None = None
    redirect_location: str | None = None
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body_zstd: bytes = b""
    body_size_bytes: int = 0
    truncated: bool = False
    dataset_id: int | None = None
    retry_after_s: float | None = None
    crawl_delay_s: float | None = None
    robots_sitemaps: Sequence[str] | None = None
    content_hash: str | None = None
    response_head: bytes | None = None  # status line + header lines as received (schema id 11)
    ip_address: str | None = None  # the response's peer address (WARC-IP-Address)
    request_head: bytes | None = None  # request line + header lines as sent (schema id 12)


@dataclass(frozen=True, slots=True)
class ContentLocation:
    """Address of one zstd frame in the content store (nested in ContentStored)."""

    AVRO_NAME: ClassVar[str] = "crawlstream.v1.ContentLocation"

    segment: str
    offset: int
    length: int
    dict_id: int
    tier: str
    shard: int | None = None  # the store shard (domain checksum); None: a store written before shards


@dataclass(frozen=True, slots=True)
class ContentStored:
    """A body is durably in the content store (topic content.stored)."""

    AVRO_NAME: ClassVar[str] = "crawlstream.v1.ContentStored"

    url: str
    url_key: int
    domain: str
    content_hash: str
    location: ContentLocation
    size_bytes: int
    stored_bytes: int
    status: int
    fetched_at_ms: int
    content_type: str | None = None
    title: str | None = None
    dataset_id: int | None = None
    robots_directives: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UrlRecord:
    """One row of a URL dataset (topic urls.records). ``domain`` None: derived from ``url``."""

    AVRO_NAME: ClassVar[str] = "crawlstream.v1.UrlRecord"

    dataset_id: int
    url: str
    ts_ms: int | None = None
    extras: Mapping[str, str] = field(default_factory=dict)
    domain: str | None = None


Event: TypeAlias = DiscoveredUrl | FetchRequest | FetchResult | ContentStored | UrlRecord

EVENT_TYPES: Final[Mapping[str, type[Any]]] = MappingProxyType(
    {cls.AVRO_NAME: cls for cls in (DiscoveredUrl, FetchRequest, FetchResult, ContentStored, UrlRecord)}
)
"""Top-level event classes by Avro full name."""

TOPIC_EVENTS: Final[Mapping[str, type[Any]]] = MappingProxyType(
    {
        topics.URLS_DISCOVERED: DiscoveredUrl,
        topics.URLS_FRONTIER: DiscoveredUrl,
        topics.FETCH_REQUESTS: FetchRequest,
        topics.FETCH_RESULTS: FetchResult,
        topics.CONTENT_STORED: ContentStored,
        topics.URLS_RECORDS: UrlRecord,
    }
)
"""The value type of each topic (DESIGN.md "Topics")."""
