"""Lease expiry judged by what the scheduler has read, not by the wall clock (issue 28, ADR 035).

The 2-hour soak (session 16) ran its scheduler ~20,000 events behind on ``fetch.results``: a
ticket's result waited in the topic longer than the lease, the ticket was reclaimed as a
timeout, the URL was fetched again (470,313 requests for 276,272 URLs) and retries ran out.
These tests reproduce it at small scale on the real embedded bus and a real Redis: a scheduler
that reads its results late in small batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawlstream.events import DiscoveredUrl, EventProducer, FetchRequest, FetchResult
from crawlstream.politeness import Scheduler
from crawlstream.politeness.service import GROUP, TOPICS, ScheduleHandler
from crawlstream.runtime import Host, ServiceLoop, open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS, URLS_FRONTIER
from crawlstream.urls import url_key

LEASE_S = 1.0


@dataclass
class Rig:
    host: Host
    scheduler: Scheduler
    loop: ServiceLoop
    out: EventProducer
    seen_requests: int = 0

    def run(self, idle_polls: int = 3, max_iterations: int = 400) -> None:
        """The loop's iterations until ``idle_polls`` in a row consume nothing."""
        idle = 0
        for _ in range(max_iterations):
            idle = idle + 1 if self.loop.run_once() == 0 else 0
            if idle >= idle_polls:
                return
        raise AssertionError("the scheduler's loop is still busy")

    def requests(self) -> list[FetchRequest]:
        """Every request the scheduler produced so far (a fresh reader each time), read fast:
        the test's fetcher answers within the lease."""
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
def rig(tmp_path: Path) -> Callable[..., contextmanager[Rig]]:
    @contextmanager
    def make(batch_size: int = 2) -> Iterator[Rig]:
        settings: Settings = load({
            "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
            "CRAWLSTREAM_BUS_PARTITIONS": "1",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.02",
            "CRAWLSTREAM_SCHEDULER_LEASE_S": str(LEASE_S),
            "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
            "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.05",
            "CRAWLSTREAM_METRICS_LAG_INTERVAL_S": "0.05",
        })
        with open_host(settings) as host:
            out = host.event_producer()
            scheduler = Scheduler.from_settings(settings, host.redis)
            handler = ScheduleHandler(scheduler, out, settings.crawl.dataset_id)
            loop = host.service_loop("scheduler", GROUP, TOPICS, handler, producers=[out], batch_size=batch_size)
            yield Rig(host, scheduler, loop, out)

    return make


def _seed(out: EventProducer, domains: int) -> list[str]:
    urls = [f"http://d{i}.example/" for i in range(domains)]
    now_ms = int(time.time() * 1000)
    for i, url in enumerate(urls):
        out.send(
            URLS_FRONTIER,
            DiscoveredUrl(url=url, domain=f"d{i}.example", url_key=url_key(url), depth=0,
                          discovered_at_ms=now_ms, source="seed"),
        )
    out.flush(10)
    return urls


def test_results_read_after_the_lease_time_out_no_ticket_and_fetch_nothing_twice(rig) -> None:
    """The soak's failure: every result was produced within its lease, the scheduler reads
    them later than that, two per batch; each batch's dispatch must not reclaim the tickets
    whose results wait further on in the topic."""
    with rig(batch_size=2) as r:
        urls = _seed(r.out, 10)
        r.run()
        first = r.requests()
        assert sorted(q.url for q in first) == sorted(urls)
        r.answer(first)
        time.sleep(LEASE_S * 1.5)  # the results wait in fetch.results past their lease
        r.run()
        assert r.scheduler.stats["leases_expired"] == 0
        assert r.scheduler.stats["stale_completions"] == 0
        assert len(r.requests()) == len(urls)  # nothing fetched twice
        assert r.scheduler.pending(0) == (0, 0)


def test_a_lost_request_is_still_timed_out_once_the_scheduler_has_read_past_its_lease(rig) -> None:
    """What the lease is for: a request that never reached a fetcher (a crash before it was
    produced, a fetcher that dropped it) is retried once the scheduler has read every result
    produced in its lease, here by catching up with the topic."""
    with rig(batch_size=2) as r:
        _seed(r.out, 3)
        r.run()
        first = r.requests()
        lost, answered = first[0], first[1:]
        r.answer(answered)
        r.run()
        time.sleep(LEASE_S * 1.5)
        r.run()
        assert r.scheduler.stats["leases_expired"] == 1
        time.sleep(0.1)  # the retry's back-off (scheduler.max_backoff_s)
        r.run()
        retries = [q for q in r.requests() if q.attempt == 1]
        assert [q.url for q in retries] == [lost.url]
