"""The fetcher's own floor under each domain's spacing (``crawlstream.fetch._spacing``): requests
of one domain handed to it at once, as a backlog after an outage or a replay after a restart
arrives, reach the server spaced by the delay (or the robots.txt Crawl-delay); other domains
are not held; in steady state (requests already spaced) nothing waits.

Real parts: the synthetic web on loopback and its request log, the fetcher service's handler.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from crawlstream.devtools.demoweb import DemoWeb, RequestRecord, pairs_apart
from crawlstream.fetch import Fetcher
from crawlstream.fetch._spacing import DomainSpacing
from crawlstream.settings import load
from crawlstream.urls import registered_domain_or_host

DELAY_S = 0.25
SLACK_S = 0.005


def test_each_request_waits_the_delay_since_the_previous_one_ended() -> None:
    now = [100.0]
    spacing = DomainSpacing(0.5, cap_s=30.0, clock=lambda: now[0])
    assert spacing.wait_s("a.com") == 0.0
    spacing.ended("a.com")
    assert spacing.wait_s("a.com") == 0.5 and spacing.wait_s("b.com") == 0.0
    spacing.ended("c.com", crawl_delay_s=2.0)  # the Crawl-delay counts when it is longer
    now[0] = 101.0
    assert spacing.wait_s("a.com") == 0.0 and spacing.wait_s("c.com") == 1.0
    spacing.ended("d.com", crawl_delay_s=3600)
    assert spacing.wait_s("d.com") == 30.0  # capped at the fetch timeout: longer is the scheduler's
    assert spacing.waits == 3
    off = DomainSpacing(0.0, cap_s=30.0)
    off.ended("a.com")
    assert off.wait_s("a.com") == 0.0 and not off.enabled


@pytest.fixture(scope="module")
def web() -> Iterator[DemoWeb]:
    with DemoWeb(3, pages_per_domain=6, seed=5, crawl_delay_s=0.1) as demo:
        yield demo


def _fetcher(web: DemoWeb, min_delay_s: float, in_flight: int = 1) -> Fetcher:
    settings = load({"CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": str(min_delay_s),
                     "CRAWLSTREAM_SCHEDULER_MAX_IN_FLIGHT_PER_DOMAIN": str(in_flight),
                     "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true"})
    return Fetcher.from_settings(settings, resolve_map=web.resolve_map)


def _gaps_by_domain(web: DemoWeb, since: float) -> dict[str, list[float]]:
    records: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in web.requests():
        if r.time_s >= since and r.path != "/robots.txt":
            records[registered_domain_or_host(r.host)].append(r)
    return {d: [gap for _, _, gap in pairs_apart(rs)] for d, rs in records.items()}


def _fetch_all_at_once(fetcher: Fetcher, urls: list[str]) -> None:
    async def run() -> None:
        async with fetcher:
            outcomes = await asyncio.gather(
                *(fetcher.afetch(u, domain=registered_domain_or_host(u.split("/")[2].split(":")[0])) for u in urls))
        assert all(o.status > 0 for o in outcomes), [(o.url, o.outcome, o.error) for o in outcomes]  # answered

    asyncio.run(run())


def test_a_backlog_of_one_domain_reaches_the_server_spaced_and_others_in_parallel(web: DemoWeb) -> None:
    urls = [f"{base}/p/{i}" for base in web.base_urls for i in range(1, 4)]  # 3 pages per host
    web.clear_log()
    started = time.monotonic()
    fetcher = _fetcher(web, DELAY_S)
    _fetch_all_at_once(fetcher, urls)
    elapsed = time.monotonic() - started
    gaps = _gaps_by_domain(web, 0.0)
    assert len(gaps) == 3 and sum(map(len, gaps.values())) == len(urls) - 3, gaps  # hosts of one domain share it
    assert min(min(g) for g in gaps.values()) >= DELAY_S - SLACK_S, gaps
    longest = max(len(g) for g in gaps.values())
    assert elapsed < longest * DELAY_S + 1.0  # the domains' turns overlap: not all spaced in a row
    assert fetcher.spacing.waits == len(urls) - 3  # every request but each domain's first waited its turn


def test_no_floor_when_a_domain_may_have_several_requests_in_flight(web: DemoWeb) -> None:
    base = web.base_urls[0]
    web.clear_log()
    fetcher = _fetcher(web, DELAY_S, in_flight=4)
    _fetch_all_at_once(fetcher, [f"{base}/p/{i}" for i in range(1, 4)])
    assert fetcher.spacing.waits == 0 and not fetcher.spacing.enabled
