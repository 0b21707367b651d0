"""The one-line JSON summary ``crawlstream run --exit-when-done`` prints on stdout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from crawlstream.crawl._stats import CrawlStats

__all__ = ["CrawlSummary", "summarize"]


@dataclass(frozen=True)
class CrawlSummary:
    """``reason`` is why the run ended: ``drained``, ``max_pages`` or ``stopped`` (a signal).

    ``stats`` are the crawl's totals (across restarts of the same data dir); ``pages_this_run``,
    ``seconds`` and ``pages_per_s`` are this process's.
    """

    reason: str
    stats: CrawlStats
    pages_this_run: int
    seconds: float

    @property
    def pages_per_s(self) -> float:
        return self.pages_this_run / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        return {
            "reason": self.reason,
            "pages": s.pages,
            "results": s.results,
            "pages_this_run": self.pages_this_run,
            "seconds": round(self.seconds, 3),
            "pages_per_s": round(self.pages_per_s, 2),
            "by_outcome": dict(sorted(s.by_outcome.items())),
            "by_status": {str(k): v for k, v in sorted(s.by_status.items())},
            "truncated": s.truncated,
            "errors": s.errors,
        }

    def to_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


def summarize(reason: str, start: CrawlStats, end: CrawlStats, seconds: float) -> CrawlSummary:
    return CrawlSummary(reason=reason, stats=end, pages_this_run=end.pages - start.pages, seconds=seconds)
