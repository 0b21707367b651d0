"""Link extraction from HTML and crawl scope rules (pure)."""

from crawlstream.links._charset import decode_html, sniff_charset
from crawlstream.links._extract import (
    ExtractedLink,
    Extraction,
    extract_links,
    extract_links_with_stats,
    parse_refresh,
    resolve_candidates,
)
from crawlstream.links._recent import RecentUrls
from crawlstream.links._scope import Scope

__all__ = [
    "ExtractedLink",
    "Extraction",
    "RecentUrls",
    "Scope",
    "decode_html",
    "extract_links",
    "extract_links_with_stats",
    "parse_refresh",
    "resolve_candidates",
    "sniff_charset",
]
