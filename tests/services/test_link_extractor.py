"""link-extractor's handler: robots directives, robots.txt's sitemaps and sitemap documents."""

from __future__ import annotations

import gzip
from typing import Any

import zstandard
from prometheus_client import CollectorRegistry

from crawlstream.bus import Message
from crawlstream.events import DiscoveredUrl, FetchResult
from crawlstream.links import Scope
from crawlstream.links.service import LinkHandler
from crawlstream.urls import canonicalize, url_key

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
PAGE = b'<html><head></head><body><a rel="nofollow" href="/sponsored">s</a><a href="/next">n</a></body></html>'


class Out:
    """The producer seam: keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[DiscoveredUrl] = []

    def send(self, _topic: str, event: Any) -> None:
        self.sent.append(event)


def result(url: str, body: bytes, content_type: str, **kw: Any) -> FetchResult:
    canon = canonicalize(url)
    return FetchResult(
        url=canon.url, url_key=url_key(canon), domain=canon.domain, depth=2, status=200, outcome="ok",
        fetched_at_ms=0, elapsed_ms=1, attempt=1, content_type=content_type,
        body_zstd=zstandard.ZstdCompressor().compress(body), body_size_bytes=len(body), **kw,
    )


def handle(event: FetchResult, **kw: Any) -> tuple[list[DiscoveredUrl], CollectorRegistry]:
    out, registry = Out(), CollectorRegistry()
    handler = LinkHandler(out, Scope(), 1 << 20, registry, **kw)  # type: ignore[arg-type]
    handler.handle(event, Message("fetch.results", 0, 0, None, b""))
    return out.sent, registry


def test_robots_txt_sitemaps_are_emitted_one_level_deeper_as_source_robots() -> None:
    event = result("http://a.com/", b"<html></html>", "text/html", robots_sitemaps=["http://a.com/s.xml", "bad:"])
    sent, _ = handle(event)
    assert [(e.url, e.source, e.depth, e.source_url) for e in sent] == [("http://a.com/s.xml", "robots", 3, event.url)]
    assert handle(event, sitemaps=False)[0] == []


def test_a_gzip_sitemap_yields_its_urls_as_source_sitemap() -> None:
    doc = f'<urlset xmlns="{NS}"><url><loc>http://a.com/x</loc></url><url><loc>http://b.com/y</loc></url></urlset>'
    sent, registry = handle(result("http://a.com/s.xml.gz", gzip.compress(doc.encode()), "application/x-gzip"))
    assert [(e.url, e.source, e.depth) for e in sent] == [
        ("http://a.com/x", "sitemap", 3),
        ("http://b.com/y", "sitemap", 3),
    ]
    assert registry.get_sample_value("crawlstream_link_extractor_sitemaps_total", {"result": "urlset"}) == 1


def test_a_sitemap_over_the_url_cap_keeps_the_first_urls_and_a_bad_one_is_counted() -> None:
    doc = f'<urlset xmlns="{NS}">' + "".join(f"<url><loc>http://a.com/{i}</loc></url>" for i in range(5))
    sent, _ = handle(result("http://a.com/s.xml", (doc + "</urlset>").encode(), "application/xml"), sitemap_max_urls=2)
    assert [e.url for e in sent] == ["http://a.com/0", "http://a.com/1"]
    sent, registry = handle(result("http://a.com/s.xml", doc.encode(), "application/xml"))
    assert sent == []
    assert registry.get_sample_value("crawlstream_link_extractor_sitemaps_total", {"result": "malformed"}) == 1


def test_xml_that_is_no_sitemap_counts_as_not_html() -> None:
    sent, registry = handle(result("http://a.com/feed.xml", b"<rss><channel/></rss>", "application/xml"))
    assert sent == []
    assert registry.get_sample_value("crawlstream_link_extractor_pages_total", {"kind": "not_html"}) == 1


def test_rel_nofollow_is_obeyed_unless_the_crawl_ignores_directives() -> None:
    event = result("http://a.com/p", PAGE, "text/html")
    assert [e.url for e in handle(event)[0]] == ["http://a.com/next"]
    assert [e.url for e in handle(event, obey_directives=False)[0]] == ["http://a.com/sponsored", "http://a.com/next"]


def test_an_x_robots_tag_for_our_agent_only_stops_the_links() -> None:
    ours = result("http://a.com/p", PAGE, "text/html", headers={"x-robots-tag": "mybot: nofollow"})
    assert handle(ours, agent="mybot")[0] == []
    assert [e.url for e in handle(ours, agent="crawlstream")[0]] == ["http://a.com/next"]


def test_a_redirect_records_its_hop_for_the_alias_map_and_carries_the_location_as_written() -> None:
    from crawlstream.events import UrlRecord
    from crawlstream.lake import REDIRECTS_DATASET

    event = FetchResult(
        url="http://a.com/old", url_key=url_key(canonicalize("http://a.com/old")), domain="a.com", depth=1,
        status=308, outcome="redirect", redirect_location="HTTP://B.com/new#x", fetched_at_ms=5, elapsed_ms=1,
        attempt=1,
    )
    sent, _ = handle(event)
    hops = [e for e in sent if isinstance(e, UrlRecord)]
    assert hops == [
        UrlRecord(REDIRECTS_DATASET, "http://a.com/old", 5,
                  {"location": "http://b.com/new", "status": "308", "location_raw": "HTTP://B.com/new#x"}, "a.com")
    ]
    [target] = [e for e in sent if isinstance(e, DiscoveredUrl)]
    assert (target.url, target.source, target.raw_url) == ("http://b.com/new", "redirect", "HTTP://B.com/new#x")


def test_a_link_carries_its_href_resolved_but_not_canonicalized_when_that_is_not_canonical() -> None:
    page = b'<html><body><a href=" ../x/./y?b=2&amp;a=1 ">1</a><a href="/z">2</a></body></html>'
    sent, _ = handle(result("http://a.com/p/q", page, "text/html"))
    assert [(e.url, e.raw_url) for e in sent] == [("http://a.com/x/y?a=1&b=2", "http://a.com/x/y?b=2&a=1"),
                                                 ("http://a.com/z", None)]
