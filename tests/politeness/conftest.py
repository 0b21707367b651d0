"""A hand-moved clock and a Scheduler factory over the real Redis and real files; and the
scheduler service's handler on its real loop (the embedded bus, a real Redis) for tests that
replay its input."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlstream.events import DiscoveredUrl, EventProducer, FetchRequest, FetchResult
from crawlstream.politeness import Scheduler
from crawlstream.politeness.service import GROUP, TOPICS, ScheduleHandler
from crawlstream.runtime import Host, ServiceLoop, open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS, URLS_FRONTIER
from crawlstream.urls import url_key


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


@dataclass
class ServiceRig:
    """The scheduler service's handler and loop on one host; ``lease_s`` is its lease."""

    host: Host
    scheduler: Scheduler
    handler: ScheduleHandler
    loop: ServiceLoop
    out: EventProducer
    lease_s: float

    def run(self, idle_polls: int = 3, max_iterations: int = 400) -> None:
        """The loop's iterations until ``idle_polls`` in a row consume nothing."""
        idle = 0
        for _ in range(max_iterations):
            idle = idle + 1 if self.loop.run_once() == 0 else 0
            if idle >= idle_polls:
                return
        raise AssertionError("the scheduler's loop is still busy")

    def seed(self, domains: int) -> list[str]:
        """One front page each of ``domains`` domains on ``urls.frontier``."""
        urls = [f"http://d{i}.example/" for i in range(domains)]
        now_ms = int(time.time() * 1000)
        for i, url in enumerate(urls):
            self.out.send(
                URLS_FRONTIER,
                DiscoveredUrl(url=url, domain=f"d{i}.example", url_key=url_key(url), depth=0,
                              discovered_at_ms=now_ms, source="seed"),
            )
        self.out.flush(10)
        return urls

    def requests(self) -> list[FetchRequest]:
        """Every request the scheduler produced so far (a fresh reader each time)."""
        consumer = self.host.bus.consumer(f"test.requests.{time.monotonic_ns()}")
        consumer.subscribe([FETCH_REQUESTS])
        end = sum(self.host.bus.end_offsets(FETCH_REQUESTS))
        got: list[FetchRequest] = []
        deadline = time.monotonic() + 10
        try:
            while len(got) < end and time.monotonic() < deadline:
                got += [self.host.codec.decode(m.value, FetchRequest) for m in consumer.consume(1000, 0.01)]
        finally:
            consumer.close()
        assert len(got) == end
        return got

    def answer(self, requests: list[FetchRequest]) -> None:
        """What a fetcher does: a 200 for each request, produced now."""
        now_ms = int(time.time() * 1000)
        for r in requests:
            self.out.send(
                FETCH_RESULTS,
                FetchResult(
                    url=r.url, url_key=r.url_key, domain=r.domain, depth=r.depth, status=200, outcome="ok",
                    fetched_at_ms=now_ms, elapsed_ms=5, attempt=r.attempt,
                ),
            )
        self.out.flush(10)


@pytest.fixture
def service_rig(tmp_path: Path) -> Callable[..., AbstractContextManager[ServiceRig]]:
    """``service_rig(batch_size=, lease_s=, group=)``: a scheduler service over one partition;
    rigs made in one test share the data dir and Redis (a restarted or second member)."""

    @contextmanager
    def make(batch_size: int = 2, lease_s: float = 1.0, group: str = GROUP) -> Iterator[ServiceRig]:
        settings: Settings = load({
            "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
            "CRAWLSTREAM_BUS_PARTITIONS": "1",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.02",
            "CRAWLSTREAM_SCHEDULER_LEASE_S": str(lease_s),
            "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
            "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.05",
            "CRAWLSTREAM_METRICS_LAG_INTERVAL_S": "0.05",
        })
        with open_host(settings) as host:
            out = host.event_producer()
            scheduler = Scheduler.from_settings(settings, host.redis)
            handler = ScheduleHandler(scheduler, out, settings.crawl.dataset_id)
            loop = host.service_loop("scheduler", group, TOPICS, handler, producers=[out], batch_size=batch_size)
            yield ServiceRig(host, scheduler, handler, loop, out, lease_s)

    return make
