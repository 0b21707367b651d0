"""robots.txt policy: RFC 9309 status handling around protego, and a per-origin cache.

Pure except for the cache's injected clock: fetching robots.txt is the fetcher's job
(``crawlstream.fetch``), which hands the final status and body to
:meth:`RobotsPolicy.from_response`.

RFC 9309 §2.3.1: 2xx -> parse; 3xx -> follow up to 5 hops (the fetcher does);
4xx (incl. 404) -> no rules, allow all; 5xx or a network error -> complete disallow and
retry later (the scheduler backs the domain off by ``RobotsDecision.backoff_s``).
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from protego import Protego

__all__ = [
    "MAX_CRAWL_DELAY_S",
    "MAX_ROBOTS_BYTES",
    "MAX_ROBOTS_REDIRECTS",
    "RobotsCache",
    "RobotsDecision",
    "RobotsPolicy",
    "origin_of",
    "product_token",
    "robots_url_for",
]

logger = logging.getLogger(__name__)

MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309 §2.5: parse at least 500 KiB; we parse exactly that.
MAX_ROBOTS_REDIRECTS = 5  # RFC 9309 §2.3.1.2
MAX_CRAWL_DELAY_S = 86400.0
"""Longest Crawl-delay honoured (a day, the policy cache's lifetime): a larger or overflowing
value from a hostile robots.txt becomes this, never a number the scheduler cannot add."""

PolicyKind = Literal["parsed", "allow_all", "disallow_all"]


@dataclass(frozen=True)
class RobotsDecision:
    """What the fetcher (and scheduler) should do with one URL.

    ``backoff_s`` is set only when robots.txt was unavailable (5xx / network error): the
    URL is not fetched now and the domain should wait that long before the next try.
    """

    allowed: bool
    crawl_delay_s: float | None = None
    backoff_s: float | None = None


_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")


def product_token(user_agent: str) -> str:
    """The name robots.txt groups match (RFC 9309 §2.2.1): ``crawlstream`` from
    ``crawlstream/0.1 (+https://example.invalid/bot)``. Matching the whole header instead
    would let a ``User-agent: example`` group apply because of the URL in the comment."""
    m = _PRODUCT_TOKEN.match(user_agent.strip())
    return m.group() if m else user_agent


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL: robots.txt applies per origin (RFC 9309 §2.3)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" if port is None or port == default else f"{scheme}://{host}:{port}"


def robots_url_for(url: str) -> str:
    return origin_of(url) + "/robots.txt"


def _decode(body: bytes) -> str:
    body = body[:MAX_ROBOTS_BYTES]
    # A whole or truncated UTF-8 BOM is skipped (Google spec "BOM-characters").
    for bom in (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"):
        if body.startswith(bom):
            body = body[len(bom) :]
            break
    return body.decode("utf-8", errors="replace")


class RobotsPolicy:
    """The rules of one origin, or the blanket answer RFC 9309 prescribes for its status."""

    __slots__ = ("_parser", "backoff_s", "kind", "reason")

    def __init__(
        self,
        kind: PolicyKind,
        *,
        parser: Protego | None = None,
        reason: str = "",
        backoff_s: float | None = None,
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.backoff_s = backoff_s
        self._parser = parser

    def __repr__(self) -> str:
        return f"RobotsPolicy({self.kind}, reason={self.reason!r})"

    @classmethod
    def parse(cls, body: bytes | str) -> RobotsPolicy:
        """Rules from a robots.txt body; only the first 500 KiB count; never raises on content."""
        text = body if isinstance(body, str) else _decode(body)
        if isinstance(body, str) and text.startswith("\ufeff"):
            text = text[1:]
        return cls("parsed", parser=Protego.parse(text), reason="parsed")

    @classmethod
    def allow_all(cls, reason: str) -> RobotsPolicy:
        return cls("allow_all", reason=reason)

    @classmethod
    def disallow_all(cls, reason: str, *, backoff_s: float) -> RobotsPolicy:
        return cls("disallow_all", reason=reason, backoff_s=backoff_s)

    @classmethod
    def from_response(cls, status: int, body: bytes, *, error_backoff_s: float) -> RobotsPolicy:
        """Apply RFC 9309 §2.3.1 to the final (post-redirect) response; status 0 = network error.

        A 3xx here means the redirect budget ran out: "if there are more than five
        consecutive redirects, crawlers MAY assume that the robots.txt file is unavailable"
        (which is 4xx-like: allow all).
        """
        if 200 <= status < 300:
            return cls.parse(body)
        if 300 <= status < 500:
            return cls.allow_all(f"robots.txt HTTP {status}: no rules apply")
        if status >= 500:
            return cls.disallow_all(f"robots.txt HTTP {status}: server error", backoff_s=error_backoff_s)
        return cls.disallow_all("robots.txt unreachable (network error)", backoff_s=error_backoff_s)

    def decide(self, url: str, user_agent: str) -> RobotsDecision:
        if self.kind == "allow_all":
            return RobotsDecision(True)
        if self.kind == "disallow_all":
            return RobotsDecision(False, backoff_s=self.backoff_s)
        assert self._parser is not None
        return RobotsDecision(self._parser.can_fetch(url, user_agent), self.crawl_delay_s(user_agent))

    def can_fetch(self, url: str, user_agent: str) -> bool:
        return self.decide(url, user_agent).allowed

    def crawl_delay_s(self, user_agent: str) -> float | None:
        """Crawl-delay (or Request-rate's seconds per request), at most MAX_CRAWL_DELAY_S."""
        if self._parser is None:
            return None
        delay = self._parser.crawl_delay(user_agent)
        if delay is None:
            rate = self._parser.request_rate(user_agent)
            if rate is not None and rate.requests > 0:
                # Compared as ints before dividing: "Request-rate: 1/<400 digits>" overflows a float.
                if rate.seconds >= int(MAX_CRAWL_DELAY_S) * rate.requests:
                    return MAX_CRAWL_DELAY_S
                delay = rate.seconds / rate.requests
        return min(float(delay), MAX_CRAWL_DELAY_S) if delay is not None else None

    @property
    def sitemaps(self) -> list[str]:
        return list(self._parser.sitemaps) if self._parser is not None else []


class RobotsCache:
    """Policies per origin with expiry; bounded (LRU) so a wide crawl keeps O(active origins).

    Error policies (disallow_all after 5xx / network errors) expire after their
    ``backoff_s`` so robots.txt is retried when the domain is due again.
    """

    def __init__(
        self,
        *,
        ttl_s: float = 86400.0,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, RobotsPolicy]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, origin: str) -> RobotsPolicy | None:
        entry = self._entries.get(origin)
        if entry is None:
            return None
        expires_at, policy = entry
        if self._clock() >= expires_at:
            del self._entries[origin]
            return None
        self._entries.move_to_end(origin)
        return policy

    def put(self, origin: str, policy: RobotsPolicy, ttl_s: float | None = None) -> None:
        """Cache ``policy``; ``ttl_s`` (an imported body's time left) shortens the cache's lifetime."""
        if ttl_s is None or ttl_s > self._ttl_s:
            ttl_s = self._ttl_s
        if policy.backoff_s is not None:
            ttl_s = min(ttl_s, policy.backoff_s)
        self._entries[origin] = (self._clock() + ttl_s, policy)
        self._entries.move_to_end(origin)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
