"""What the parts of one Scheduler share: its settings and its collaborators."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from crawlstream.frontier import HEADER_SIZE, AppendMarks, FrontierFiles
from crawlstream.politeness._file_states import FileStates
from crawlstream.politeness._lanes import PriorityLanes
from crawlstream.politeness._lua import Scripts
from crawlstream.politeness._ownership import Ownership
from crawlstream.politeness._revisit_plan import RevisitPlanner

if TYPE_CHECKING:
    from crawlstream.metrics import PolitenessMetrics


@dataclass(frozen=True)
class Limits:
    """The scheduler's settings in the units its parts compute with (times in ms)."""

    min_delay_ms: int
    response_time_factor: float
    max_in_flight: int
    max_backoff_ms: int
    max_retries: int
    max_pages: int
    max_depth: int
    lease_ms: int
    compact_min_bytes: int
    revisit_after_ms: int

    def requeue_args(self, domain: str, now: int, release: bool = False) -> list[Any]:
        """ARGV[1..6] of every script built on ``requeue()`` (``lua/requeue_function.lua``)."""
        return [domain, now, self.max_in_flight, self.max_pages, "1" if release else "0", HEADER_SIZE]


@dataclass(frozen=True)
class SchedulerContext:
    """One Scheduler's shared state, handed to each of its parts (``Scheduler._compose_parts``)."""

    redis: redis.Redis
    files: FrontierFiles
    marks: AppendMarks  # the appends beside the files (ADR 037)
    limits: Limits
    scripts: Scripts
    states: FileStates
    lanes: PriorityLanes
    ownership: Ownership
    planner: RevisitPlanner | None  # None: revisits are off
    stats: Counter[str]
    metrics: PolitenessMetrics | None
