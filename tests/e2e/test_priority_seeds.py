"""Prioritised seeds on a live embedded crawl of the synthetic web, judged by the web's request log.

Seeds come from ``crawlstream seed`` (its own process, per-line priorities ``URL N``), written
after each domain's normal seeds, so a FIFO frontier would fetch them last. Every domain is
held until the same instant (``Scheduler.hold_until``, as a migrated next-fetch time does), so
all seeds are in the frontier when the domains become due together: then the prioritised
pages must be each domain's first requests, highest priority first, and with one bus
partition and one fetch at a time (more due domains than the fetcher can take), the domains
holding them must be released first. Politeness must hold throughout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from e2e_support import CRAWL_DELAY_S, MIN_DELAY_S, SLACK_S, crawl_env, crawl_settings, demo_web

from crawlstream.cli._run import CRAWL_SERVICES, run_crawl
from crawlstream.devtools.demoweb import RequestRecord, pairs_apart
from crawlstream.politeness import Scheduler
from crawlstream.runtime import open_host
from crawlstream.topics import URLS_FRONTIER
from crawlstream.urls import partition_for

PRIORITY_DOMAINS = (1, 3)
HOLD_S = 2.0  # room for the services to start and the seeds to reach the frontier files
_PAGE = re.compile(r"^/(p/\d+)?$")


def _pages(log: list[RequestRecord], web_domain_index: dict[str, int | None]) -> dict[int, list[RequestRecord]]:
    """Requests for HTML pages (``/`` and ``/p/k``, no robots.txt or sitemaps) by domain, in arrival order."""
    out: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in sorted(log, key=lambda r: r.time_s):
        index = web_domain_index[r.host]
        if index is not None and _PAGE.match(r.path):
            out[index].append(r)
    return out


def test_prioritised_seeds_are_requested_first_within_politeness(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    extra = {"CRAWLSTREAM_BUS_PARTITIONS": "1", "CRAWLSTREAM_FETCH_CONCURRENCY": "1"}
    with demo_web(5, pages_per_domain=4, special_every=0) as web:
        lines = []
        for i, d in enumerate(web.model.domains):
            lines += [f"http://{d}/", f"http://{d}/p/0", f"http://{d}/p/1"]
            lines += (
                [f"http://{d}/p/3 9", f"http://{d}/p/2 5"]
                if i in PRIORITY_DOMAINS
                else [
                    f"http://{d}/p/3",
                    f"http://{d}/p/2",
                ]
            )
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(lines) + "\n")
        env = {**os.environ, **crawl_env(data_dir, **extra)}
        seeded = subprocess.run(
            [sys.executable, "-m", "crawlstream", "seed", str(seeds), "--no-progress"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert seeded.returncode == 0, seeded.stderr[-2000:]
        assert json.loads(seeded.stdout.splitlines()[-1])["outcomes"]["sent"] == 25

        with open_host(crawl_settings(data_dir, **extra)) as host:
            partitions = host.bus.partition_count(URLS_FRONTIER)
            scheduler = Scheduler.from_settings(host.settings, host.redis)
            release_ms = int((time.time() + HOLD_S) * 1000)
            released = time.monotonic() + HOLD_S  # the web's log is on the monotonic clock
            for d in web.model.domains:
                assert scheduler.hold_until(partition_for(d, partitions), {d: release_ms}) == 1
            summary = run_crawl(host, [], services=CRAWL_SERVICES, exit_when_done=True, resolve_map=web.resolve_map)
        log = web.requests()
    assert summary.reason == "drained"
    index_of = {h: web.model.domain_index(h) for h in {r.host for r in log}}
    pages = _pages(log, index_of)
    main_pages = {i: [r.path for r in rs if r.host == web.model.domains[i]] for i, rs in pages.items()}

    # Each domain: every seed once; the prioritised ones first, highest first; the rest in arrival order.
    for i in range(5):
        assert Counter(main_pages[i]) == Counter(["/", "/p/0", "/p/1", "/p/2", "/p/3"]), i
        if i in PRIORITY_DOMAINS:
            assert main_pages[i] == ["/p/3", "/p/2", "/", "/p/0", "/p/1"]
        else:
            assert main_pages[i] == ["/", "/p/0", "/p/1", "/p/3", "/p/2"]

    # Across domains: nothing before the release, then the domains holding prioritised pages first.
    first_page = {i: rs[0].time_s for i, rs in pages.items()}
    assert min(first_page.values()) >= released - 0.05, (released, first_page)
    assert max(first_page[i] for i in PRIORITY_DOMAINS) < min(
        t for i, t in first_page.items() if i not in PRIORITY_DOMAINS
    ), first_page

    # Politeness unchanged: requests to one registered domain never closer than its delay.
    for i, rs in pages.items():
        hosts = [h for h in web.model.hosts if web.model.domain_index(h) == i]
        required = max(MIN_DELAY_S, *(web.model.crawl_delay_s_for(h) or 0.0 for h in hosts))
        gaps = [gap for _, _, gap in pairs_apart(rs)]
        assert min(gaps) >= required - SLACK_S, (i, required, gaps)
    assert any(web.model.crawl_delay_s_for(web.model.domains[i]) == CRAWL_DELAY_S for i in pages)
