"""One filled-in event per fixed topic, shared by the event and runtime tests."""

from __future__ import annotations

import zstandard

from crawlstream import topics
from crawlstream.events import (
    ContentLocation,
    ContentStored,
    DiscoveredUrl,
    FetchRequest,
    FetchResult,
    UrlRecord,
)

T0_MS = 1_700_000_000_123


def sample_events() -> dict[str, object]:
    """One event per fixed topic, with every optional field set (so all of them round-trip)."""
    body = b"<html><title>Example</title><a href='/a'>a</a></html>"
    return {
        topics.URLS_DISCOVERED: DiscoveredUrl(
            url="https://www.example.com/a?b=1",
            domain="example.com",
            url_key=(0x2A << 56) | 0x00AB_CDEF_0123_4567,
            depth=3,
            discovered_at_ms=T0_MS,
            source="link",
            source_url="https://www.example.com/",
            dataset_id=7,
            priority=-2,
            raw_url="a?b=1#top",
        ),
        topics.FETCH_REQUESTS: FetchRequest(
            url="https://bücher.example.de/ü",
            url_key=(1 << 63) - 1,
            domain="example.de",
            depth=0,
            attempt=2,
            requested_at_ms=T0_MS,
            max_body_bytes=1 << 20,
            dataset_id=1,
            if_none_match='W/"abc"',
            if_modified_since="Wed, 21 Oct 2015 07:28:00 GMT",
            previous_content_hash="0f" * 16,
        ),
        topics.FETCH_RESULTS: FetchResult(
            url="https://www.example.com/a",
            url_key=42,
            domain="example.com",
            depth=1,
            status=200,
            outcome="ok",
            fetched_at_ms=T0_MS,
            elapsed_ms=153,
            attempt=1,
            error=None,
            final_url="https://www.example.com/a/",
            redirect_location=None,
            content_type="text/html",
            headers={"content-type": "text/html; charset=utf-8", "server": "x"},
            body_zstd=zstandard.ZstdCompressor().compress(body),
            body_size_bytes=len(body),
            truncated=False,
            dataset_id=3,
            content_hash="1e" * 16,
            response_head=b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Type: text/html; charset=utf-8\r\n",
            ip_address="2001:db8::1",
        ),
        topics.CONTENT_STORED: ContentStored(
            url="https://www.example.com/a",
            url_key=42,
            domain="example.com",
            content_hash="9f" * 16,
            location=ContentLocation(segment="hot/00/000001.seg", offset=4096, length=812, dict_id=77, tier="hot"),
            size_bytes=2048,
            stored_bytes=812,
            status=200,
            fetched_at_ms=T0_MS,
            content_type="text/html",
            title="Example",
            dataset_id=3,
            robots_directives={"noindex": "meta,x-robots-tag"},
        ),
        topics.URLS_RECORDS: UrlRecord(
            dataset_id=12,
            url="http://example.org/x",
            ts_ms=T0_MS,
            extras={"lang": "en"},
            domain="example.org",
        ),
    }
