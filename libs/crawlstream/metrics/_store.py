"""Content store metrics: sizes and compression ratio per tier, and what the bucket compressor wrote.

Sizes come from ``ShardedStore.stats()`` of the shards the member owns (members' sizes add up:
the dashboard sums them), read when Prometheus scrapes, at most once per ``min_interval_s`` (it
walks the store's index and lists its segments; between reads the last one is served). Write
counters are observed by the bucket compressor as it stores pages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crawlstream.errors import CrawlstreamError

if TYPE_CHECKING:
    from crawlstream.store import StoreStats
    from crawlstream.store._codec_cache import CodecCache

__all__ = ["StoreMetrics"]

logger = logging.getLogger(__name__)


class StoreMetrics:
    """One per registry: ``crawlstream.metrics.per_registry(StoreMetrics, registry)``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pages_stored = Counter(
            "crawlstream_store_pages_stored",
            "Pages put in the content store by the bucket compressor",
            registry=registry,
        )
        self.put_bytes = Counter(
            "crawlstream_store_put_bytes",
            "Bytes of the pages put: raw (decoded body) and stored (the record written, hot tier)",
            ["kind"],
            registry=registry,
        )
        self._raw = self.put_bytes.labels("raw")
        self._stored = self.put_bytes.labels("stored")
        self._sizes = _StoreSizes()
        registry.register(self._sizes)
        self._codecs = _CodecCacheGauges()
        registry.register(self._codecs)

    def observe_put(self, raw_bytes: int, stored_bytes: int) -> None:
        self.pages_stored.inc()
        self._raw.inc(raw_bytes)
        self._stored.inc(stored_bytes)

    def watch(self, stats: Callable[[], StoreStats] | None, min_interval_s: float = 0.0) -> None:
        """Serve the sizes of ``stats`` (a store's ``stats``) from now on; the previous store's go.
        None: serve none (call it before closing the store)."""
        self._sizes.watch(stats, min_interval_s)

    def watch_codec_cache(self, cache: CodecCache | None) -> None:
        """Serve the fill of ``cache`` (a store's zstd dictionaries and contexts) from now on. It
        fills towards ``store.codec_cache_bytes`` as domains get dictionaries (before the budget,
        it took a soak's bucket compressor from 214 to 417 MB: ADR 034), so a memory curve that
        climbs is read against it. None: serve none."""
        self._codecs.cache = cache


class _CodecCacheGauges(Collector):
    def __init__(self) -> None:
        self.cache: CodecCache | None = None

    def describe(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        return list(_codec_families())

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        families = _codec_families()
        cache = self.cache
        if cache is not None:
            held, entries, budget, evictions = families
            held.add_metric([], cache.bytes)
            entries.add_metric([], len(cache))
            budget.add_metric([], cache.budget_bytes)
            evictions.add_metric([], cache.evictions)
        yield from families


def _codec_families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
    return (
        GaugeMetricFamily(
            "crawlstream_store_codec_cache_bytes",
            "Estimated bytes of the zstd dictionaries and contexts the store keeps in memory",
        ),
        GaugeMetricFamily("crawlstream_store_codec_cache_entries", "Dictionaries and contexts held in memory"),
        GaugeMetricFamily("crawlstream_store_codec_cache_budget_bytes", "store.codec_cache_bytes: the cache's bound"),
        CounterMetricFamily(
            "crawlstream_store_codec_cache_evictions",
            "Dictionaries and contexts dropped past the budget (rebuilt when next needed)",
        ),
    )


class _StoreSizes(Collector):
    def __init__(self) -> None:
        self._stats: Callable[[], StoreStats] | None = None
        self._min_interval_s = 0.0
        self._last: StoreStats | None = None
        self._read_at = float("-inf")
        self._warned = False
        self._lock = threading.Lock()  # two scrapes at once read the store once

    def watch(self, stats: Callable[[], StoreStats] | None, min_interval_s: float) -> None:
        with self._lock:
            self._stats, self._min_interval_s, self._last, self._read_at = stats, min_interval_s, None, float("-inf")

    def _current(self) -> StoreStats | None:
        with self._lock:
            now = time.monotonic()
            if self._stats is not None and now - self._read_at >= self._min_interval_s:
                try:
                    self._last = self._stats()
                    self._read_at = now
                except (OSError, CrawlstreamError) as exc:  # a segment gone mid-walk: the next scrape reads again
                    if not self._warned:
                        self._warned = True
                        logger.warning("store metrics: reading the store's sizes failed (%s); serving the last", exc)
            return self._last

    def describe(self) -> list[GaugeMetricFamily]:
        return list(_families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = self._current()
        families = _families()
        if stats is None:
            yield from families
            return
        tier_bytes, live, urls, raw, ratio, total_bytes, total_raw, total_ratio, urls_total = families
        for tier, row in sorted(stats.by_tier.items()):
            tier_bytes.add_metric([tier], row.get("bytes", 0))
            live.add_metric([tier], row.get("live_bytes", 0))
            urls.add_metric([tier], row.get("urls", 0))
            if "raw_bytes" in row:  # when the store reports raw bytes per tier
                raw.add_metric([tier], row["raw_bytes"])
                if row.get("live_bytes"):
                    ratio.add_metric([tier], row["raw_bytes"] / row["live_bytes"])
        total_bytes.add_metric([], stats.stored_bytes)
        total_raw.add_metric([], stats.raw_bytes)
        total_ratio.add_metric([], stats.ratio)
        urls_total.add_metric([], stats.urls)
        yield from families


def _families() -> list[GaugeMetricFamily]:
    return [
        GaugeMetricFamily("crawlstream_store_tier_bytes", "Segment bytes on disk per tier", labels=["tier"]),
        GaugeMetricFamily(
            "crawlstream_store_tier_live_bytes",
            "Segment bytes live pages use per tier (the rest is dead space compaction frees)",
            labels=["tier"],
        ),
        GaugeMetricFamily("crawlstream_store_tier_urls", "Live URLs per tier", labels=["tier"]),
        GaugeMetricFamily(
            "crawlstream_store_tier_raw_bytes", "Raw (decoded) bytes of the live pages per tier", labels=["tier"]
        ),
        GaugeMetricFamily(
            "crawlstream_store_tier_ratio",
            "Compression ratio per tier: raw bytes / live segment bytes",
            labels=["tier"],
        ),
        GaugeMetricFamily(
            "crawlstream_store_bytes", "Every byte the store keeps on disk (segments, dictionaries, index, other)"
        ),
        GaugeMetricFamily("crawlstream_store_raw_bytes", "Raw (decoded) bytes of every live page"),
        GaugeMetricFamily("crawlstream_store_ratio", "Compression ratio of the whole store: raw bytes / stored bytes"),
        GaugeMetricFamily("crawlstream_store_urls", "Live URLs in the store"),
    ]
