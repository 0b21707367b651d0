"""Index metrics: which version is current, and what building it cost (observed by the index compactor)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BUILD_KINDS", "INDEX_BUILD_BUCKETS_S", "IndexMetrics", "version_number"]

# An incremental build over a few new lake files takes milliseconds; a full one over 10^8 rows minutes.
INDEX_BUILD_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
BUILD_KINDS = ("full", "incremental", "compaction", "nothing_new")


def version_number(version: str) -> int:
    """``000012-20250101T000000Z`` -> 12 (the manifest's sequence; 0 when it has none)."""
    head = version.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


class IndexMetrics:
    """One per registry: ``crawlstream.metrics.per_registry(IndexMetrics, registry)``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.version = Gauge(
            "crawlstream_index_version", "Sequence number of the current index version (0: none yet)", registry=registry
        )
        self.flipped_at = Gauge(
            "crawlstream_index_version_flipped_timestamp_seconds",
            "When this process last flipped the index to a new version (Unix time; 0: not yet)",
            registry=registry,
        )
        self.builds = Counter("crawlstream_index_builds", "Index builds, by kind", ["kind"], registry=registry)
        self.build_duration = Histogram(
            "crawlstream_index_build_duration_seconds",
            "Time an index build took, by kind (nothing_new: scanned and found no new lake file)",
            ["kind"],
            buckets=INDEX_BUILD_BUCKETS_S,
            registry=registry,
        )
        self.build_failures = Counter(
            "crawlstream_index_build_failures", "Index compactor ticks that failed (storage errors)", registry=registry
        )
        self.domains = Gauge("crawlstream_index_domains", "Domains in the current index version", registry=registry)
        self.pairs = Gauge(
            "crawlstream_index_pairs", "(domain, dataset) pairs in the current index version", registry=registry
        )
        self.active = Gauge(
            "crawlstream_index_compactor_active",
            "1 while this index compactor is the active one (it builds), 0 while it stands by",
            registry=registry,
        )
        self.skipped_disk_floor = Counter(
            "crawlstream_index_builds_skipped_disk_floor",
            "Index compactor ticks that built nothing because the index's disk was below data_dir_min_free_mb",
            registry=registry,
        )
        self.gc_removed_versions = Counter(
            "crawlstream_index_gc_removed_versions", "Old index versions removed by gc", registry=registry
        )

    def observe_build(
        self, kind: str, seconds: float, version: str | None, *, domains: int, pairs: int, now_s: float
    ) -> None:
        """One build; ``version`` is the version it flipped to (None: nothing new, nothing flipped)."""
        kind = kind if version is not None else "nothing_new"
        self.builds.labels(kind).inc()
        self.build_duration.labels(kind).observe(seconds)
        if version is not None:
            self.set_current(version)
            self.flipped_at.set(now_s)
            self.domains.set(domains)
            self.pairs.set(pairs)

    def set_current(self, version: str) -> None:
        self.version.set(version_number(version))
