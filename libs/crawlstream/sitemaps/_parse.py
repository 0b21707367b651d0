"""Sitemaps (sitemaps.org protocol 0.9): a ``urlset`` or ``sitemapindex`` document to URLs.

Pure: bytes in, canonical URLs out; no I/O. Hostile input is the normal case here, since
any host can serve any bytes at a sitemap's URL, so:

* **no DTD at all**: a ``<!DOCTYPE`` (and with it every entity declaration) is refused
  before anything in it is read; that stops billion-laughs expansion and external entities
  (file://, http://) outright, as defusedxml's ``forbid_dtd`` does. Sitemaps never need one.
* **bounded bytes**: the document, after gunzip, is read in 64 KiB chunks and refused past
  ``max_bytes`` (the protocol's limit is 50 MB), and a gzip document that inflates more than
  ``MAX_GZIP_RATIO`` times the compressed bytes read so far, past its first MiB, is refused as a
  bomb (the fetcher's rule for encoded bodies): a bomb costs ~1 MiB of inflating and parsing, not
  50 MB (a bomb sitemap on every tenth domain was a quarter of a crawl's CPU), and nothing is
  held but the current chunk; real sitemaps inflate 5-30x;
* **bounded URLs**: entries past ``max_urls`` (the protocol's 50,000) are counted and dropped;
* **all or nothing**: a document that is malformed anywhere (or truncated) yields no URL.

The parser is the standard library's expat, streaming (no tree is built); the ADR
(docs/decisions/015-sitemaps-and-robots-directives.md) says why not lxml.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal
from xml.parsers import expat

from crawlstream.errors import BadDataError, InvalidUrl
from crawlstream.urls import canonicalize

__all__ = [
    "SITEMAP_MAX_BYTES",
    "SITEMAP_MAX_URLS",
    "Sitemap",
    "SitemapEntry",
    "SitemapError",
    "looks_like_sitemap",
    "parse_lastmod",
    "parse_sitemap",
]

SITEMAP_MAX_BYTES = 50 * 1024 * 1024  # sitemaps.org: "no larger than 50MB (52,428,800 bytes)"
SITEMAP_MAX_URLS = 50_000  # sitemaps.org: "no more than 50,000 URLs"
_CHUNK_BYTES = 64 * 1024
MAX_GZIP_RATIO = 100  # inflated / compressed bytes, checked past _RATIO_FLOOR_BYTES inflated
_RATIO_FLOOR_BYTES = 1024 * 1024
_MAX_TEXT_CHARS = 4096  # a <loc> is at most 2,048 characters by the protocol
_XML_TYPES = frozenset({"application/xml", "text/xml"})
_GZIP_TYPES = frozenset({"application/gzip", "application/x-gzip", "application/gzip-compressed"})
_UNTYPED = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_W3C_DATETIME = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?)?)?)?\s*(Z|z|[+-]\d{2}:?\d{2})?"
)

SitemapKind = Literal["urlset", "sitemapindex"]


class SitemapError(BadDataError):
    """A document that yields no URL. ``reason``: ``malformed``, ``dtd``, ``too_large``,
    ``gzip`` (not a readable gzip stream) or ``not_sitemap`` (well-formed, other root)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class SitemapEntry:
    """One ``<url>`` (or, in an index, one ``<sitemap>``): canonical URL and ``<lastmod>``."""

    url: str
    lastmod_ms: int | None = None


@dataclass
class Sitemap:
    """Entries in document order, deduplicated; ``dropped`` counts entries left out, by reason."""

    kind: SitemapKind
    entries: list[SitemapEntry] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)


def looks_like_sitemap(content_type: str | None, url: str) -> bool:
    """Worth parsing as a sitemap: XML or gzip by media type, or untyped and named so.

    The document's root element decides (``parse_sitemap`` says ``not_sitemap`` otherwise);
    this only keeps HTML, images and the like away from the XML parser.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in _XML_TYPES or media in _GZIP_TYPES:
        return True
    path = url.split("?", 1)[0].lower()
    return media in _UNTYPED and path.endswith((".xml", ".xml.gz", ".gz"))


def parse_lastmod(text: str) -> int | None:
    """W3C Datetime (``2024``, ``2024-05``, ``2024-05-01``, ``2024-05-01T10:00:00+02:00``...)
    as epoch milliseconds, UTC when no zone is given; None when it is not one."""
    m = _W3C_DATETIME.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, second, zone = m.groups()
    tz: timezone = UTC
    if zone and zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        moment = datetime(
            int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0), int(second or 0), tzinfo=tz
        )
    except ValueError:  # month 13, hour 25, a zone of 24 hours...
        return None
    return int(moment.timestamp() * 1000)


def _decoded_chunks(body: bytes, max_bytes: int) -> Iterator[bytes]:
    """The document's bytes (gunzipped when they are gzip), chunk by chunk, at most ``max_bytes``."""
    if body[:2] != b"\x1f\x8b":
        if len(body) > max_bytes:
            raise SitemapError(f"sitemap of {len(body)} bytes is over the {max_bytes}-byte cap", reason="too_large")
        for start in range(0, len(body), _CHUNK_BYTES):
            yield body[start : start + _CHUNK_BYTES]
        return
    total = 0
    raw = io.BytesIO(body)
    with gzip.GzipFile(fileobj=raw) as stream:
        while True:
            try:
                chunk = stream.read(_CHUNK_BYTES)  # inflates at most this much more
            except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
                raise SitemapError(f"gzip sitemap is not a readable gzip stream: {exc}", reason="gzip") from exc
            if not chunk:
                return
            total += len(chunk)
            if total > max_bytes:
                raise SitemapError(
                    f"gzip sitemap inflates past the {max_bytes}-byte cap ({len(body)} bytes compressed)",
                    reason="too_large",
                )
            if total > _RATIO_FLOOR_BYTES and total > MAX_GZIP_RATIO * raw.tell():  # tell: compressed bytes read
                raise SitemapError(
                    f"gzip sitemap inflates more than {MAX_GZIP_RATIO}x ({raw.tell()} of {len(body)} compressed "
                    f"bytes read, {total} inflated): refused as a decompression bomb",
                    reason="too_large",
                )
            yield chunk


