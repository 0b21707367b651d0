"""End-to-end crawl support: the synthetic web on 127.0.0.1 and settings for a fast, polite crawl.

Delays are scaled down (scheduler minimum 50 ms, robots Crawl-delay 300 ms, back-off capped
at 300 ms) and the fetch timeout sits below the slow page's delay, so a 30-domain crawl with
every special page finishes in seconds while every politeness rule still applies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from crawlstream.devtools.demoweb import DemoWeb, RequestRecord, pairs_apart
from crawlstream.devtools.deployment import MEMBERS, group_of
from crawlstream.settings import Settings, load

MIN_DELAY_S = 0.05
CRAWL_DELAY_S = 0.3
MAX_RETRIES = 2
MAX_BODY_BYTES = 256 * 1024
FETCH_TIMEOUT_S = 1.0  # below SLOW_S, with room for a loaded machine (the web shares the test process)
SLOW_S = 2.0
ROBOTS_PATHS = ("/robots.txt", "/robots-moved.txt")
RETRYABLE = ("/status/500", "/status/503", "/status/429", "/slow")  # they always fail: retried
SITEMAP_MAX_BYTES = 1024 * 1024  # the web's sitemap bomb inflates past it
# service name -> (consumer group, topics it consumes), from the services' own wiring
GROUPS = {name: group_of(name) for name in MEMBERS}

SLACK_S = 0.005  # clock granularity between the scheduler (ms, wall clock) and the server (monotonic)


def crawl_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """``CRAWLSTREAM_*`` variables of the test crawl (also used by the CLI subprocess tests)."""
    env = {
        "CRAWLSTREAM_DATA_DIR": str(data_dir),
        "CRAWLSTREAM_BUS_PARTITIONS": "4",
        "CRAWLSTREAM_BUS_FSYNC": "never",
        "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.1",
        "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": "100000",
        "CRAWLSTREAM_DEDUPE_SNAPSHOT_INTERVAL_S": "1",
        "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": str(MIN_DELAY_S),
        "CRAWLSTREAM_SCHEDULER_RESPONSE_TIME_FACTOR": "0.5",
        "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.3",
        "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": str(MAX_RETRIES),
        "CRAWLSTREAM_FETCH_TIMEOUT_S": str(FETCH_TIMEOUT_S),
        "CRAWLSTREAM_FETCH_READ_TIMEOUT_S": str(FETCH_TIMEOUT_S),
        "CRAWLSTREAM_FETCH_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "CRAWLSTREAM_FETCH_ROBOTS_ERROR_BACKOFF_S": "0.3",
        "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
        "CRAWLSTREAM_CRAWL_CHECK_INTERVAL_S": "0.2",
        "CRAWLSTREAM_CRAWL_PROGRESS_INTERVAL_S": "2",
        "CRAWLSTREAM_CRAWL_SITEMAP_MAX_BYTES": str(SITEMAP_MAX_BYTES),
        # no fixed metrics ports: services of two tests (xdist workers) would compete for them
        "CRAWLSTREAM_METRICS_PORT": "0",
    }
    env.update(extra)
    return env


def crawl_settings(data_dir: Path, **extra: str) -> Settings:
    return load(crawl_env(data_dir, **extra))


def demo_web(n_domains: int = 30, **kw: object) -> DemoWeb:
    """The web every e2e test crawls (not started)."""
    args: dict[str, object] = {
        "pages_per_domain": 8,
        "seed": 4,
        "crawl_delay_s": CRAWL_DELAY_S,
        "slow_s": SLOW_S,
        "huge_bytes": 1024 * 1024,
        "bomb_bytes": 8 * 1024 * 1024,
        "sitemap_bomb_bytes": 4 * SITEMAP_MAX_BYTES,
    }
    args.update(kw)
    return DemoWeb(n_domains, **args)  # type: ignore[arg-type]


def page_requests(log: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The web's request log without robots.txt fetches."""
    return [r for r in log if r.path not in ROBOTS_PATHS]


def assert_each_reachable_page_fetched_once(web: DemoWeb, pages: Sequence[RequestRecord]) -> None:
    """Exactly the reachable pages, each answered once; the always-failing ones spend every retry.

    A request the server got to only after its client had given up (``abandoned``: a stalled
    server on a loaded machine, the fetcher's time-out) was an attempt the crawler retried, so it
    is not counted as answered; every page's attempts still stay within its retries."""
    counts = Counter(r.url for r in pages)
    assert set(counts) == web.reachable_pages()
    answered = Counter(r.url for r in pages if not r.abandoned)
    once = {u: answered[u] for u in counts if not u.endswith(RETRYABLE)}
    assert set(once.values()) == {1}
    assert max(counts.values()) <= 1 + MAX_RETRIES
    retried = {u: n for u, n in counts.items() if u.endswith(RETRYABLE)}
    assert retried and set(retried.values()) == {1 + MAX_RETRIES}


