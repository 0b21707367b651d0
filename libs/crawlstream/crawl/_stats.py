"""What the crawl has fetched so far, counted from ``fetch.results`` and kept across restarts.

``crawlstream run`` runs one extra consumer group (``crawlstream.run-stats``) over
``fetch.results``. Its counts live in ``<data_dir>/crawl/stats.json`` together with the
offsets they cover, and on assignment the consumer seeks to those offsets (not to the
group's commit): a crash between saving and committing neither loses nor double-counts a
result, so the summary of a resumed crawl is exact.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawlstream.bus import Consumer, Message, TopicPartition
from crawlstream.durable import write_atomically
from crawlstream.errors import StorageUnavailable
from crawlstream.events import FetchResult
from crawlstream.fetch import ERROR_OUTCOMES
from crawlstream.runtime import EventHandler
from crawlstream.status._topk import TopCounts
from crawlstream.topics import FETCH_RESULTS

__all__ = ["ERROR_OUTCOMES", "STATS_GROUP", "CrawlStats", "StatsHandler", "load_stats", "save_stats"]

logger = logging.getLogger(__name__)

STATS_GROUP = "crawlstream.run-stats"



@dataclass
class CrawlStats:
    """Counts of fetch results. ``pages`` are results that got an HTTP response (status > 0).

    ``top_domains``: pages per domain, bounded (``TopCounts``: exact until more than a few
    hundred domains, then the most frequent with an error bound), for the status page.
    ``body_bytes``: uncompressed body bytes of those pages.
    """

    results: int = 0
    pages: int = 0
    truncated: int = 0
    by_outcome: Counter[str] = field(default_factory=Counter)
    by_status: Counter[int] = field(default_factory=Counter)
    offsets: dict[int, int] = field(default_factory=dict)  # fetch.results partition -> next offset
    top_domains: TopCounts = field(default_factory=TopCounts)
    body_bytes: int = 0

    def add(self, result: FetchResult, partition: int, offset: int) -> None:
        self.results += 1
        self.by_outcome[result.outcome] += 1
        if result.status > 0:
            self.pages += 1
            self.by_status[result.status] += 1
            self.top_domains.add(result.domain)
            self.body_bytes += result.body_size_bytes
        if result.truncated:
            self.truncated += 1
        self.offsets[partition] = offset + 1

    @property
    def errors(self) -> int:
        """Failed fetches plus 5xx answers: what an operator watches."""
        failed = sum(n for outcome, n in self.by_outcome.items() if outcome in ERROR_OUTCOMES)
        return failed + sum(n for status, n in self.by_status.items() if status >= 500)

    def to_json(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "pages": self.pages,
            "truncated": self.truncated,
            "by_outcome": dict(sorted(self.by_outcome.items())),
            "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
            "offsets": {str(k): v for k, v in sorted(self.offsets.items())},
            "top_domains": self.top_domains.to_json(),
            "body_bytes": self.body_bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CrawlStats:
        return cls(
            results=int(data["results"]),
            pages=int(data["pages"]),
            truncated=int(data.get("truncated", 0)),
            by_outcome=Counter({str(k): int(v) for k, v in data["by_outcome"].items()}),
            by_status=Counter({int(k): int(v) for k, v in data["by_status"].items()}),
            offsets={int(k): int(v) for k, v in data["offsets"].items()},
            top_domains=TopCounts.from_json(data.get("top_domains") or {}),
            body_bytes=int(data.get("body_bytes", 0)),
        )

    def copy(self) -> CrawlStats:
        return CrawlStats.from_json(self.to_json())


def load_stats(path: Path) -> CrawlStats:
    """The saved counts, or empty ones when the crawl has none yet (or the file is damaged:
    the consumer then recounts from the beginning of ``fetch.results``)."""
    try:
        return CrawlStats.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return CrawlStats()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.warning("crawl stats %s unreadable (%s): recounting from the start of %s", path, exc, FETCH_RESULTS)
        return CrawlStats()


def save_stats(path: Path, stats: CrawlStats) -> None:
    """Replace the file atomically and durably (``write_atomically``): a kill -9 or a power
    loss leaves the old or the new one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageUnavailable(f"cannot write crawl stats {path}: {exc}") from exc
    write_atomically(path, json.dumps(stats.to_json()).encode("utf-8"))


class StatsHandler(EventHandler):
    """Counts ``fetch.results``; saves at most every ``save_interval_s`` and on ``close``."""

    def __init__(
        self,
        path: Path,
        consumer: Consumer,
        *,
        save_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._consumer = consumer
        self._save_interval_s = save_interval_s
        self._clock = clock
        self.stats = load_stats(path)
        self._dirty = False
        self._last_save = clock()
        self._lock = threading.Lock()  # the run's progress thread reads while the loop counts

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        # The file, not the group's commit, says what is counted (see the module docstring).
        for tp in partitions:
            self._consumer.seek(tp, self.stats.offsets.get(tp.partition, 0))

    def handle(self, event: FetchResult, message: Message) -> None:
        if message.offset < self.stats.offsets.get(message.partition, 0):
            return  # counted before the restart
        with self._lock:
            self.stats.add(event, message.partition, message.offset)
        self._dirty = True

    def end_batch(self) -> None:
        if self._dirty and self._clock() - self._last_save >= self._save_interval_s:
            self.save()

    def save(self) -> None:
        if self._dirty:
            save_stats(self.path, self.snapshot())
            self._dirty = False
        self._last_save = self._clock()

    def snapshot(self) -> CrawlStats:
        """A consistent copy, safe to take from another thread."""
        with self._lock:
            return self.stats.copy()
