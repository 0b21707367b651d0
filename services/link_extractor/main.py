"""Link extractor wiring: consume ``fetch.results``, emit ``urls.discovered``.

HTML bodies yield their links within the crawl scope; a redirect yields its location. Both
count one level deeper than the page (a hop is a new URL: dedupe and max depth end loops). Non-HTML and failed
fetches yield nothing.
"""

from __future__ import annotations

import time
import weakref

import zstandard
from prometheus_client import CollectorRegistry, Counter

from crawlstream.bus import Message
from crawlstream.errors import BadDataError, InvalidUrl
from crawlstream.events import DiscoveredUrl, EventProducer, FetchResult
from crawlstream.links import RecentUrls, Scope, extract_links
from crawlstream.runtime import EventHandler, LoopService
from crawlstream.services._host import Host, run_standalone
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_RESULTS, URLS_DISCOVERED
from crawlstream.urls import canonicalize, url_key

GROUP = "crawlstream.link-extractor"
TOPICS = (FETCH_RESULTS,)
_HTML_TYPES = ("text/html", "application/xhtml+xml")
RECENT_URLS = 65_536  # ~10 MB of URL strings

_PAGES: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def pages_counter(registry: CollectorRegistry) -> Counter:
    """``crawlstream_link_extractor_pages_total{kind}``: parsed, not_html, redirect, not_ok."""
    counter = _PAGES.get(registry)
    if counter is None:
        counter = _PAGES[registry] = Counter(
            "crawlstream_link_extractor_pages",
            "Fetch results seen by the link extractor, by what it did with them",
            ["kind"],
            registry=registry,
        )
    return counter


class LinkHandler(EventHandler):
    def __init__(
        self,
        out: EventProducer,
        scope: Scope,
        max_body_bytes: int,
        registry: CollectorRegistry | None = None,
        recent_urls: int = RECENT_URLS,
    ) -> None:
        pages = pages_counter(registry if registry is not None else CollectorRegistry())
        self._parsed = pages.labels("parsed")
        self._not_html = pages.labels("not_html")
        self._redirects = pages.labels("redirect")
        self._not_ok = pages.labels("not_ok")
        self._out = out
        self._scope = scope
        self._max_body_bytes = max_body_bytes
        self._decompressor = zstandard.ZstdDecompressor()
        self._recent = RecentUrls(recent_urls)  # repeats the deduper would drop: not sent
        self.discovered = 0

    def handle(self, event: FetchResult, message: Message) -> None:
        now_ms = int(time.time() * 1000)
        if event.outcome == "redirect" and event.redirect_location:
            self._redirects.inc()
            self._emit(event.redirect_location, event, event.depth + 1, "redirect", now_ms)
            return
        if event.outcome != "ok" or not event.body_zstd:
            self._not_ok.inc()
            return
        if (event.content_type or "").split(";")[0].strip().lower() not in _HTML_TYPES:
            self._not_html.inc()  # images, PDFs...: stored downstream, never parsed for links
            return
        self._parsed.inc()
        try:
            body = self._decompressor.decompress(event.body_zstd, max_output_size=self._max_body_bytes)
        except zstandard.ZstdError as exc:
            raise BadDataError(f"fetch result body of {event.url} is not valid zstd ({exc})") from exc
        for link in extract_links(body, event.final_url or event.url, content_type=event.content_type):
            self._emit(link.url, event, event.depth + 1, "link", now_ms)

    def _emit(self, url: str, parent: FetchResult, depth: int, source: str, now_ms: int) -> None:
        if url in self._recent:  # extracted links are canonical already
            return
        try:
            canonical = canonicalize(url)
        except InvalidUrl:
            return  # counted by the extractor; a bad Location header is the server's problem
        if canonical.url in self._recent or not self._scope.allows(canonical, depth):
            return
        self._recent.add(canonical.url)
        self._out.send(
            URLS_DISCOVERED,
            DiscoveredUrl(
                url=canonical.url,
                domain=canonical.domain,
                url_key=url_key(canonical),
                depth=depth,
                discovered_at_ms=now_ms,
                source=source,
                source_url=parent.url,
                dataset_id=parent.dataset_id,
            ),
        )
        self.discovered += 1


def build(host: Host, *, allowed_domains: frozenset[str] | None = None) -> LoopService:
    settings = host.settings
    domains = allowed_domains if allowed_domains is not None else (
        frozenset(settings.crawl.allowed_domains) or None
    )
    out = host.event_producer()
    handler = LinkHandler(out, Scope.from_settings(settings, domains), settings.fetch.max_body_bytes, host.registry)
    loop = host.service_loop("link-extractor", GROUP, TOPICS, handler, producers=[out])
    return LoopService(loop, handler)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