def assert_no_robots_disallowed_fetch(web: DemoWeb, pages: Sequence[RequestRecord]) -> set[str]:
    """No disallowed URL or path was requested; returns the disallowed URLs the web links to."""
    disallowed = web.model.all_disallowed_urls_seen()
    assert disallowed  # the web links to forbidden pages, so this checks something
    assert not {r.url for r in pages} & disallowed
    for r in pages:
        assert not any(r.path.startswith(p) for p in web.disallowed_paths(r.host)), r.url
    return disallowed


def assert_domain_spacing(web: DemoWeb, pages: Sequence[RequestRecord]) -> None:
    """Requests to one registered domain never closer than the delay or its Crawl-delay."""
    model = web.model
    by_domain: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in pages:
        index = model.domain_index(r.host)
        assert index is not None
        by_domain[index].append(r)
    checked = 0
    for index, records in by_domain.items():
        hosts = [h for h in model.hosts if model.domain_index(h) == index]
        required = max(MIN_DELAY_S, *(model.crawl_delay_s_for(h) or 0.0 for h in hosts))
        gaps = [gap for _, _, gap in pairs_apart(records)]
        assert min(gaps, default=required) >= required - SLACK_S, (model.domains[index], required, min(gaps))
        checked += len(gaps)
    assert checked > 100
    assert any(model.crawl_delay_s_for(h) == CRAWL_DELAY_S for h in model.hosts)


def api_answers(settings: Settings, domains: Iterable[str], page_limit: int = 7) -> dict[str, Any]:
    """What the query API answers for each domain, through the real app on loopback:
    ``/v1/domain/{d}`` (its datasets and counts, or None for a 404) and the URLs of every
    dataset, walked page by page by ``next_offset`` (a small limit, so paging is exercised).
    Fields that differ between two crawls of the same web (fetch times, index version) are
    left out; everything else is kept, so two crawls can be compared with ``==``."""
    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client import CollectorRegistry

    from crawlstream.api import from_settings

    async def walk() -> dict[str, Any]:
        app = from_settings(settings, registry=CollectorRegistry())
        out: dict[str, Any] = {}
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            for domain in sorted(set(domains)):
                resp = await client.get(f"/v1/domain/{domain}")
                if resp.status == 404:
                    out[domain] = None
                    continue
                assert resp.status == 200, await resp.text()
                body = await resp.json()
                pages: dict[int, list[list[str]]] = {}
                for dataset in body["datasets"]:
                    dataset_id, offset, walked = dataset["dataset_id"], 0, []
                    while offset is not None:
                        page = await client.get(
                            f"/v1/domain/{domain}/datasets/{dataset_id}/urls?offset={offset}&limit={page_limit}"
                        )
                        assert page.status == 200, await page.text()
                        listing = await page.json()
                        assert listing["total"] == dataset["url_count"]
                        walked.append([item["url"] for item in listing["items"]])
                        offset = listing["next_offset"]
                    pages[dataset_id] = walked
                out[domain] = {"domain_id": body["domain_id"], "datasets": body["datasets"], "pages": pages}
        return out

    return asyncio.run(walk())


def url_answers(settings: Settings, urls: Iterable[str]) -> dict[str, Any]:
    """``/v1/url`` for each of ``urls`` (raw forms welcome) through the real app on loopback,
    without ``index_version`` (so two indexes of the same data compare with ``==``)."""
    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client import CollectorRegistry

    from crawlstream.api import from_settings

    async def ask() -> dict[str, Any]:
        app = from_settings(settings, registry=CollectorRegistry())
        out: dict[str, Any] = {}
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            for url in urls:
                resp = await client.get("/v1/url", params={"url": url})
                assert resp.status == 200, await resp.text()
                body = await resp.json()
                body.pop("index_version")
                out[url] = body
        return out

    return asyncio.run(ask())


def content_answers(settings: Settings, urls: Iterable[str]) -> dict[str, str]:
    """``GET /v1/content`` for each of ``urls`` through the real app on loopback, the API serving
    the store (``api.serve_content``, as ``crawlstream demo`` runs it; anonymous reads, as on a
    loopback bind without a tokens file): each URL's body as its sha256, or ``HTTP <status>``
    when the answer is not a 200. The app opens the store's shards as their writer: call it
    only while no bucket-compressor runs, and not while another process has the store open."""
    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client import CollectorRegistry

    from crawlstream.api import from_settings

    serving = dataclasses.replace(settings, api=dataclasses.replace(settings.api, serve_content=True))

    async def ask() -> dict[str, str]:
        app = from_settings(serving, registry=CollectorRegistry())
        out: dict[str, str] = {}
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            for url in urls:
                resp = await client.get("/v1/content", params={"url": url})
                body = await resp.read()
                out[url] = hashlib.sha256(body).hexdigest() if resp.status == 200 else f"HTTP {resp.status}"
        return out

    return asyncio.run(ask())


def indexed_urls(answers: dict[str, Any]) -> list[str]:
    """Every URL the API listed, in answer order (duplicates kept, so they can be counted)."""
    return [
        url
        for answer in answers.values()
        if answer is not None
        for walked in answer["pages"].values()
        for page in walked
        for url in page
    ]
