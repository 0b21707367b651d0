"""Politeness metrics: how long domains are made to wait, and what the scheduler did.

The scheduler library observes each wait as it sets it (``observe_wait``); its event counts
(``Scheduler.stats``) are read when Prometheus scrapes; the scheduler service samples its
ready domains and requests in flight (``set_pending``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["WAIT_BUCKETS_S", "WAIT_REASONS", "PolitenessMetrics"]

# From the 1 s default spacing to a day of back-off (the longest a Retry-After is honoured).
WAIT_BUCKETS_S = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)
WAIT_REASONS = ("min_delay", "override", "crawl_delay", "response_time", "backoff", "retry_after", "held")


class PolitenessMetrics:
    """One per registry: ``crawlstream.metrics.per_registry(PolitenessMetrics, registry)``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.wait = Histogram(
            "crawlstream_politeness_wait_seconds",
            "Wait imposed on a domain before its next fetch, set when a fetch completes, by what decided it "
            "(min_delay, override, crawl_delay, response_time, backoff, retry_after, held)",
            ["reason"],
            buckets=WAIT_BUCKETS_S,
            registry=registry,
        )
        self._wait_children = {reason: self.wait.labels(reason) for reason in WAIT_REASONS}
        self.domains_ready = Gauge(
            "crawlstream_scheduler_domains_ready",
            "Domains waiting in the ready queues of the partitions a scheduler owns (sampled every "
            "metrics.lag_interval_s; 0 with requests_in_flight 0 and every lag 0: the crawl is drained)",
            registry=registry,
        )
        self.requests_in_flight = Gauge(
            "crawlstream_scheduler_requests_in_flight",
            "Requests handed out and not completed in the partitions a scheduler owns (sampled)",
            registry=registry,
        )
        self._events = _EventsCollector()
        registry.register(self._events)

    def observe_wait(self, reason: str, wait_s: float) -> None:
        self._wait_children[reason].observe(max(0.0, wait_s))

    def set_pending(self, domains_ready: int, requests_in_flight: int) -> None:
        self.domains_ready.set(domains_ready)
        self.requests_in_flight.set(requests_in_flight)

    def watch_events(self, stats: Mapping[str, int]) -> None:
        """Expose ``stats`` (the live ``Scheduler.stats`` counter) as ``crawlstream_scheduler_events_total``;
        a scheduler built again (after an outage) replaces the previous one's."""
        self._events.source = stats


class _EventsCollector(Collector):
    def __init__(self) -> None:
        self.source: Mapping[str, int] = {}

    def describe(self) -> list[CounterMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        items = sorted(dict(self.source).items())  # one C-level copy: atomic against the loop's updates
        for event, count in items:
            family.add_metric([event], count)
        yield family

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "crawlstream_scheduler_events",
            "What the politeness scheduler did: enqueued, dispatched, completed, retried, gave_up, "
            "leases_expired, skipped_* (the scheduler's own counts, since its start)",
            labels=["event"],
        )
