"""A crawl that continues from a migrated PostgreSQL crawl, judged by the synthetic web's request log:
no visited URL is fetched again, every frontier URL is fetched once, excluded domains are never
touched, robots.txt bodies from the database are obeyed until they expire, and a domain's next
fetch time holds its first request back."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from migrate_support import run_migration
from pg_support import DOMAIN_COLUMNS, FRONTIER_COLUMNS, VISITED_COLUMNS, copy_rows, create_database, create_schema

from crawlstream.cli._run import CRAWL_SERVICES, run_crawl
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord
from crawlstream.devtools.localpg import LocalPostgres
from crawlstream.fetch import Fetcher
from crawlstream.migrate import MigrationReport
from crawlstream.robots import ImportedRobotsTxt
from crawlstream.runtime import open_host
from crawlstream.settings import FetchSettings, Settings

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from e2e_support import crawl_settings, demo_web, page_requests

HOLD_S = 2.0


@dataclass
class Plan:
    """Which demo-web URLs the old crawler had visited, had queued, excluded and robots-overridden."""

    visited: set[str]
    frontier: list[str]
    excluded: set[str]  # registered domains
    robots_override_host: str  # its database robots.txt disallows /p/3 and never expires
    robots_expired_host: str  # its database robots.txt disallows everything but has expired
    held_domain: str  # next fetch time HOLD_S after the migration
    held_until_s: float


@dataclass
class Crawl:
    web: DemoWeb
    plan: Plan
    report: MigrationReport
    log: list[RequestRecord]
    wall_minus_monotonic_s: float

    @property
    def pages(self) -> list[RequestRecord]:
        return page_requests(self.log)


def plan_for(web: DemoWeb) -> Plan:
    model = web.model
    domains = model.domains
    visited: set[str] = set()
    frontier: list[str] = []
    for host in model.hosts:
        visited |= {f"http://{host}/", f"http://{host}/p/0", f"http://{host}/p/1"}
        frontier += [f"http://{host}/p/2", f"http://{host}/p/3"]
    return Plan(
        visited=visited,
        frontier=frontier,
        excluded={domains[0], domains[6]},  # 0 links every special page: never touched
        robots_override_host=domains[1],
        robots_expired_host=domains[2],
        held_domain=domains[4],
        held_until_s=time.time() + 60,  # replaced when the crawl starts
    )


def load_plan(dsn: str, plan: Plan, now_s: int) -> None:
    create_schema(dsn)
    copy_rows(dsn, "visited_urls", VISITED_COLUMNS, [(u, None, now_s - 100, 200, None, None) for u in plan.visited])
    copy_rows(
        dsn,
        "frontier",
        FRONTIER_COLUMNS,
        [(u, u.split("/")[2], 1, 0.5, now_s - 50) for u in plan.frontier] + [(plan.frontier[0], None, 1, 0.5, None)],
    )
    meta = [(d, None, None, True, None) for d in sorted(plan.excluded)]
    meta.append((plan.robots_override_host, "User-agent: *\nDisallow: /p/3\n", now_s + 3600, False, None))
    meta.append((plan.robots_expired_host, "User-agent: *\nDisallow: /\n", now_s - 10, False, None))
    meta.append((plan.held_domain, None, None, False, int(plan.held_until_s)))
    copy_rows(dsn, "domain_metadata", DOMAIN_COLUMNS, meta)


@pytest.fixture(scope="module")
def crawl(postgres: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    create_database(postgres.dsn, "seed_crawl")
    dsn = postgres.dsn_for("seed_crawl")
    settings: Settings = crawl_settings(tmp_path_factory.mktemp("migrated-crawl") / "data")
    with demo_web(n_domains=12, pages_per_domain=6, special_every=1000) as web:
        plan = plan_for(web)
        plan.held_until_s = float(int(time.time() + HOLD_S + 1))  # whole seconds, as the column holds
        load_plan(dsn, plan, int(time.time()))
        report = run_migration(settings, dsn, dataset_id=1)
        with open_host(settings) as host:
            run_crawl(host, [], services=CRAWL_SERVICES, exit_when_done=True, resolve_map=web.resolve_map)
        log = web.requests()
    yield Crawl(web, plan, report, log, time.time() - time.monotonic())


def test_the_migration_queued_the_frontier_and_skipped_what_was_visited(crawl: Crawl) -> None:
    outcomes = crawl.report.tables["frontier"].outcomes
    assert outcomes["queued"] == len(crawl.plan.frontier)
    assert outcomes["already_seen"] == 1  # the duplicate row


def test_no_visited_url_is_fetched_again(crawl: Crawl) -> None:
    fetched = {r.url for r in crawl.pages}
    assert fetched  # the crawl did fetch
    assert not fetched & crawl.plan.visited


def test_every_frontier_url_is_fetched_once(crawl: Crawl) -> None:
    counts = Counter(r.url for r in crawl.pages)
    model = crawl.web.model
    expected = {
        u
        for u in crawl.plan.frontier
        if model.domain_index(u.split("/")[2]) is not None
        and model.domains[model.domain_index(u.split("/")[2]) or 0] not in crawl.plan.excluded
        and model.allowed(u)
        and not (u.split("/")[2] == crawl.plan.robots_override_host and u.endswith("/p/3"))
    }
    assert len(expected) > 12
    assert {u: counts[u] for u in expected} == dict.fromkeys(expected, 1)


def test_excluded_domains_are_never_touched(crawl: Crawl) -> None:
    model = crawl.web.model
    touched = {model.domains[model.domain_index(r.host) or 0] for r in crawl.log}
    assert not touched & crawl.plan.excluded  # not even robots.txt


def test_an_unexpired_robots_txt_from_the_database_is_obeyed_instead_of_the_site_one(crawl: Crawl) -> None:
    host = crawl.plan.robots_override_host
    requests = [r for r in crawl.log if r.host == host]
    assert requests  # the domain was crawled
    assert not [r for r in requests if r.path == "/robots.txt"]  # the imported body stood in for it
    assert not [r for r in requests if r.path == "/p/3"]  # the database rule, which the site does not have


def test_an_expired_robots_txt_from_the_database_is_ignored(crawl: Crawl) -> None:
    host = crawl.plan.robots_expired_host
    paths = {r.path for r in crawl.log if r.host == host}
    assert "/robots.txt" in paths  # fetched from the site again
    assert "/p/2" in paths  # the expired body disallowed everything


def test_a_migrated_next_fetch_time_holds_the_domain_back(crawl: Crawl) -> None:
    host = crawl.plan.held_domain
    first = min(r.time_s for r in crawl.pages if r.host == host)
    assert first + crawl.wall_minus_monotonic_s >= crawl.plan.held_until_s - 0.05


def test_the_fetcher_obeys_an_imported_robots_txt_until_it_expires() -> None:
    """Disallowed by the imported body without asking the site; after its expiry the site's
    robots.txt is fetched and its own rules apply."""
    with demo_web(n_domains=3, pages_per_domain=6, special_every=1000) as web:
        host = web.model.domains[1]
        expires_at_ms = int((time.time() + 1.5) * 1000)
        body = b"User-agent: *\nDisallow: /p/3\n"

        def imported(origin: str) -> ImportedRobotsTxt | None:
            return ImportedRobotsTxt(body, expires_at_ms) if origin.endswith(host) else None

        fetcher = Fetcher(
            config=FetchSettings(allow_private_networks=True, timeout_s=5.0),
            resolve_map=web.resolve_map,
            resolve_map_only=True,
            imported_robots=imported,
        )

        async def fetch_twice() -> tuple[str, str]:
            try:
                before = (await fetcher.afetch(f"http://{host}/p/3")).outcome
                await asyncio.sleep(max(0.0, expires_at_ms / 1000 - time.time()) + 0.2)
                after = (await fetcher.afetch(f"http://{host}/p/3")).outcome
                return before, after
            finally:
                await fetcher.aclose()

        before, after = asyncio.run(fetch_twice())
        paths = [r.path for r in web.requests() if r.host == host]
    assert before == "robots_disallowed"
    assert after == "ok"
    assert paths == ["/robots.txt", "/p/3"]
