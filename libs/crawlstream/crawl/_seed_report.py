"""What a bulk seeding reports: every line's outcome (``SeedReport``) and its progress on a
terminal or in a log (``SeedProgress``)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["SeedProgress", "SeedReport"]


@dataclass
class SeedReport:
    """What became of every input line: each non-blank, non-comment line lands in exactly one
    of ``sent``, ``duplicate`` (seen within the recent-URL window), ``invalid`` (by reason)."""

    lines: int = 0
    sent: int = 0
    duplicate: int = 0
    invalid_by_reason: Counter[str] = field(default_factory=Counter)
    blank: int = 0
    comments: int = 0
    inputs: int = 0
    raw_forms: int = 0
    """Seeds not written canonically whose raw form went to ``urls.records`` (ADR 024)."""
    seconds: float = 0.0

    @property
    def invalid(self) -> int:
        return sum(self.invalid_by_reason.values())

    def add(self, lines: int, sent: int, duplicate: int, blank: int, comments: int) -> None:
        self.lines += lines
        self.sent += sent
        self.duplicate += duplicate
        self.blank += blank
        self.comments += comments

    def to_json(self) -> dict[str, Any]:
        return {
            "seeded": self.sent,
            "lines": self.lines,
            "outcomes": {"sent": self.sent, "duplicate": self.duplicate, "invalid": self.invalid},
            "invalid_by_reason": dict(self.invalid_by_reason.most_common()),
            "skipped": {"blank": self.blank, "comment": self.comments},
            "raw_forms": self.raw_forms,
            "inputs": self.inputs,
            "seconds": round(self.seconds, 3),
            "urls_per_s": round(self.lines / self.seconds) if self.seconds > 0 else 0,
        }


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


class SeedProgress:
    """Progress of a seeding on ``stream`` (stderr): on a terminal one line redrawn in place
    every ``interval_s`` (default 0.25 s), otherwise a plain line every 5 s; ETA when the
    input's size is known."""

    def __init__(
        self,
        stream: TextIO,
        total_bytes: int | None,
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        try:
            self.tty = stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.total_bytes = total_bytes
        self.interval_s = interval_s if interval_s is not None else (0.25 if self.tty else 5.0)
        self._clock = clock
        self._started = clock()
        self._last = self._started
        self._drawn = False

    def line(self, report: SeedReport, bytes_done: int, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        text = (
            f"seed {_clock(elapsed)} {report.lines:,} URLs ({report.lines / elapsed:,.0f}/s) | sent {report.sent:,}"
            f" | duplicate {report.duplicate:,} | invalid {report.invalid:,}"
        )
        if self.total_bytes:
            done = min(1.0, bytes_done / self.total_bytes)
            eta = elapsed * (1 - done) / done if done > 0 else None
            text += f" | {done:.0%}" + (f" ETA {_clock(eta)}" if eta is not None else "")
        return text

    def update(self, report: SeedReport, bytes_done: int) -> None:
        now = self._clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        self._write(self.line(report, bytes_done, now))

    def finish(self, report: SeedReport, bytes_done: int) -> None:
        self._write(self.line(report, bytes_done, self._clock()))
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _write(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = True
