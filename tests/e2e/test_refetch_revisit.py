"""Re-fetch and revisit on the embedded crawl (issue 13, ADR 022), counted from the synthetic web's
own request log: real HTTP, the real embedded Redis, the embedded bus, the real content store.

The web has no special pages (fast passes) and pages that change on every full response
(``changing_every=2``: /p/0, /p/2 ...), with ETag + Last-Modified (``k % 3 == 0``), only
Last-Modified (``k % 3 == 1``) or no validator (``k % 3 == 2``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from e2e_support import crawl_env, crawl_settings, page_requests
from test_embedded_crawl import read_results

from crawlstream.cli._run import run_crawl
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.events import ContentStored, FetchResult
from crawlstream.runtime import open_host
from crawlstream.settings import Settings
from crawlstream.store import ContentStore, open_store
from crawlstream.topics import CONTENT_STORED
from crawlstream.urls import canonicalize, domain_checksum

SERVICES = ("deduper", "scheduler", "fetcher", "link-extractor", "bucket-compressor")
REVISIT_AFTER_S = 6.0  # run 1 must end within it (else it revisits its own first pages)


def _web() -> DemoWeb:
    return DemoWeb(3, pages_per_domain=6, seed=5, special_every=0, changing_every=2, crawl_delay_s=0.05)


def _crawl(settings: Settings, web: DemoWeb, seeds: list[str]) -> None:
    with open_host(settings) as host:
        summary = run_crawl(host, seeds, services=SERVICES, exit_when_done=True, resolve_map=web.resolve_map)
    assert summary.reason == "drained"


def _html_pages(web: DemoWeb) -> set[str]:
    """Reachable pages served as HTML with validators (sitemaps and robots.txt aside)."""
    return {u for u in web.reachable_pages() if "/p/" in u or u.endswith("/")}


def test_refetch_of_a_quarantined_page_makes_one_request_and_stores_the_newer_body(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = crawl_settings(data_dir)
    with _web() as web:
        _crawl(settings, web, web.seed_urls())
        victim = next(u for u in sorted(web.model.changing_pages()) if u in {r.url for r in web.requests()})
        with open_store(settings) as store:
            old_body = store.get(victim)
            loc = store.entry(victim).location  # type: ignore[union-attr]
        shard = f"{domain_checksum(canonicalize(victim).domain):03d}"
        segment = data_dir / "store" / "shards" / shard / "segments" / loc.segment
        data = bytearray(segment.read_bytes())
        data[loc.offset + loc.length - 8] ^= 0x5A  # damage the stored frame
        segment.write_bytes(bytes(data))
        with open_store(settings) as store:
            store.verify()
            assert store.quarantined_urls() == [victim]
        before = Counter(r.url for r in page_requests(web.requests()))

        env = {**os.environ, **crawl_env(data_dir)}
        answer = subprocess.run(
            [sys.executable, "-m", "crawlstream", "refetch", "--quarantined", "ftp://files.example/x", "-"],
            input=b"http://[::1/\n\n# a comment\n",
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert json.loads(answer.stdout) == {
            "sent": 1,
            "quarantined": 1,
            "lines": 2,
            "urls": 0,
            "duplicates": 0,
            "invalid": {"host": 1, "scheme": 1},
        }

        _crawl(settings, web, web.seed_urls())  # seeds again: dedupe drops them
        after = Counter(r.url for r in page_requests(web.requests()))

    assert after - before == Counter({victim: 1})  # exactly one new request, to the quarantined page
    with open_store(settings) as store:
        assert store.quarantined_urls() == []
        new_body = store.get(victim)
    assert new_body != old_body and b"revision 1" in new_body


def test_a_revisit_is_conditional_and_stores_only_what_changed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = crawl_settings(data_dir, CRAWLSTREAM_SCHEDULER_REVISIT_AFTER_S=str(REVISIT_AFTER_S))
    with _web() as web:
        _crawl(settings, web, web.seed_urls())
        first = page_requests(web.requests())
        with open_store(settings) as store:
            entries_before = {e.url: (e.location, e.seq) for e in store.search()}
            bodies_before = {u: store.get(u) for u in entries_before}
        run_2 = int(time.time() * 1000)
        time.sleep(max(0.0, REVISIT_AFTER_S - (time.monotonic() - first[-1].time_s)) + 0.3)
        # Every page's revisit is due now. This run schedules the next ones an hour ahead, so however
        # long it takes under load, it fetches each page exactly once.
        _crawl(crawl_settings(data_dir, CRAWLSTREAM_SCHEDULER_REVISIT_AFTER_S="3600"), web, [])
        second = page_requests(web.requests())[len(first) :]

    pages = _html_pages(web)
    changing = web.model.changing_pages() & pages
    assert changing and pages - changing
    assert Counter(r.url for r in first if r.url in pages) == Counter(dict.fromkeys(pages, 1))
    by_url = {r.url: r for r in second}
    assert Counter(r.url for r in second if r.url in pages) == Counter(dict.fromkeys(pages, 1))  # one each
    for url in pages:
        etag, modified = web.model.validator_kinds(*_host_path(url))
        request = by_url[url]
        assert (request.if_none_match is not None, request.if_modified_since is not None) == (etag, modified), url
        assert request.status == (200 if url in changing or not (etag or modified) else 304), url

    results = [r for r in read_results(settings) if isinstance(r, FetchResult) and r.fetched_at_ms >= run_2]
    outcomes = {r.url: r.outcome for r in results if r.url in pages}
    for url in pages:
        etag, modified = web.model.validator_kinds(*_host_path(url))
        expected = "ok" if url in changing else ("not_modified" if etag or modified else "unchanged")
        assert outcomes[url] == expected, url
    stored = [e for e in read_results(settings, CONTENT_STORED) if isinstance(e, ContentStored)]
    assert {e.url for e in stored if e.fetched_at_ms >= run_2} == changing  # nothing else was written

    with open_store(settings) as store:
        for url, (location, seq) in entries_before.items():
            entry = store.entry(url)
            assert entry is not None
            if url in changing:
                body = store.get(url)
                assert body != bodies_before[url] and b"revision 1" in body  # the newer body is served
            else:
                assert (entry.location, entry.seq) == (location, seq), url  # no new record


def _host_path(url: str) -> tuple[str, str]:
    host, _, path = url.split("://", 1)[1].partition("/")
    return host, "/" + path


def test_a_refetched_identical_body_repairs_a_quarantined_page(tmp_path: Path) -> None:
    url, body = "http://a.example/p", b"<html>" + b"same content " * 200 + b"</html>"
    with ContentStore(tmp_path / "store") as store:
        loc = store.put(url, body, content_type="text/html", status=200)
    segment = tmp_path / "store" / "segments" / loc.segment
    data = bytearray(segment.read_bytes())
    data[loc.offset + loc.length - 8] ^= 0x5A
    segment.write_bytes(bytes(data))
    with ContentStore(tmp_path / "store") as store:
        store.verify()
        assert store.quarantined_urls() == [url]
        store.put(url, body, content_type="text/html", status=200)  # what the bucket compressor does
        assert store.get(url) == body
