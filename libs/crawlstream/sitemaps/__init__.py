"""Sitemaps: which ones a host names, and a safe, bounded parser for them (pure).

Fetching is the pipeline's: the fetcher reports a host's sitemaps when it reads its
robots.txt, the link extractor emits them as URLs and parses what comes back
(docs/decisions/015-sitemaps-and-robots-directives.md).
"""

from crawlstream.sitemaps._discover import MAX_ROBOTS_SITEMAPS, robots_sitemaps
from crawlstream.sitemaps._parse import (
    SITEMAP_MAX_BYTES,
    SITEMAP_MAX_URLS,
    Sitemap,
    SitemapEntry,
    SitemapError,
    looks_like_sitemap,
    parse_lastmod,
    parse_sitemap,
)

__all__ = [
    "MAX_ROBOTS_SITEMAPS",
    "SITEMAP_MAX_BYTES",
    "SITEMAP_MAX_URLS",
    "Sitemap",
    "SitemapEntry",
    "SitemapError",
    "looks_like_sitemap",
    "parse_lastmod",
    "parse_sitemap",
    "robots_sitemaps",
]
