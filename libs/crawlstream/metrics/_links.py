"""Link extractor metrics: what it did with each fetch result, sitemaps, nofollow."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["LinkMetrics"]


class LinkMetrics:
    """One per registry: ``crawlstream.metrics.per_registry(LinkMetrics, registry)``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # kind: parsed (HTML), sitemap, not_html, redirect, not_ok
        self.pages = Counter(
            "crawlstream_link_extractor_pages",
            "Fetch results seen by the link extractor, by what it did with them",
            ["kind"],
            registry=registry,
        )
        # result: urlset, sitemapindex (parsed), or why one was skipped whole: malformed, dtd,
        # too_large, gzip, truncated
        self.sitemaps = Counter(
            "crawlstream_link_extractor_sitemaps",
            "Sitemap documents parsed, or skipped by reason",
            ["result"],
            registry=registry,
        )
        # scope: links dropped for rel=nofollow (link), pages whose meta robots or X-Robots-Tag
        # said nofollow (page)
        self.nofollow = Counter(
            "crawlstream_link_extractor_nofollow",
            "Links and pages not followed because of robots directives",
            ["scope"],
            registry=registry,
        )
