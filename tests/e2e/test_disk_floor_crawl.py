"""`crawlstream run` (the embedded one-process mode) below the data dir's free-space floor (ADR 033),
on a real disk: a ballast file takes the free space under a floor set just below it. Every
service pauses (the embedded log is under the data dir): the synthetic web sees no request. Once
the ballast is gone the crawl resumes by itself and ends drained, every page fetched once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from e2e_support import crawl_settings, page_requests

from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.crawl import CrawlSummary
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.runtime import open_host
from tests.durable._ballast import Ballast, floor_mib

pytestmark = pytest.mark.timeout(120)


def test_the_embedded_crawl_pauses_below_the_floor_and_resumes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    floor = floor_mib(data)
    settings = crawl_settings(data, CRAWLSTREAM_DATA_DIR_MIN_FREE_MB=str(floor))
    ballast = Ballast(data, floor)
    summary: list[CrawlSummary] = []
    web = DemoWeb(3, pages_per_domain=3, seed=7, special_every=0, crawl_delay_s=0.05)  # no special pages: fast
    with web, open_host(settings) as host:
        ballast.lay()
        try:
            crawl = threading.Thread(
                target=lambda: summary.append(run_crawl(
                    host, web.seed_urls(), services=DEFAULT_SERVICES, exit_when_done=True,
                    resolve_map=web.resolve_map,
                )),
                daemon=True,
            )
            crawl.start()
            deadline = time.monotonic() + 30
            services = {"deduper", "scheduler", "fetcher", "link-extractor", "bucket-compressor", "parquet-sink"}
            paused: set[str] = set()
            while paused != services:
                assert time.monotonic() < deadline and crawl.is_alive(), f"paused so far: {sorted(paused)}"
                time.sleep(0.1)
                paused = {s for s in services
                          if host.registry.get_sample_value("crawlstream_disk_floor_paused", {"service": s}) == 1}
            time.sleep(1.0)
            assert web.requests() == [], "nothing is fetched while paused"
        finally:
            ballast.lift()
        crawl.join(60)
        assert not crawl.is_alive(), "the crawl did not resume and drain"
        pages = page_requests(web.requests())
    [result] = summary
    assert result.reason == "drained"
    assert {r.url for r in pages} == web.reachable_pages()
    assert len(pages) == len({r.url for r in pages}), "every page once"
    for service in services:
        assert host.registry.get_sample_value("crawlstream_disk_floor_paused", {"service": service}) == 0
        assert host.registry.get_sample_value("crawlstream_disk_floor_pauses_total", {"service": service}) == 1
