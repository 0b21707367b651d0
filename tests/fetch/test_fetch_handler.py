"""The fetcher service's engine (``crawlstream.fetch.service.FetchHandler``): each result is sent
as soon as its fetch ends, and a partition's commit waits only for its oldest unfinished fetch.

Real parts: the synthetic web on loopback (its ``/slow`` page answers after ``slow_s``), the
fetcher, the embedded bus the results are read back from.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.bus import Message, TopicPartition
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.events import EventProducer, FetchRequest, FetchResult
from crawlstream.fetch import Fetcher
from crawlstream.fetch.service import FetchHandler
from crawlstream.runtime import Host, open_host
from crawlstream.settings import load
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS
from crawlstream.urls import canonicalize, url_key

SLOW_S = 1.5
TP = TopicPartition(FETCH_REQUESTS, 0)


@pytest.fixture(scope="module")
def web() -> Iterator[DemoWeb]:
    with DemoWeb(4, pages_per_domain=4, seed=11, slow_s=SLOW_S) as demo:
        yield demo


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    env = {
        "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
        "CRAWLSTREAM_BUS_PARTITIONS": "1",
        "CRAWLSTREAM_BUS_FSYNC": "never",
        "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
        # these tests hand the handler several requests of one domain at once (the scheduler never
        # does): no spacing floor, so they overlap (test_domain_spacing.py tests the floor)
        "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
    }
    with open_host(load(env)) as opened:
        yield opened


def _handler(host: Host, web: DemoWeb) -> tuple[FetchHandler, EventProducer]:
    fetcher = Fetcher.from_settings(host.settings, resolve_map=web.resolve_map)
    out = host.event_producer()
    return FetchHandler(fetcher, out, concurrency=8, wait_s=0.05), out


def _feed(handler: FetchHandler, urls: list[str]) -> None:
    for offset, raw in enumerate(urls):
        url = canonicalize(raw)
        request = FetchRequest(
            url=url.url, url_key=url_key(url), domain=url.domain, depth=0, attempt=0, requested_at_ms=0
        )
        handler.handle(request, Message(FETCH_REQUESTS, 0, offset, None, b""))
    handler.end_batch()


def _sent(host: Host) -> list[FetchResult]:
    consumer = host.bus.consumer("test.results")
    consumer.subscribe([FETCH_RESULTS])
    try:
        return [host.codec.decode(m.value, FetchResult) for m in consumer.consume(100, 0.5)]
    finally:
        consumer.close()


def _pump(handler: FetchHandler, until: float) -> None:
    while time.monotonic() < until:
        handler.end_batch()


def test_a_slow_fetch_holds_back_only_its_own_offset(host: Host, web: DemoWeb) -> None:
    base = web.base_urls[0]
    urls = [f"{base}/slow", f"{base}/", f"{base}/p/1"]
    handler, out = _handler(host, web)
    try:
        _feed(handler, urls)
        _pump(handler, time.monotonic() + SLOW_S / 2)
        # The fast pages were sent while the slow one runs; the commit stops at the slow offset.
        assert handler.fetched == 2
        assert dict(handler.unfinished()) == {TP: 0}
        _pump(handler, time.monotonic() + SLOW_S + 2)
        assert handler.fetched == 3
        assert not handler.unfinished()
    finally:
        out.flush()
        handler.close()
    by_url = {r.url: r for r in _sent(host)}
    assert set(by_url) == {canonicalize(u).url for u in urls}
    assert {r.outcome for r in by_url.values()} == {"ok"}


def test_a_lost_partition_sends_nothing_for_its_fetches_in_flight(host: Host, web: DemoWeb) -> None:
    handler, out = _handler(host, web)
    try:
        _feed(handler, [f"{web.base_urls[1]}/slow"])
        handler.on_lost([TP])  # the group moved on: another member fetches it again
        assert not handler.unfinished()
        _pump(handler, time.monotonic() + SLOW_S + 1)
        assert handler.fetched == 0
    finally:
        out.flush()
        handler.close()
    assert _sent(host) == []


def test_the_sitemaps_a_dropped_fetch_read_are_reported_by_its_replay(host: Host, web: DemoWeb) -> None:
    """The 3-broker kill test's loss (session 15, repetition round 1): a fetch read its host's
    robots.txt, the partition was lost mid-fetch and the result dropped, the replay came back to
    the same member, which had robots.txt cached and reported no sitemaps: a sitemap named only
    there was never crawled. The replay (or the next fetch of the origin) reports them now."""
    base = web.base_urls[2]
    handler, out = _handler(host, web)
    try:
        _feed(handler, [f"{base}/slow"])  # robots.txt first (fast), then the slow page
        deadline = time.monotonic() + 10
        while handler._fetcher.robots.get(base) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert handler._fetcher.robots.get(base) is not None, "robots.txt was read"
        handler.on_lost([TP])  # mid-fetch: this result is never sent
        _feed(handler, [f"{base}/slow"])  # the replay, to this member again
        _pump(handler, time.monotonic() + SLOW_S + 2)
        assert handler.fetched == 1
    finally:
        out.flush()
        handler.close()
    [result] = _sent(host)
    assert result.robots_sitemaps, "the replay reports the sitemaps the dropped fetch read"
    assert set(result.robots_sitemaps) == set(web.model.robots_sitemaps(base.split("//", 1)[1]))
