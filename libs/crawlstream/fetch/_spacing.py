"""The fetcher's own floor under each domain's spacing: a page request to a registered domain
starts only once the domain's delay has passed since its previous request *ended*, whatever
order and timing the requests arrive in.

Why the fetcher keeps one when the scheduler already spaces its releases: the scheduler spaces
the moments it *releases* requests, and a request's way to the fetcher can be delayed. A
fetcher restarted after an outage, or one that takes over partitions, receives a backlog of
requests released seconds apart all at once, and a replayed request whose result never reached
the bus is fetched again at once (seen as two requests to one domain 16 ms apart after a
cluster outage, with a 50 ms delay). In steady state the scheduler's spacing, measured from the
same end of the previous fetch, is the one that waits, and this floor never does.

A domain's fetches in this process take turns (``Fetcher`` holds a per-domain slot from the
wait to the end of the response); the delay is the larger of ``scheduler.min_delay_s`` and the
robots.txt Crawl-delay, but at most ``cap_s`` (the fetch timeout): a fetch waiting here holds
its concurrency slot, and a longer Crawl-delay is the scheduler's alone to keep. Off (0) when a
domain may have more than one request in flight (``scheduler.max_in_flight_per_domain`` > 1):
then its requests are meant to overlap. Fetchers of one domain are one partition's owner at a
time, so a process-local floor covers the domain.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["DomainSpacing"]

_PRUNE_AT = 100_000  # domains remembered before the ones no longer constraining anything are dropped


class DomainSpacing:
    """When each domain may be requested next; the caller serialises a domain's fetches."""

    def __init__(self, floor_s: float, *, cap_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.floor_s = max(0.0, floor_s)
        self.cap_s = cap_s
        self._clock = clock
        self._free_at: dict[str, float] = {}  # domain -> earliest start of its next request
        self.waits = 0  # requests held back (each one arrived inside its domain's spacing)
        self.waited_s = 0.0

    @property
    def enabled(self) -> bool:
        return self.floor_s > 0

    def wait_s(self, domain: str) -> float:
        """Seconds a request of ``domain`` must wait before it starts (0: at once)."""
        if not self.enabled:
            return 0.0
        wait = self._free_at.get(domain, 0.0) - self._clock()
        if wait <= 0:
            return 0.0
        self.waits += 1
        self.waited_s += wait
        return wait

    def ended(self, domain: str, crawl_delay_s: float | None = None) -> None:
        """A request of ``domain`` ended now: the next one waits its delay from here."""
        if not self.enabled:
            return
        now = self._clock()
        if len(self._free_at) >= _PRUNE_AT:
            self._free_at = {d: t for d, t in self._free_at.items() if t > now}
        delay = min(max(self.floor_s, crawl_delay_s or 0.0), max(self.floor_s, self.cap_s))
        self._free_at[domain] = now + delay
