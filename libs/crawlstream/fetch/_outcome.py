"""The result of one fetch attempt, and the pure helpers that fill it (no I/O)."""

from __future__ import annotations

import email.utils
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ERROR_OUTCOMES",
    "HOST_FAILURE_OUTCOMES",
    "KEPT_HEADERS",
    "MAX_RESPONSE_HEAD_BYTES",
    "OUTCOMES",
    "REVISITABLE_OUTCOMES",
    "FetchOutcome",
    "Outcome",
    "kept_headers",
    "parse_retry_after",
    "request_head",
    "response_head",
]

Outcome = Literal[
    "ok",
    "http_error",
    "timeout",
    "dns_error",
    "connect_error",
    "robots_disallowed",
    "blocked_private",
    "redirect",
    "too_large",
    "error",
    "excluded",  # not fetched: the operator excluded the domain after the request was released
    "not_modified",  # 304 to a conditional revisit: nothing new (ADR 022)
    "unchanged",  # a revisit's 2xx body hashes as the previous one did: the body is not sent on
]
OUTCOMES: tuple[str, ...] = Outcome.__args__  # type: ignore[attr-defined]

# The groups of outcomes, each defined here and nowhere else (tests/fetch/test_outcome_groups.py).
# No usable answer: the fetch failed, or the network guard refused the address. An HTTP error is
# an answer, not a failure. The crawl's error counts, the status page and the fetcher's per-URL
# log all count these.
ERROR_OUTCOMES: frozenset[str] = frozenset(
    {"timeout", "dns_error", "connect_error", "too_large", "blocked_private", "error"}
)
# Failures of the host, not of one URL: a robots.txt fetch that fails so is the page's outcome too.
HOST_FAILURE_OUTCOMES: frozenset[str] = frozenset({"dns_error", "blocked_private"})
# A page came back, or the server said it is the one it had (a revisit may follow: ADR 022).
REVISITABLE_OUTCOMES: frozenset[str] = frozenset({"ok", "unchanged", "not_modified"})

# Response headers worth keeping downstream (content store, scheduler); everything else is
# dropped so a FetchResult stays small whatever the server sends.
KEPT_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "content-encoding",
        "content-language",
        "content-disposition",
        "last-modified",
        "etag",
        "expires",
        "cache-control",
        "date",
        "location",
        "retry-after",
        "server",
        "x-robots-tag",
        "link",
    }
)
MAX_HEADER_VALUE_CHARS = 2048
# The original header block (for WARC export, ADR 022) is kept whole up to this size; header
# lines past it are dropped (a real response's head is 0.3-2 KB; aiohttp itself refuses lines
# over 8 KB).
MAX_RESPONSE_HEAD_BYTES = 32 * 1024
MAX_RETRY_AFTER_S = 86400.0


@dataclass(frozen=True)
class FetchOutcome:
    """One attempt at one URL. ``status`` is 0 when no HTTP response arrived.

    Redirects are never followed: ``outcome="redirect"`` carries the absolute
    ``redirect_location`` so the pipeline sends it back through dedupe (which ends loops).
    ``body`` holds at most the configured cap of *decoded* bytes; ``truncated`` says the
    server had more. ``retry_after_s`` comes from Retry-After on 429/503, or is the
    robots.txt back-off when robots.txt was unavailable (5xx / network error).
    ``robots_sitemaps`` is set only on the attempt that read the host's robots.txt: the
    sitemaps it names (``crawlstream.sitemaps.robots_sitemaps``); None on every other one.
    ``content_hash`` is the hex xxh3-128 of the body (the content store's hash), "" without
    one; an ``unchanged`` outcome keeps it but drops the body (the store has it already).
    ``response_head`` is the response's status line and header lines as received (order,
    case and repeats kept; ``response_head()``), b"" without a response; ``ip_address`` the
    address the response came from (the connection's peer), "" when unknown or proxied;
    ``request_head`` the request line and header lines the fetcher sent for it (``request_head()``).
    """

    url: str
    final_url: str
    status: int
    outcome: Outcome
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = ""
    body: bytes = b""
    truncated: bool = False
    body_size_bytes: int = 0
    elapsed_ms: int = 0
    redirect_location: str | None = None
    retry_after_s: float | None = None
    crawl_delay_s: float | None = None
    robots_sitemaps: tuple[str, ...] | None = None
    attempt: int = 0
    fetched_at_ms: int = 0
    content_hash: str = ""
    response_head: bytes = b""
    ip_address: str = ""
    request_head: bytes = b""

    @property
    def is_html(self) -> bool:
        ct = self.content_type
        return ct in ("text/html", "application/xhtml+xml")


def parse_retry_after(value: str | None, *, now_s: float) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or an HTTP date), clamped to a day."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # not "²": str.isdigit takes any Unicode digit
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return min(max(0.0, when.timestamp() - now_s), MAX_RETRY_AFTER_S)


# Repeated headers whose values all count: joined with ", " (RFC 9110 §5.3). A server sends
# one X-Robots-Tag per crawler ("otherbot: noindex", "crawlstream: nofollow").
_JOINED_HEADERS = frozenset({"x-robots-tag"})


def kept_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The bounded header subset: lowercased names, first value wins (X-Robots-Tag: all
    values, joined with ", "), long values cut."""
    kept: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        if key not in KEPT_HEADERS:
            continue
        if key not in kept:
            kept[key] = value[:MAX_HEADER_VALUE_CHARS]
        elif key in _JOINED_HEADERS:
            kept[key] = f"{kept[key]}, {value}"[:MAX_HEADER_VALUE_CHARS]
    return kept


def response_head(
    version: tuple[int, int], status: int, reason: str | None, raw_headers: Iterable[tuple[bytes, bytes]]
) -> bytes:
    """The status line and header lines of a response, each ending in CRLF (no blank line).

    From the parser's raw pairs: names and values byte for byte, in order, repeats kept (the
    whitespace around ``:`` is normalized to one space, as HTTP/1.1 parsers see it). Lines
    past ``MAX_RESPONSE_HEAD_BYTES`` are dropped whole.
    """
    phrase = (reason or "").encode("latin-1", "replace")
    first = b"HTTP/%d.%d %d %s" % (version[0], version[1], status, phrase)
    return _bounded_head(first, (name + b": " + value for name, value in raw_headers))


def request_head(method: str, target: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """The request line (HTTP/1.1, aiohttp's) and header lines the fetcher sent, each ending in
    CRLF (no blank line), bounded like ``response_head``; for the WARC request record."""
    lines = (f"{name}: {value}".encode("latin-1", "replace") for name, value in headers)
    return _bounded_head(f"{method} {target} HTTP/1.1".encode("latin-1", "replace"), lines)


def _bounded_head(first: bytes, lines: Iterable[bytes]) -> bytes:
    """``first`` and ``lines``, each followed by CRLF; lines past ``MAX_RESPONSE_HEAD_BYTES``
    are dropped whole."""
    out = bytearray(first + b"\r\n")
    for line in lines:
        if len(out) + len(line) + 2 > MAX_RESPONSE_HEAD_BYTES:
            break
        out += line + b"\r\n"
    return bytes(out)


def media_type(headers: Mapping[str, str]) -> str:
    """``text/html`` from ``Text/HTML; charset=utf-8``; empty when absent."""
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()
