"""The link extractor service: consume ``fetch.results``, emit ``urls.discovered`` (and each
redirect hop to ``urls.records``, the alias map of ADR 024).

HTML bodies yield their links within the crawl scope (robots directives obeyed: no
rel=nofollow link, nothing from a nofollow page); a redirect yields its location; a sitemap
(XML or gzip whose root is ``urlset``/``sitemapindex``) yields its URLs (source
``sitemap``); the result whose fetch read robots.txt yields the host's sitemaps (source
``robots``). Each counts one level deeper than the page (a hop is a new URL: dedupe and max
depth end loops). Other documents and failed fetches yield nothing. Sitemaps are fetched
like any URL, through dedupe and the scheduler's per-domain spacing (ADR 015).
"""

from __future__ import annotations

import logging
import time

import zstandard
from prometheus_client import CollectorRegistry

from crawlstream.bus import Message
from crawlstream.errors import BadDataError, InvalidUrl
from crawlstream.events import DiscoveredUrl, EventProducer, FetchResult
from crawlstream.fetch import redirect_hop_record
from crawlstream.links import DEFAULT_AGENT_TOKEN, RecentUrls, Scope, extract_links_with_stats, is_html_type
from crawlstream.metrics import LinkMetrics, per_registry
from crawlstream.robots import product_token
from crawlstream.runtime import EventHandler, Host, LoopService, run_standalone
from crawlstream.settings import Settings
from crawlstream.sitemaps import SITEMAP_MAX_BYTES, SITEMAP_MAX_URLS, SitemapError, looks_like_sitemap, parse_sitemap
from crawlstream.topics import FETCH_RESULTS, URLS_DISCOVERED, URLS_RECORDS
from crawlstream.urls import canonicalize, url_key

GROUP = "crawlstream.link-extractor"
TOPICS = (FETCH_RESULTS,)
RECENT_URLS = 65_536  # ~10 MB of URL strings

logger = logging.getLogger(__name__)


