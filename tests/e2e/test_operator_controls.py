"""Operator controls on a live embedded crawl of the synthetic web, judged by the web's request log.

``crawlstream exclude`` runs as its own process against the data dir of the running crawl (it
joins the crawl's embedded Redis); the promise checked is the one the command makes: once it
returns, the domain receives no request; once included again, its parked URLs are fetched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from e2e_support import (
    MAX_RETRIES,
    RETRYABLE,
    crawl_env,
    crawl_settings,
    demo_web,
    page_requests,
)
from test_embedded_crawl import read_results

from crawlstream.cli._run import CRAWL_SERVICES, run_crawl
from crawlstream.crawl import CrawlSummary
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.politeness import Controls, DomainOverride
from crawlstream.runtime import open_host


def _cli(data_dir: Path, *args: str) -> tuple[dict[str, object], float]:
    """Run ``crawlstream ARGS`` in its own process; its JSON line and when it was printed
    (``time.monotonic()`` is system-wide: comparable with the web's log)."""
    env = {**os.environ, **crawl_env(data_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlstream", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    printed = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(line), printed


def _domain_times(web: DemoWeb, index: int) -> list[float]:
    """Arrival times of every request (robots.txt included) to registered domain ``index``."""
    return [r.time_s for r in web.requests() if web.model.domain_index(r.host) == index]


def test_a_domain_excluded_mid_crawl_gets_no_request_after_the_command_returns(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with demo_web(12) as web, open_host(crawl_settings(data_dir)) as host:
        index = 0
        domain = web.model.domains[index]
        # Slow the domain down so that it is still being crawled when the command comes.
        Controls(host.redis).set_override(domain, DomainOverride(delay_s=0.25))
        summary: list[CrawlSummary] = []
        crawl = threading.Thread(
            target=lambda: summary.append(
                run_crawl(host, web.seed_urls(), services=CRAWL_SERVICES, resolve_map=web.resolve_map)
            )
        )
        crawl.start()
        try:
            deadline = time.monotonic() + 60
            while len(_domain_times(web, index)) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(_domain_times(web, index)) >= 3
            answer, returned = _cli(data_dir, "exclude", domain)
            assert answer == {"excluded": [domain], "added": 1, "in_flight": 0}
            time.sleep(2.0)  # the crawl goes on for the other domains
            during = [t for t in _domain_times(web, index) if t > returned]
            fetched_before = len([t for t in _domain_times(web, index) if t <= returned])
            others_during = [r for r in web.requests() if r.time_s > returned and web.model.domain_index(r.host) != 0]
            shown, _ = _cli(data_dir, "domain", "show", domain)
            _cli(data_dir, "include", domain)

            expected = web.reachable_pages()
            deadline = time.monotonic() + 90
            while not expected <= {r.url for r in page_requests(web.requests())} and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)  # retries still due
        finally:
            host.stop_event.set()
            crawl.join(60)
        pages = page_requests(web.requests())

    assert during == [], f"{len(during)} requests to {domain} after `exclude` returned"
    assert others_during  # the rest of the crawl was not held up
    assert shown["excluded"] is True and shown["override"] == {
        "delay_s": 0.25,
        "max_in_flight": None,
        "page_budget": None,
    }
    domain_pages = [r for r in pages if web.model.domain_index(r.host) == index]
    assert len(domain_pages) > fetched_before  # the parked URLs resumed after `include`
    counts = Counter(r.url for r in pages)
    assert expected <= set(counts)  # nothing lost
    assert {n for u, n in counts.items() if not u.endswith(RETRYABLE)} == {1}  # nothing fetched twice
    assert max(n for u, n in counts.items() if u.endswith(RETRYABLE)) <= 1 + MAX_RETRIES
    assert summary and summary[0].reason == "stopped"


def test_max_pages_stops_at_exactly_that_many_pages(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with demo_web(20) as web:
        with open_host(crawl_settings(data_dir, CRAWLSTREAM_CRAWL_MAX_PAGES="25")) as host:
            summary = run_crawl(
                host, web.seed_urls(), services=CRAWL_SERVICES, exit_when_done=True, resolve_map=web.resolve_map
            )
        log = page_requests(web.requests())
    results = read_results(crawl_settings(data_dir))
    assert summary.reason == "max_pages"
    assert summary.stats.pages == 25
    assert sum(1 for r in results if r.status > 0) == 25
    # every request that reached the web is a page, but for the ones that timed out (no page)
    assert len(log) == 25 + sum(1 for r in results if r.outcome == "timeout")
