"""Robots directives of one page (pure): ``<meta name=robots>`` and ``X-Robots-Tag``.

robots.txt says which URLs may be fetched (``crawlstream.robots``); these say what may be
done with a page once fetched: ``noindex`` (keep it out of the URL index) and ``nofollow``
(follow none of its links); ``none`` is both. Sources, as the big crawlers read them:

* ``<meta name="robots" content="...">`` and ``<meta name="<our product token>">``, in the
  document head (the first 64 KiB, up to ``</head>``): a meta tag further down is body text;
* the ``X-Robots-Tag`` response header (any media type), comma-separated directives, each
  header optionally prefixed ``<agent>:`` for one crawler (the prefix holds to the end of
  that header value; repeated headers arrive joined with ``", "``, so it holds until the
  next prefix). Directives for other agents are ignored.

Every directive is allow-unless-said: unknown tokens (``noarchive``, ``max-snippet: 20``)
are ignored, conflicting ones resolve to the more restrictive (``index, noindex`` is
noindex). ``rel=nofollow`` on a single link is the extractor's business (``_extract``).

The link extractor (nofollow) and the bucket compressor (noindex, recorded on
``content.stored``) both call :func:`page_directives` on the same bytes, so they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from crawlstream.links._charset import decode_html

__all__ = [
    "DEFAULT_AGENT_TOKEN",
    "META",
    "X_ROBOTS_TAG",
    "RobotsDirectives",
    "document_head",
    "page_directives",
    "parse_robots_content",
    "parse_x_robots_tag",
]

DEFAULT_AGENT_TOKEN = "crawlstream"  # product token of the default User-Agent
META = "meta"
X_ROBOTS_TAG = "x-robots-tag"
HEAD_SCAN_BYTES = 64 * 1024
_HEAD_END = re.compile(rb"</head\s*>", re.I)
_AGENT = re.compile(r"[A-Za-z0-9_-]+")
# Directives whose value follows a colon: "max-snippet: 20" is not an agent named max-snippet.
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})


@dataclass(frozen=True)
class RobotsDirectives:
    """What a page asks of crawlers; each field None (no such directive) or its sources,
    comma-joined (``"meta"``, ``"x-robots-tag"`` or ``"meta,x-robots-tag"``)."""

    noindex: str | None = None
    nofollow: str | None = None

    def as_map(self) -> dict[str, str]:
        """``{"noindex": "meta", ...}``: the form recorded on ``content.stored``."""
        out: dict[str, str] = {}
        if self.noindex:
            out["noindex"] = self.noindex
        if self.nofollow:
            out["nofollow"] = self.nofollow
        return out

    def __bool__(self) -> bool:
        return bool(self.noindex or self.nofollow)


def parse_robots_content(content: str) -> set[str]:
    """``{"noindex", "nofollow"}`` ∩ what one directive list says (``none`` is both)."""
    found: set[str] = set()
    for raw in content.split(","):
        token = raw.strip().lower()
        if token in ("noindex", "nofollow"):
            found.add(token)
        elif token == "none":
            found.update(("noindex", "nofollow"))
    return found


def parse_x_robots_tag(value: str, agent: str) -> set[str]:
    """The directives of an ``X-Robots-Tag`` value that apply to ``agent`` (a product token)."""
    agent = agent.lower()
    current: str | None = None  # None: every crawler
    found: set[str] = set()
    for raw in value.split(","):
        token = raw.strip()
        name, colon, rest = token.partition(":")
        name = name.strip()
        if colon and name.lower() not in _VALUED and _AGENT.fullmatch(name):
            current = name.lower()
            token = rest
        if current is None or current == agent:
            found |= parse_robots_content(token)
    return found


def document_head(body: bytes) -> bytes:
    """The bytes up to ``</head>``, at most 64 KiB: where meta tags and the title live."""
    end = _HEAD_END.search(body, 0, HEAD_SCAN_BYTES)
    return body[: end.end()] if end else body[:HEAD_SCAN_BYTES]


def _meta_directives(body: bytes, content_type: str | None, agent: str) -> set[str]:
    head = document_head(body)
    lowered = head.lower()
    # Most pages name neither: skip the parse (a false positive only costs the parse).
    if b"<meta" not in lowered or (b"robots" not in lowered and agent.lower().encode() not in lowered):
        return set()
    tree = LexborHTMLParser(decode_html(head, content_type))
    root = tree.head
    if root is None:
        return set()
    names = ("robots", agent.lower())
    found: set[str] = set()
    for node in root.css("meta[name]"):
        attrs = node.attributes
        if (attrs.get("name") or "").strip().lower() in names:
            found |= parse_robots_content(attrs.get("content") or "")
    return found


def page_directives(
    body: bytes,
    *,
    content_type: str | None,
    x_robots_tag: str | None,
    agent: str = DEFAULT_AGENT_TOKEN,
    html: bool = True,
) -> RobotsDirectives:
    """The directives of one fetched page for ``agent``; ``html`` False reads the header only."""
    sources: dict[str, list[str]] = {"noindex": [], "nofollow": []}
    if x_robots_tag:
        for directive in parse_x_robots_tag(x_robots_tag, agent):
            sources[directive].append(X_ROBOTS_TAG)
    if html and body:
        for directive in _meta_directives(body, content_type, agent):
            sources[directive].append(META)
    return RobotsDirectives(
        noindex=",".join(sorted(sources["noindex"])) or None,
        nofollow=",".join(sorted(sources["nofollow"])) or None,
    )