class LinkHandler(EventHandler):
    def __init__(
        self,
        out: EventProducer,
        scope: Scope,
        max_body_bytes: int,
        registry: CollectorRegistry | None = None,
        recent_urls: int = RECENT_URLS,
        *,
        agent: str = DEFAULT_AGENT_TOKEN,
        obey_directives: bool = True,
        sitemaps: bool = True,
        sitemap_max_bytes: int = SITEMAP_MAX_BYTES,
        sitemap_max_urls: int = SITEMAP_MAX_URLS,
    ) -> None:
        metrics = per_registry(LinkMetrics, registry if registry is not None else CollectorRegistry())
        pages = metrics.pages
        self._parsed = pages.labels("parsed")
        self._sitemap_pages = pages.labels("sitemap")
        self._not_html = pages.labels("not_html")
        self._redirects = pages.labels("redirect")
        self._not_ok = pages.labels("not_ok")
        self._sitemap_results = metrics.sitemaps
        nofollow = metrics.nofollow
        self._nofollow_links = nofollow.labels("link")
        self._nofollow_pages = nofollow.labels("page")
        self._warned: set[str] = set()  # sitemap rejection reasons already logged
        self._out = out
        self._scope = scope
        self._max_body_bytes = max_body_bytes
        self._agent = agent
        self._obey_directives = obey_directives
        self._sitemaps = sitemaps
        self._sitemap_max_bytes = sitemap_max_bytes
        self._sitemap_max_urls = sitemap_max_urls
        self._decompressor = zstandard.ZstdDecompressor()
        self._recent = RecentUrls(recent_urls)  # repeats the deduper would drop: not sent
        self.discovered = 0

    def handle(self, event: FetchResult, message: Message) -> None:
        now_ms = int(time.time() * 1000)
        if self._sitemaps and event.robots_sitemaps:
            for sitemap_url in event.robots_sitemaps:  # the host's robots.txt was read for this fetch
                self._emit(sitemap_url, event, event.depth + 1, "robots", now_ms)
        if event.outcome == "redirect" and event.redirect_location:
            self._redirects.inc()
            self._record_hop(event)
            self._emit(event.redirect_location, event, event.depth + 1, "redirect", now_ms)
            return
        if event.outcome != "ok" or not event.body_zstd:
            self._not_ok.inc()
            return
        url = event.final_url or event.url
        if not is_html_type(event.content_type):
            if self._sitemaps and looks_like_sitemap(event.content_type, url):
                self._handle_sitemap(event, self._body(event), now_ms)
            else:
                self._not_html.inc()  # images, PDFs...: stored downstream, never parsed for links
            return
        self._parsed.inc()
        extraction = extract_links_with_stats(
            self._body(event),
            url,
            content_type=event.content_type,
            x_robots_tag=event.headers.get("x-robots-tag"),
            agent=self._agent,
            obey_directives=self._obey_directives,
        )
        if extraction.directives.nofollow:
            self._nofollow_pages.inc()
        if extraction.dropped["nofollow"]:
            self._nofollow_links.inc(extraction.dropped["nofollow"])
        for link in extraction.links:
            self._emit(link.url, event, event.depth + 1, "link", now_ms, raw=link.raw)

    def _record_hop(self, event: FetchResult) -> None:
        """The hop into the alias map (ADR 024): a ``urls.records`` row of the redirects dataset,
        whatever the scope says about following it; a Location that is no URL records nothing."""
        hop = redirect_hop_record(event)
        if hop is not None:
            self._out.send(URLS_RECORDS, hop)

    def _body(self, event: FetchResult) -> bytes:
        try:
            return self._decompressor.decompress(event.body_zstd, max_output_size=self._max_body_bytes)
        except zstandard.ZstdError as exc:
            raise BadDataError(f"fetch result body of {event.url} is not valid zstd ({exc})") from exc

    def _handle_sitemap(self, event: FetchResult, body: bytes, now_ms: int) -> None:
        """Emit a sitemap's URLs (or an index's sitemaps); a bad one is counted and skipped whole."""
        try:
            if event.truncated:
                raise SitemapError(f"sitemap {event.url} was cut at the fetch cap", reason="truncated")
            sitemap = parse_sitemap(body, event.url, max_bytes=self._sitemap_max_bytes, max_urls=self._sitemap_max_urls)
        except SitemapError as exc:
            if exc.reason == "not_sitemap":
                self._not_html.inc()  # well-formed XML of another kind (a feed, a config...)
                return
            self._sitemap_pages.inc()
            self._sitemap_results.labels(exc.reason).inc()
            if exc.reason not in self._warned:  # warn once per reason, count always
                self._warned.add(exc.reason)
                logger.warning("skipped a sitemap (%s): %s; further ones are only counted", exc.reason, exc)
            return
        self._sitemap_pages.inc()
        self._sitemap_results.labels(sitemap.kind).inc()
        # <lastmod> is parsed (SitemapEntry.lastmod_ms) for a revisit policy; not carried yet (ADR 015).
        for entry in sitemap.entries:
            self._emit(entry.url, event, event.depth + 1, "sitemap", now_ms)

    def _emit(
        self, url: str, parent: FetchResult, depth: int, source: str, now_ms: int, *, raw: str | None = None
    ) -> None:
        """``raw``: a link's href resolved against its page, before canonicalization, when not
        ``url``; a non-canonical ``url`` (a Location, a sitemap entry) is its own raw form. Both
        travel as ``raw_url``; the deduper stores the first one a URL is seen with (ADR 024)."""
        if url in self._recent:  # extracted links are canonical already
            return
        try:
            canonical = canonicalize(url)
        except InvalidUrl:
            return  # counted by the extractor; a bad Location header is the server's problem
        if canonical.url in self._recent or not self._scope.allows(canonical, depth):
            return
        if raw is None and url != canonical.url:
            raw = url
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
                raw_url=raw,
            ),
        )
        self.discovered += 1


def build(host: Host, *, allowed_domains: frozenset[str] | None = None) -> LoopService:
    settings = host.settings
    domains = allowed_domains if allowed_domains is not None else (frozenset(settings.crawl.allowed_domains) or None)
    out = host.event_producer()
    crawl = settings.crawl
    handler = LinkHandler(
        out,
        Scope.from_settings(settings, domains),
        settings.fetch.max_body_bytes,
        host.registry,
        agent=product_token(settings.fetch.user_agent),
        obey_directives=crawl.obey_robots_directives,
        sitemaps=crawl.sitemaps,
        sitemap_max_bytes=crawl.sitemap_max_bytes,
        sitemap_max_urls=crawl.sitemap_max_urls,
    )
    # Its only output is the bus: the disk floor pauses it only on the embedded log (ADR 033).
    loop = host.service_loop("link-extractor", GROUP, TOPICS, handler, producers=[out], writes_data_dir=False)
    return LoopService(loop, handler)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
