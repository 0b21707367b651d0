"""Live progress of a crawl: one refreshed line on a terminal, a plain line every few seconds otherwise.

The display is the terminal's one line of ``crawlstream run`` / ``crawlstream demo`` (their log lines
go to a file in the data dir unless ``--log-level`` is given), so it is written to the stream, not logged.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

__all__ = ["Progress", "ProgressReporter", "RateMeter", "eta_seconds", "format_progress"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """One observation of the crawl (counts are totals of the data dir, rates of this run).

    ``queued_urls`` is an estimate from the bus (URLs the deduper forwarded minus requests
    the scheduler issued; retries make it approximate). ``domains_waiting`` are domains with
    unread URLs in the scheduler's ready queues; ``in_flight`` requests sent but unanswered.
    """

    elapsed_s: float
    pages: int
    pages_per_s: float
    queued_urls: int
    domains_waiting: int
    in_flight: int
    errors: int
    lag: int
    eta_s: float | None = None  # known when the crawl has a page budget (--max-pages) and a rate


def format_progress(p: Progress) -> str:
    eta = f" | ETA {_clock(p.eta_s)}" if p.eta_s is not None else ""
    return (
        f"{_clock(p.elapsed_s)} pages {p.pages} ({p.pages_per_s:.1f}/s) | queued ~{p.queued_urls} URLs | "
        f"domains {p.domains_waiting} waiting, {p.in_flight} in flight | errors {p.errors} | backlog {p.lag}{eta}"
    )


def eta_seconds(pages: int, max_pages: int, pages_per_s: float) -> float | None:
    """Seconds to ``max_pages`` at the current rate; None without a budget or a rate."""
    if max_pages <= 0 or pages_per_s <= 0:
        return None
    return max(0, max_pages - pages) / pages_per_s


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


class RateMeter:
    """Events per second over the last ``window_s`` seconds (a moving window, not since start)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def update(self, now_s: float, total: int) -> float:
        self._samples.append((now_s, total))
        while len(self._samples) > 2 and now_s - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t0, n0 = self._samples[0]
        return (total - n0) / (now_s - t0) if now_s > t0 else 0.0


class ProgressReporter:
    """Shows ``Progress`` on ``stream``: rewritten in place when it is a terminal, else one plain
    line at most every ``log_interval_s`` (a pipe or a CI log gets a line every few seconds)."""

    def __init__(
        self,
        stream: TextIO,
        *,
        is_tty: bool | None = None,
        log_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self.is_tty = stream.isatty() if is_tty is None else is_tty
        self._log_interval_s = log_interval_s
        self._clock = clock
        self._last_log: float | None = None
        self._shown = False

    def update(self, progress: Progress, *, force: bool = False) -> None:
        line = format_progress(progress)
        if self.is_tty:
            self._stream.write("\r" + line + "\x1b[K")
            self._stream.flush()
            self._shown = True
            return
        now = self._clock()
        if force or self._last_log is None or now - self._last_log >= self._log_interval_s:
            self._last_log = now
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        """End the refreshed line so later output starts on a fresh one."""
        if self.is_tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = False
