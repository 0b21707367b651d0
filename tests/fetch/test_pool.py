"""The fetcher's idle keep-alive sockets are bounded across hosts (``fetch.max_idle_connections``),
on real HTTP to the demo web on loopback: the 2-hour soak's fetchers held one socket per domain of
the last 15 s, 26 to 3,310 with the fetch rate."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from fetch_support import demo_fetcher
from yarl import URL

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.fetch import Fetcher
from crawlstream.fetch._pool import BoundedIdleConnector

DOMAINS = 30


def _sockets() -> int:
    """Sockets this process holds (the demo web's server side runs in it too)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except FileNotFoundError:  # closed since the listing (the listing's own descriptor)
            continue
    return count


def _connector(fetcher: Fetcher) -> BoundedIdleConnector:
    session = fetcher._session
    assert session is not None
    connector = session.connector
    assert isinstance(connector, BoundedIdleConnector)
    return connector


def _one_page_per_domain(web: DemoWeb) -> list[str]:
    """A reachable page of each domain that has one (robots.txt disallows some domains whole)."""
    first: dict[str, str] = {}
    for url in sorted(web.reachable_pages()):
        first.setdefault(URL(url).host or "", url)
    return list(first.values())


async def _crawl_every_domain(web: DemoWeb, fetcher: Fetcher) -> tuple[list[int], int]:
    """One page of each domain in turn; the idle count after each, and the sockets at the end."""
    idle = []
    for url in _one_page_per_domain(web):
        outcome = await fetcher.afetch(url)
        assert outcome.status == 200, (url, outcome.outcome)
        idle.append(_connector(fetcher).idle)
    return idle, _sockets()


@pytest.mark.parametrize("cap", [4, 0])
def test_idle_connections_stay_under_the_cap_across_hosts_and_the_newest_are_kept(cap: int) -> None:
    with DemoWeb(DOMAINS, pages_per_domain=3, seed=5) as web:

        async def go() -> None:
            before = _sockets()
            fetcher = demo_fetcher(web, max_idle_connections=cap, concurrency=8)
            try:
                idle, sockets = await _crawl_every_domain(web, fetcher)
                assert max(idle) == cap == idle[-1]
                # Each idle connection is two sockets here (the server's end is in this process).
                assert sockets - before <= 2 * cap + 2, (before, sockets)
                if cap:
                    last = URL(_one_page_per_domain(web)[-1]).host
                    connector = _connector(fetcher)
                    kept = [p for key, pool in connector._conns.items() if key.host == last for p, _ in pool]
                    assert kept, "the host fetched last lost its socket"
                    assert (await fetcher.afetch(_one_page_per_domain(web)[-1])).status == 200
                    again = [p for key, pool in connector._conns.items() if key.host == last for p, _ in pool]
                    assert again == kept, "the host fetched again did not reuse its socket"
            finally:
                await fetcher.aclose()

        asyncio.run(go())


def test_without_the_cap_every_host_keeps_its_socket() -> None:
    """The baseline the cap is measured against: aiohttp keeps one idle socket per host."""
    with DemoWeb(DOMAINS, pages_per_domain=3, seed=5) as web:

        async def go() -> None:
            fetcher = demo_fetcher(web, max_idle_connections=10_000, concurrency=8)
            try:
                idle, _ = await _crawl_every_domain(web, fetcher)
                assert idle[-1] == len(_one_page_per_domain(web)) > 20
            finally:
                await fetcher.aclose()

        asyncio.run(go())


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="max_idle"):
        BoundedIdleConnector(max_idle=-1)
