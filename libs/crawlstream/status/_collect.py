"""What the status page shows, gathered from what each part already records (ADR 020).

Sources, read-only, each optional (a part that cannot be read is ``None`` in the answer and
named in ``unavailable``; nothing here raises for a missing or damaged source):

* **Crawl progress**: ``<data_dir>/crawl/stats.json``, the counts ``crawlstream run``'s stats
  consumer saves every second (pages, outcomes, statuses, top domains); its age says whether
  a crawl is running. Pages per second are measured here, between collections. Distributed
  services write no such file: then only fetch results (``fetch.results`` end offsets) count.
* **Bus** (``OffsetsSource``: the embedded log's files, or the Kafka cluster's admin API):
  each consumer group's lag (end minus committed offsets over the topics it commits), its
  rate (committed offsets per second between collections), DLQ sizes (end offsets of
  ``*.dlq`` topics), pages stored (end offsets of ``content.stored``) and the queued URLs
  estimate ``crawlstream run`` prints (``urls.frontier`` minus ``fetch.requests``).
* **Content store**: the store's own ``stats()`` when this process holds it (the API with
  ``serve_content``), saved as it is read; otherwise the writer (bucket compressor) owns it:
  its file sizes per tier are read now, and the URLs, raw bytes and ratio are the last saved
  by a process that held it, with their age (``status/_store_stats.py``).
* **Index**: ``index/manifest.json`` (current version, its stats) and the versions kept.

One collection costs a few file reads per partition (the embedded reader remembers where
it stopped) or a few admin round trips on Kafka; answers are reused for ``min_interval_s``
so several open pages do not multiply the work.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from crawlstream.errors import CrawlstreamError
from crawlstream.fetch import ERROR_OUTCOMES
from crawlstream.status._store_stats import read_store_stats, save_store_stats
from crawlstream.status._topk import TopCounts
from crawlstream.topics import CONTENT_STORED, FETCH_REQUESTS, FETCH_RESULTS, URLS_FRONTIER

if TYPE_CHECKING:
    from crawlstream.settings import Settings
    from crawlstream.store import ShardedStore

__all__ = ["TOP_DOMAINS", "OffsetsSource", "StatusCollector"]

logger = logging.getLogger(__name__)

TOP_DOMAINS = 10
_RATE_WINDOW_S = 10.0
_STORE_STATS_INTERVAL_S = 30.0  # ShardedStore.stats() walks every entry: not every poll
# What a damaged, half-written or newer-format file can raise while it is parsed.
_READ_ERRORS = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, struct.error, CrawlstreamError)
_STATS_FILE = Path("crawl") / "stats.json"
# What only ShardedStore.stats() counts (a process that sizes the files shows the last saved).
_COUNTED_BY_THE_STORE = ("urls", "raw_bytes", "ratio", "quarantined_urls")


class OffsetsSource(Protocol):
    """Where the bus's offsets come from (``EmbeddedOffsets``, ``KafkaOffsets``). Never raises:
    an unreadable part is None / empty."""

    def available(self) -> bool: ...

    def topics(self) -> list[str]: ...

    def end_offsets(self, topic: str) -> list[int] | None: ...

    def groups(self) -> list[str]: ...

    def committed(self, group: str) -> dict[str, dict[int, int]]: ...

    def close(self) -> None: ...


class _Rate:
    """Per second over the last ``window_s`` seconds, from successive (time, total) samples."""

    def __init__(self, window_s: float = _RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: list[tuple[float, int]] = []

    def update(self, now_s: float, total: int) -> float | None:
        if self._samples and total < self._samples[-1][1]:
            self._samples.clear()  # a reset (new data dir, recount): start over
        self._samples.append((now_s, total))
        while len(self._samples) > 2 and now_s - self._samples[1][0] >= self.window_s:
            self._samples.pop(0)
        t0, n0 = self._samples[0]
        return round((total - n0) / (now_s - t0), 2) if now_s > t0 else None


@dataclass
class _Rates:
    series: dict[str, _Rate] = field(default_factory=dict)

    def update(self, key: str, now_s: float, total: int) -> float | None:
        return self.series.setdefault(key, _Rate()).update(now_s, total)


class StatusCollector:
    """Builds the ``/v1/status`` document; thread-safe (one collection at a time).

    ``bus``: None when no bus is configured. ``store``: a store this process holds (else the
    files of ``<data_dir>/store`` are sized). ``wall_clock`` stamps answers; ``clock`` measures rates.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        bus: OffsetsSource | None,
        bus_backend: str | None,
        store: ShardedStore | None = None,
        min_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.data_dir = data_dir
        self.bus = bus
        self.bus_backend = bus_backend
        self.store = store
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._rates = _Rates()
        self._last: tuple[float, dict[str, Any]] | None = None
        self._store_stats: tuple[float, dict[str, Any]] | None = None
        self._error_outcomes = ERROR_OUTCOMES

    @classmethod
    def from_settings(cls, settings: Settings, *, store: ShardedStore | None = None) -> StatusCollector:
        """Kafka when ``KAFKA_BOOTSTRAP_SERVERS`` is set (as ``open_bus``), else the embedded
        log's files under ``<data_dir>/bus``."""
        bus: OffsetsSource
        if settings.kafka_bootstrap_servers:
            from crawlstream.status._kafka_offsets import KafkaOffsets

            bus, backend = KafkaOffsets.from_settings(settings), "kafka"
        else:
            from crawlstream.status._embedded_offsets import EmbeddedOffsets

            bus, backend = EmbeddedOffsets(settings.data_dir / "bus"), "embedded"
        return cls(settings.data_dir, bus=bus, bus_backend=backend, store=store)

    def close(self) -> None:
        """Release the bus clients (Kafka consumers kept per group); the store is the caller's."""
        if self.bus is not None:
            self.bus.close()

    def collect(self) -> dict[str, Any]:
        """The current document (a copy of the last one if asked again within ``min_interval_s``)."""
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last[0] < self.min_interval_s:
                return self._last[1]
            doc = self._collect(now)
            self._last = (now, doc)
            return doc

    # -- the parts -------------------------------------------------------------------------

    def _collect(self, now: float) -> dict[str, Any]:
        unavailable: dict[str, str] = {}
        stats = self._part("crawl", unavailable, self._read_crawl_stats)
        bus = self._part("bus", unavailable, lambda: self._read_bus(now))
        return {
            "generated_at_ms": int(self._wall_clock() * 1000),
            "data_dir": str(self.data_dir),
            "crawl": self._part("crawl", unavailable, lambda: self._crawl(stats, bus, now)),
            "services": bus["services"] if bus else None,
            "errors": self._part("errors", unavailable, lambda: self._errors(stats, bus)),
            "top_domains": self._part("top_domains", unavailable, lambda: self._top_domains(stats)),
            "store": self._part("store", unavailable, lambda: self._read_store(now)),
            "index": self._part("index", unavailable, self._read_index),
            "bus": {"backend": self.bus_backend, "topics": bus["topics"] if bus else None},
            "unavailable": unavailable,
        }

    @staticmethod
    def _part(name: str, unavailable: dict[str, str], read: Callable[[], dict[str, Any] | None]) -> Any:
        """``read()``, or None with the reason in ``unavailable`` (the page shows n/a)."""
        try:
            found = read()
        except _READ_ERRORS as exc:
            logger.debug("status: %s unreadable: %s", name, exc)
            unavailable[name] = f"{type(exc).__name__}: {exc}"
            return None
        if found is None:
            unavailable.setdefault(name, "not found")
        return found

    def _read_crawl_stats(self) -> dict[str, Any] | None:
        path = self.data_dir / _STATS_FILE
        try:
            raw = path.read_bytes()
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return None
        data = json.loads(raw)
        data["age_s"] = max(0.0, round(self._wall_clock() - mtime, 1))
        return dict(data)

    def _read_bus(self, now: float) -> dict[str, Any] | None:
        bus = self.bus
        if bus is None or not bus.available():
            return None
        topics = bus.topics()
        ends: dict[str, list[int]] = {}
        for topic in topics:
            found = bus.end_offsets(topic)
            if found is not None:
                ends[topic] = found
        services = []
        for group in bus.groups():
            committed = bus.committed(group)
            lag = consumed = 0
            for topic, parts in committed.items():
                topic_ends = ends.get(topic)
                if topic_ends is None:
                    continue
                for p, end in enumerate(topic_ends):
                    done = parts.get(p, 0)
                    lag += max(0, end - done)
                    consumed += done
            services.append(
                {
                    "group": group,
                    "service": group.removeprefix("crawlstream."),
                    "topics": sorted(committed),
                    "lag": lag,
                    "consumed": consumed,
                    "rate_per_s": self._rates.update("group:" + group, now, consumed),
                }
            )
        return {"topics": {t: sum(e) for t, e in ends.items()}, "services": services}

    def _crawl(self, stats: dict[str, Any] | None, bus: dict[str, Any] | None, now: float) -> dict[str, Any]:
        topics: dict[str, int] = bus["topics"] if bus else {}
        queued = None
        if URLS_FRONTIER in topics and FETCH_REQUESTS in topics:
            queued = max(0, topics[URLS_FRONTIER] - topics[FETCH_REQUESTS])
        pages = _int(stats, "pages")
        # Without the run's stats file (distributed services write none), the fetch results
        # produced so far still count: the end offsets of fetch.results.
        results = _int(stats, "results") if stats is not None else topics.get(FETCH_RESULTS)
        return {
            "pages": pages,
            "results": results,
            "pages_per_s": self._rates.update("pages", now, pages) if pages is not None else None,
            "results_per_s": self._rates.update("results", now, results) if results is not None else None,
            "stored": topics.get(CONTENT_STORED),
            "queued_urls": queued,
            "body_bytes": _int(stats, "body_bytes"),
            "stats_age_s": stats.get("age_s") if stats else None,
        }

    def _errors(self, stats: dict[str, Any] | None, bus: dict[str, Any] | None) -> dict[str, Any]:
        by_kind: dict[str, int] | None = None
        if stats is not None:
            outcomes = stats.get("by_outcome") or {}
            by_kind = {str(k): int(v) for k, v in sorted(outcomes.items()) if k in self._error_outcomes}
            statuses = {int(k): int(v) for k, v in (stats.get("by_status") or {}).items()}
            by_kind["http_4xx"] = sum(n for s, n in statuses.items() if 400 <= s < 500)
            by_kind["http_5xx"] = sum(n for s, n in statuses.items() if s >= 500)
        dlq = {t: n for t, n in sorted(bus["topics"].items()) if t.endswith(".dlq")} if bus else None
        return {"by_kind": by_kind, "dlq": dlq}

    @staticmethod
    def _top_domains(stats: dict[str, Any] | None) -> dict[str, Any] | None:
        if stats is None or "top_domains" not in stats:
            return None
        top = TopCounts.from_json(stats["top_domains"])
        return {
            "exact": top.exact,
            "max_error": top.max_dropped,
            "items": [{"domain": d, "pages": n} for d, n in top.top(TOP_DOMAINS)],
        }

    def _read_store(self, now: float) -> dict[str, Any] | None:
        if self.store is not None:
            if self._store_stats is None or now - self._store_stats[0] >= _STORE_STATS_INTERVAL_S:
                # saved for a later API that sizes the files only (status/_store_stats.py)
                saved = save_store_stats(self.data_dir, self.store.stats(), now=self._wall_clock())
                self._store_stats = (now, saved)
            saved = self._store_stats[1]
            numbers = {k: v for k, v in saved.items() if k != "saved_at_ms"}
            return {"source": "store", **numbers, "stats_age_s": self._saved_age_s(saved)}
        root = self.data_dir / "store"
        if not root.is_dir():
            return None
        by_tier: dict[str, int] = {}
        segments = root / "segments"
        if segments.is_dir():
            for tier_dir in sorted(p for p in segments.iterdir() if p.is_dir()):
                by_tier[tier_dir.name] = _tree_bytes(tier_dir.glob("*.seg"))
        # The writer (bucket compressor) owns the store: its files are sized now; what only the
        # store's own stats count is the last saved (None when nothing saved any).
        try:
            last = read_store_stats(self.data_dir)
        except _READ_ERRORS as exc:
            logger.debug("status: saved store stats unreadable: %s", exc)
            last = None
        return {
            "source": "files",
            **{k: None if last is None else last.get(k) for k in _COUNTED_BY_THE_STORE},
            "stored_bytes": _tree_bytes(root.rglob("*")),
            "bytes_by_tier": by_tier,
            "stats_age_s": None if last is None else self._saved_age_s(last),
        }

    def _saved_age_s(self, saved: dict[str, Any]) -> float:
        return max(0.0, round(self._wall_clock() - int(saved["saved_at_ms"]) / 1000, 1))

    def _read_index(self) -> dict[str, Any] | None:
        from crawlstream.index._manifest import read_manifest

        manifest = read_manifest(self.data_dir)
        if manifest is None:
            return None
        current = manifest.current()
        stats = current.stats
        return {
            "version": current.version,
            "created_at": current.created_at,
            "domains": stats.get("domains"),
            "urls": stats.get("urls"),
            "datasets": len(stats.get("datasets", ())),
            "bytes": stats.get("index_bytes"),
            "versions_kept": len(manifest.versions),
        }


def _int(stats: dict[str, Any] | None, key: str) -> int | None:
    if stats is None or key not in stats:
        return None
    return int(stats[key])


def _tree_bytes(paths: Iterable[Path]) -> int:
    total = 0
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue  # removed while we walked (compaction)
        if not os.path.isdir(p):
            total += st.st_size
    return total
