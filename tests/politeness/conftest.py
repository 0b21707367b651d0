"""A hand-moved clock and a Scheduler factory over the real Redis and real files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlstream.politeness import Scheduler


class ManualClock:
    """Seconds since an arbitrary epoch; only ``advance`` moves it."""

    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds

    @property
    def now_ms(self) -> int:
        return int(self.now_s * 1000)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_scheduler(redis_client: redis.Redis, tmp_path: Path, clock: ManualClock) -> Callable[..., Scheduler]:
    defaults: dict[str, Any] = {
        "min_delay_s": 1.0,
        "response_time_factor": 2.0,
        "max_in_flight_per_domain": 1,
        "max_backoff_s": 60.0,
        "max_retries": 2,
        "max_pages_per_domain": 1000,
        "max_depth": 5,
        "lease_s": 300.0,
        "compact_min_bytes": 1 << 20,
    }

    def make(**overrides: Any) -> Scheduler:
        scheduler = Scheduler(redis_client, tmp_path / "frontier", clock, **{**defaults, **overrides})
        scheduler.load_partition(0)
        return scheduler

    return make
