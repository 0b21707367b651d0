"""Value types of the scheduler: fetch outcomes, tickets and the printable per-domain state."""

from __future__ import annotations

from dataclasses import dataclass

from crawlstream.frontier import HEADER_SIZE, FrontierEntry
from crawlstream.politeness._revisit import Validators

__all__ = [
    "BACKOFF_ERRORS",
    "BACKOFF_STATUSES",
    "EXCLUDED_ERROR",
    "ROBOTS_UNAVAILABLE_ERROR",
    "DomainState",
    "FetchOutcome",
    "FetchTicket",
]

BACKOFF_STATUSES = frozenset({429, 503})
BACKOFF_ERRORS = frozenset({"timeout", "lease_expired", "dns"})
# robots.txt answered 5xx or could not be read: RFC 9309's "complete disallow" holds until it
# can be read again, so the URL waits (the fetcher's back-off, then the usual retries); a URL a
# rule disallows ("robots") is final.
ROBOTS_UNAVAILABLE_ERROR = "robots_unavailable"
_RETRY_ERRORS = frozenset({"timeout", "connect", "lease_expired", "dns", ROBOTS_UNAVAILABLE_ERROR})
EXCLUDED_ERROR = "excluded"  # the fetcher skipped the request: its domain was excluded


@dataclass(frozen=True)
class FetchOutcome:
    """What the fetcher reports back for one ticket.

    ``status`` is the HTTP status (0 when no response arrived; then ``error`` says why:
    ``timeout``, ``connect``, ``dns``, ``robots``, ``robots_unavailable``, ``excluded`` ...).
    ``retry_after_s`` is the parsed Retry-After header; ``crawl_delay_s`` the host's robots.txt Crawl-delay, if any.
    ``validators`` is set when the response is a page worth revisiting (a 2xx page, or a 304
    to a revisit): its ETag, Last-Modified and body hash, kept for the next visit (ADR 022).
    """

    status: int
    elapsed_ms: float = 0.0
    retry_after_s: float | None = None
    crawl_delay_s: float | None = None
    error: str | None = None
    validators: Validators | None = None

    @property
    def backs_off(self) -> bool:
        """429, 503, timeouts and DNS failures tell us the server (or its name server) is
        struggling: slow down exponentially."""
        return self.status in BACKOFF_STATUSES or self.error in BACKOFF_ERRORS

    @property
    def retryable(self) -> bool:
        """Worth another attempt later: 429, any 5xx, a timeout, a refused connection, a
        failed DNS lookup (often transient: a resolver timeout, SERVFAIL) or a robots.txt
        that could not be read."""
        return self.status == 429 or 500 <= self.status <= 599 or self.error in _RETRY_ERRORS

    @property
    def excluded(self) -> bool:
        """Not fetched because the operator excluded the domain: the URL is parked, not retried."""
        return self.error == EXCLUDED_ERROR


@dataclass(frozen=True)
class FetchTicket:
    """One URL handed to the fetcher; its slot is held until ``Scheduler.complete``.
    ``validators``: set for a revisit, what the previous response said (a conditional request)."""

    partition: int
    entry: FrontierEntry
    dispatched_at_ms: int
    lease_deadline_ms: int
    validators: Validators | None = None

    @property
    def domain(self) -> str:
        return self.entry.domain

    @property
    def url(self) -> str:
        return self.entry.url


@dataclass(frozen=True)
class DomainState:
    """A domain's scheduling state as stored in Redis (Scrapy's downloader ``Slot``, printable)."""

    domain: str
    partition: int
    in_flight: int
    max_in_flight: int
    next_fetch_at_ms: int
    now_ms: int
    crawl_delay_ms: int
    last_response_ms: int
    backoff_level: int
    pages: int
    max_pages: int
    generation: int
    offset: int
    size: int
    reading: bool
    excluded: bool = False
    delay_override_ms: int | None = None
    lane_offset: int = HEADER_SIZE
    lane_size: int = HEADER_SIZE
    lane_priority: int = 0  # of the priority lane's next record

    @property
    def unread_bytes(self) -> int:
        return max(0, self.size - max(self.offset, HEADER_SIZE))

    @property
    def lane_unread_bytes(self) -> int:
        return max(0, self.lane_size - max(self.lane_offset, HEADER_SIZE))

    def __str__(self) -> str:
        wait_s = max(0, self.next_fetch_at_ms - self.now_ms) / 1000
        return (
            f"<DomainState {self.domain} p={self.partition} in_flight={self.in_flight}/{self.max_in_flight} "
            f"next_in={wait_s:.3f}s crawl_delay={self.crawl_delay_ms / 1000:g}s "
            f"last_response={self.last_response_ms}ms backoff={self.backoff_level} "
            f"pages={self.pages}/{self.max_pages} unread={self.unread_bytes}B gen={self.generation}"
            f"{f' lane={self.lane_unread_bytes}B@{self.lane_priority}' if self.lane_unread_bytes else ''}"
            f"{' reading' if self.reading else ''}"
            f"{'' if self.delay_override_ms is None else f' delay_override={self.delay_override_ms / 1000:g}s'}"
            f"{' EXCLUDED' if self.excluded else ''}>"
        )
