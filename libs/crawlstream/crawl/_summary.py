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

    @property
    def hints(self) -> list[str]:
        """What a user should do about how the crawl went, when something stands out."""
        out: list[str] = []
        blocked = self.stats.by_outcome.get("blocked_private", 0)
        if blocked and blocked * 2 >= self.stats.results:
            out.append(
                f"{blocked} of {self.stats.results} fetches were refused by the network guard: those hosts "
                "resolve to private, loopback or reserved addresses. To crawl them on purpose, pass "
                "--allow-private-networks (CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS=true)"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        hints = self.hints
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
            **({"hints": hints} if hints else {}),
        }

    def to_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    def to_text(self) -> str:
        """The short human summary the terminal gets (the JSON line is for scripts)."""
        s = self.stats
        minutes, seconds = divmod(int(self.seconds), 60)
        return (
            f"crawl {self.reason} after {minutes}m{seconds:02d}s: {self.pages_this_run} pages this run "
            f"({self.pages_per_s:.1f}/s), {s.pages} in total, {s.errors} errors"
        )


def summarize(reason: str, start: CrawlStats, end: CrawlStats, seconds: float) -> CrawlSummary:
    return CrawlSummary(reason=reason, stats=end, pages_this_run=end.pages - start.pages, seconds=seconds)
