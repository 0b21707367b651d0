"""Prometheus metrics of the query API, registered on the registry the caller passes in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ApiMetrics"]

# Sub-millisecond to seconds: the warm goals are 2-5 ms p99, cold ones up to a second.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    """Counts and latencies labelled by route *template* (never the raw path: bounded cardinality)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "crawlstream_api_requests",
            "HTTP requests served, by route template, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "crawlstream_api_request_duration_seconds",
            "time from request to response, by route template and status",
            ["route", "status"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.in_flight = Gauge("crawlstream_api_requests_in_flight", "requests being served", registry=registry)
        self.internal_errors = Counter(
            "crawlstream_api_internal_errors",
            "requests that ended in a 500 (bugs: see the log by request id)",
            registry=registry,
        )
        self.token_reload_failures = Counter(
            "crawlstream_api_token_reload_failures",
            "times the tokens file changed but could not be loaded (the previous tokens stayed in force)",
            registry=registry,
        )
        self.integrity_errors = Counter(
            "crawlstream_api_integrity_errors",
            "requests answered 502 because stored index or lake bytes failed their checksum (corrupt data)",
            registry=registry,
        )
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self.timeouts = Counter(
            "crawlstream_api_timeouts", "requests whose index work exceeded request_timeout_s", registry=registry
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        children = self._children.get((route, method, status))
        if children is None:  # labels() validates and locks on every call: look each series up once
            code = str(status)
            children = self._children[(route, method, status)] = (
                self.requests.labels(route, method, code),
                self.latency.labels(route, code),
            )
        children[0].inc()
        children[1].observe(seconds)