class _Forbidden(Exception):
    pass


class _Reader:
    """expat callbacks: the root decides the kind; depth-2 entries collect depth-3 loc/lastmod."""

    def __init__(self, max_urls: int) -> None:
        self.max_urls = max_urls
        self.kind: SitemapKind | None = None
        self.namespace = ""
        self.entries: list[SitemapEntry] = []
        self.dropped: Counter[str] = Counter()
        self._seen: set[str] = set()
        self._depth = 0
        self._in_entry = False
        self._field: str | None = None  # "loc" | "lastmod" while inside one
        self._text: list[str] = []
        self._text_chars = 0
        self._loc: str | None = None
        self._lastmod: str | None = None

    @staticmethod
    def _split(name: str) -> tuple[str, str]:
        namespace, _, local = name.rpartition(" ")
        return namespace, local

    def start(self, name: str, _attrs: object) -> None:
        self._depth += 1
        namespace, local = self._split(name)
        if self._depth == 1:
            if local not in ("urlset", "sitemapindex"):
                raise SitemapError(f"root element is <{local}>, not <urlset> or <sitemapindex>", reason="not_sitemap")
            self.kind = local  # type: ignore[assignment]
            self.namespace = namespace
        elif self._depth == 2:
            self._in_entry = local == ("url" if self.kind == "urlset" else "sitemap") and namespace == self.namespace
            self._loc = self._lastmod = None
        elif self._depth == 3 and self._in_entry and namespace == self.namespace and local in ("loc", "lastmod"):
            self._field = local
            self._text = []
            self._text_chars = 0

    def text(self, data: str) -> None:
        if self._field is not None:
            self._text_chars += len(data)
            if self._text_chars <= _MAX_TEXT_CHARS:
                self._text.append(data)

    def end(self, _name: str) -> None:
        if self._depth == 3 and self._field is not None:
            value = "".join(self._text).strip() if self._text_chars <= _MAX_TEXT_CHARS else None
            if self._field == "loc":
                self._loc = value if value is not None else ""
                if value is None:
                    self.dropped["long_loc"] += 1
            else:
                self._lastmod = value
            self._field = None
        elif self._depth == 2 and self._in_entry:
            self._add()
            self._in_entry = False
        self._depth -= 1

    def _add(self) -> None:
        if not self._loc:
            if self._loc is None:
                self.dropped["no_loc"] += 1
            return
        if len(self.entries) >= self.max_urls:
            self.dropped["over_max_urls"] += 1
            return
        try:
            url = canonicalize(self._loc).url  # the protocol wants absolute URLs: no base
        except InvalidUrl as exc:
            self.dropped[exc.reason] += 1
            return
        if url in self._seen:
            self.dropped["duplicate"] += 1
            return
        lastmod_ms = parse_lastmod(self._lastmod) if self._lastmod else None
        if self._lastmod and lastmod_ms is None:
            self.dropped["bad_lastmod"] += 1  # the URL is kept, without its date
        self._seen.add(url)
        self.entries.append(SitemapEntry(url, lastmod_ms))


def _forbid(*_args: object) -> None:
    raise _Forbidden


def parse_sitemap(
    body: bytes,
    base_url: str,
    *,
    max_bytes: int = SITEMAP_MAX_BYTES,
    max_urls: int = SITEMAP_MAX_URLS,
) -> Sitemap:
    """The entries of the sitemap (or sitemap index) ``body`` fetched from ``base_url``,
    plain or gzip; raises :class:`SitemapError` for anything that is not one, whole and safe."""
    reader = _Reader(max_urls)
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    # 1. No DTD, no entity declaration, no external entity: refused at the first sight.
    parser.StartDoctypeDeclHandler = _forbid
    parser.EntityDeclHandler = _forbid
    parser.UnparsedEntityDeclHandler = _forbid
    parser.ExternalEntityRefHandler = _forbid  # type: ignore[assignment]
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.text
    try:
        for chunk in _decoded_chunks(body, max_bytes):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except _Forbidden:
        raise SitemapError(f"sitemap {base_url} declares a DTD or entities (refused)", reason="dtd") from None
    except expat.ExpatError as exc:
        raise SitemapError(f"sitemap {base_url} is not well-formed XML: {exc}", reason="malformed") from exc
    if reader.kind is None:
        raise SitemapError(f"sitemap {base_url} has no root element", reason="malformed")
    return Sitemap(reader.kind, reader.entries, reader.dropped)
