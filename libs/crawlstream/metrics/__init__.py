"""Prometheus metrics: the families each area exposes, and the endpoint every process serves.

Definitions live here, one module per area (fetch, politeness, store, index, links); the service loop's
own (events in/out/dead-lettered, consumer lag) are ``crawlstream.runtime.LoopMetrics`` and the
query API's ``crawlstream.api.ApiMetrics``. Names start ``crawlstream_``; labels are bounded
(topics, partitions, outcomes, tiers, route templates: never URLs or domains). Each class is
registered once per registry: get it with ``per_registry(cls, registry)``. Services observe;
libraries take the metrics object as a collaborator, or nothing. README: Metrics and logs
lists the families, ports and the Grafana dashboard (deploy/grafana).
"""

from crawlstream.metrics._fetch import FETCH_DURATION_BUCKETS_S, FetchMetrics, status_class
from crawlstream.metrics._index import BUILD_KINDS, INDEX_BUILD_BUCKETS_S, IndexMetrics, version_number
from crawlstream.metrics._links import LinkMetrics
from crawlstream.metrics._politeness import WAIT_BUCKETS_S, WAIT_REASONS, PolitenessMetrics
from crawlstream.metrics._registry import per_registry
from crawlstream.metrics._server import SERVICE_METRICS_PORTS, MetricsServer, metrics_port, serve_metrics
from crawlstream.metrics._store import StoreMetrics

__all__ = [
    "BUILD_KINDS",
    "FETCH_DURATION_BUCKETS_S",
    "INDEX_BUILD_BUCKETS_S",
    "SERVICE_METRICS_PORTS",
    "WAIT_BUCKETS_S",
    "WAIT_REASONS",
    "FetchMetrics",
    "IndexMetrics",
    "LinkMetrics",
    "MetricsServer",
    "PolitenessMetrics",
    "StoreMetrics",
    "metrics_port",
    "per_registry",
    "serve_metrics",
    "status_class",
    "version_number",
]
