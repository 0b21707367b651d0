"""Fetch metrics: what each fetch came to and how long it took (observed by the fetcher service)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["FETCH_DURATION_BUCKETS_S", "FetchMetrics", "status_class"]

# A demo page answers in a millisecond, a slow server in tens of seconds (fetch.timeout_s caps it).
FETCH_DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def status_class(status: int) -> str:
    """``2xx`` ... ``5xx``; ``none`` when no HTTP response arrived (status 0: DNS, connect, robots)."""
    return f"{status // 100}xx" if 100 <= status <= 599 else "none"


class FetchMetrics:
    """Labels are bounded: ``outcome`` is one of ``crawlstream.fetch.OUTCOMES``, ``status`` a class.

    One per registry: ``crawlstream.metrics.per_registry(FetchMetrics, registry)``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.outcomes = Counter(
            "crawlstream_fetch_outcomes",
            "Fetch results sent, by outcome (ok, http_error, timeout, dns_error, robots_disallowed, ...) "
            "and HTTP status class",
            ["outcome", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "crawlstream_fetch_duration_seconds",
            "Time from request to the end of the body (or the failure), by outcome",
            ["outcome"],
            buckets=FETCH_DURATION_BUCKETS_S,
            registry=registry,
        )
        self.body_bytes = Counter(
            "crawlstream_fetch_body_bytes",
            "Decoded body bytes received (capped at fetch.max_body_bytes)",
            registry=registry,
        )
        self.in_flight = Gauge("crawlstream_fetches_in_flight", "Fetches started and not yet sent", registry=registry)
        self._children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def observe(self, outcome: str, status: int, elapsed_ms: float, body_bytes: int) -> None:
        children = self._children.get((outcome, status))
        if children is None:  # labels() validates and locks on every call: look each series up once
            children = self._children[(outcome, status)] = (
                self.outcomes.labels(outcome, status_class(status)),
                self.duration.labels(outcome),
            )
        children[0].inc()
        children[1].observe(max(0.0, elapsed_ms) / 1000.0)
        if body_bytes:
            self.body_bytes.inc(body_bytes)
