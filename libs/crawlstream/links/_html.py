"""Is a body HTML, and what is its title: shared by the link extractor and the bucket compressor."""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

from crawlstream.links._charset import decode_html
from crawlstream.links._directives import document_head

__all__ = ["HTML_TYPES", "TITLE_MAX_CHARS", "extract_title", "is_html", "is_html_type"]

HTML_TYPES = ("text/html", "application/xhtml+xml")
TITLE_MAX_CHARS = 512
_HTML_SNIFF = re.compile(rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head)\b", re.I | re.S)
_SPACES = re.compile(r"\s+")


def is_html_type(content_type: str | None) -> bool:
    """HTML by its Content-Type alone (parameters such as charset ignored)."""
    return (content_type or "").split(";", 1)[0].strip().lower() in HTML_TYPES


def is_html(content_type: str | None, body: bytes) -> bool:
    """HTML by Content-Type, or by the first bytes when the server sent none."""
    if content_type:
        return is_html_type(content_type)
    return _HTML_SNIFF.match(body[:1024]) is not None


def extract_title(body: bytes, content_type: str | None) -> str | None:
    """The page's <title>, whitespace-collapsed and capped; None when absent.

    Parses only the document head (up to ``</head>`` or 64 KiB): the title is there, and
    parsing a 5 MB body for it would cost more than storing it.
    """
    node = LexborHTMLParser(decode_html(document_head(body), content_type)).css_first("title")
    if node is None:
        return None
    title = _SPACES.sub(" ", node.text(deep=True)).strip()
    return title[:TITLE_MAX_CHARS] or None
