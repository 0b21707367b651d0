"""Link extraction from HTML, page titles, page robots directives and crawl scope rules (pure).

``crawlstream.links.service`` is the link extractor service built on them."""

from crawlstream.links._charset import decode_html, sniff_charset
from crawlstream.links._directives import (
    DEFAULT_AGENT_TOKEN,
    RobotsDirectives,
    document_head,
    page_directives,
    parse_robots_content,
    parse_x_robots_tag,
)
from crawlstream.links._extract import (
    ExtractedLink,
    Extraction,
    extract_links,
    extract_links_with_stats,
    parse_refresh,
    resolve_candidates,
    resolve_href,
)
from crawlstream.links._html import HTML_TYPES, TITLE_MAX_CHARS, extract_title, is_html, is_html_type
from crawlstream.links._recent import RecentUrls
from crawlstream.links._scope import Scope

__all__ = [
    "DEFAULT_AGENT_TOKEN",
    "HTML_TYPES",
    "TITLE_MAX_CHARS",
    "ExtractedLink",
    "Extraction",
    "RecentUrls",
    "RobotsDirectives",
    "Scope",
    "decode_html",
    "document_head",
    "extract_links",
    "extract_links_with_stats",
    "extract_title",
    "is_html",
    "is_html_type",
    "page_directives",
    "parse_refresh",
    "parse_robots_content",
    "parse_x_robots_tag",
    "resolve_candidates",
    "resolve_href",
    "sniff_charset",
]
