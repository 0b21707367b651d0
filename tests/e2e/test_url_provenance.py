"""Where every URL came from (issue 14, ADR 024), on a crawl of the synthetic web.

One embedded crawl (module fixture) of a small web seeded with its home pages written in
non-canonical raw forms (``WebModel.raw_seed_lines``); its lake is indexed and the query API
asked, on 127.0.0.1:

* for every URL the web's own request log shows answering a 3xx: ``/v1/url`` gives the chain
  the web's model says (each hop, status, the Location as written when it was not canonical)
  and the canonical target it ends at, with the datasets holding it;
* for every seed line: its raw form maps to its canonical URL, and that URL's recorded raw
  form is the line (none for a line already canonical);
* for every link the web's pages write non-canonically (``HTTP://HOST.UPPER/...#section``,
  ``local#frag``...): ``/v1/url`` asked with the absolute form the href resolves to answers the
  canonical URL, and each URL's recorded raw form is the one the deduper forwarded it with
  (the first seen: ``urls.frontier`` says which), itself a form some fetched page wrote;
* ``crawlstream replay`` rebuilds those raw-forms rows from ``urls.records``.
"""

from __future__ import annotations

import io
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from e2e_support import ROBOTS_PATHS, crawl_settings, demo_web, url_answers

from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord
from crawlstream.devtools.demoweb._render import render_html
from crawlstream.events import DiscoveredUrl
from crawlstream.index import IndexBuilder
from crawlstream.lake import RAW_FORMS_DATASET
from crawlstream.replay import prepare_target
from crawlstream.runtime import open_host
from crawlstream.settings import Settings
from crawlstream.topics import REPLAY_SOURCES, URLS_FRONTIER
from crawlstream.urls import canonicalize

_HREF = re.compile(r'href="([^"]*)"')
_BASE = re.compile(r'<base href="([^"]*)"')
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass
class Crawl:
    web: DemoWeb
    settings: Settings
    log: list[RequestRecord]
    seeds: list[str]
    forwarded: list[DiscoveredUrl]  # what the deduper sent to urls.frontier: each URL once, as first seen
    root: Path


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    settings = crawl_settings(tmp_path_factory.mktemp("provenance") / "data")
    with demo_web(n_domains=8, pages_per_domain=4, special_every=7) as web:
        seeds = web.raw_seed_lines()
        with open_host(settings) as host:
            summary = run_crawl(
                host,
                seeds,
                services=DEFAULT_SERVICES,
                exit_when_done=True,
                resolve_map=web.resolve_map,
                progress_stream=io.StringIO(),
                is_tty=False,
            )
        assert summary.reason == "drained"
        log = web.requests()
    IndexBuilder.from_settings(settings).build()
    yield Crawl(web, settings, log, seeds, _forwarded(settings), settings.data_dir.parent)


def _forwarded(settings: Settings) -> list[DiscoveredUrl]:
    """Every event of ``urls.frontier``, read by a fresh group from the start."""
    with open_host(settings) as host:
        consumer = host.bus.consumer("test.provenance")
        consumer.subscribe([URLS_FRONTIER])
        events: list[DiscoveredUrl] = []
        try:
            idle = 0
            while idle < 3:
                batch = consumer.consume(1000, 0.2)
                idle = 0 if batch else idle + 1
                events += [host.codec.decode(m.value) for m in batch]
        finally:
            consumer.close()
    return events


def _written_forms(web: DemoWeb, log: list[RequestRecord]) -> dict[str, set[str]]:
    """Canonical URL -> every absolute form a fetched page of the web writes a link to it in,
    resolved as a browser does (an absolute href as written, others against the page or its
    ``<base>``), from the web's own renderer rather than the crawler's extractor."""
    forms: dict[str, set[str]] = defaultdict(set)
    for record in log:
        if record.status != 200 or record.path in ROBOTS_PATHS:
            continue
        page = web.model.page(record.host, record.path)
        if page.kind != "html":
            continue
        body, _ = render_html(page, record.host, record.path, web.model.seed, web.page_bytes)
        text = body.decode("latin-1")  # the hrefs are ASCII in either charset
        base = _BASE.search(text)
        for href in _HREF.findall(text):
            if href.startswith(("#", "mailto:", "javascript:", "tel:", "ftp:")):
                continue
            absolute = href if _ABSOLUTE.match(href) else urljoin(base.group(1) if base else record.url, href)
            forms[canonicalize(absolute).url].add(absolute)
    return forms


def _model_chain(web: DemoWeb, url: str) -> tuple[list[dict[str, Any]], str]:
    """The hops the web's model serves from ``url``, as ``/v1/url`` lists them, and how it ends."""
    hops: list[dict[str, Any]] = []
    seen = {url}
    while True:
        host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        page = web.model.page(host, path)
        if page.kind != "redirect":
            return hops, "target"
        assert page.location is not None
        target = canonicalize(urljoin(url, page.location)).url
        hop: dict[str, Any] = {"url": url, "location": target, "status": page.status}
        written = urljoin(url, page.location)  # the fetcher resolves a relative Location
        if written != target:
            hop["location_raw"] = written
        hops.append(hop)
        if target in seen:
            return hops, "loop"
        seen.add(target)
        url = target


def test_every_redirecting_url_of_the_crawl_answers_its_chain_and_canonical_target(crawl: Crawl) -> None:
    redirecting = sorted({r.url for r in crawl.log if 300 <= r.status < 400 and r.path not in ROBOTS_PATHS})
    assert any(u.endswith("/chain/1") for u in redirecting), "the web serves a chain of 3 hops"
    answers = url_answers(crawl.settings, redirecting)
    chains = 0
    for url in redirecting:
        doc = answers[url]
        hops, end = _model_chain(crawl.web, url)
        assert doc["redirects"] == hops, url
        assert doc["redirect_end"] == end, url
        assert doc["canonical_url"] == hops[-1]["location"], url
        if end == "target":  # a fetched page: the lake holds it in the crawl's dataset
            assert doc["canonical_datasets"] == [crawl.settings.crawl.dataset_id], url
        chains += len(hops) >= 2
    assert chains >= 3  # /chain/1 (3 hops), /chain/2 (2 hops), both loop members


def test_every_seed_line_maps_to_its_canonical_url_and_is_recorded_as_its_raw_form(crawl: Crawl) -> None:
    answers = url_answers(crawl.settings, crawl.seeds)
    expected = crawl.web.seed_urls()
    assert any(line != url for line, url in zip(crawl.seeds, expected, strict=True))
    for line, url in zip(crawl.seeds, expected, strict=True):
        doc = answers[line]
        assert doc["url"] == url and doc["requested_url"] == line
        assert doc["raw_form"] == (None if line == url else {"raw": line, "source": "seed"}), line
        if crawl.web.model.page(url.split("/")[2], "/").kind == "html" and doc["datasets"]:
            assert doc["datasets"] == [crawl.settings.crawl.dataset_id]
    fetched_homes = {r.url for r in crawl.log if r.path == "/" and r.status == 200}
    assert sum(bool(answers[line]["datasets"]) for line in crawl.seeds) == len(fetched_homes & set(expected))


def test_links_written_non_canonically_answer_their_canonical_url_and_first_seen_form(crawl: Crawl) -> None:
    forms = _written_forms(crawl.web, crawl.log)
    non_canonical = sorted({form for url, written in forms.items() for form in written if form != url})
    assert any(re.match(r"HTTP://[A-Z0-9.-]+/.*#section-", f) for f in non_canonical), "the web writes these"
    assert any(f.startswith("http://") and f.endswith("#frag") for f in non_canonical)
    by_url = {e.url: e for e in crawl.forwarded}
    assert len(by_url) == len(crawl.forwarded), "the deduper forwards each URL once"
    asked = [f for f in non_canonical if canonicalize(f).url in by_url]  # links the crawl followed
    assert len(asked) >= 20
    answers = url_answers(crawl.settings, asked + sorted(by_url))
    for form in asked:
        doc = answers[form]
        assert (doc["url"], doc["requested_url"]) == (canonicalize(form).url, form), form
        assert doc["raw_form"] == answers[doc["url"]]["raw_form"], form  # the URL's, however asked
    recorded = 0
    for url, event in by_url.items():
        raw_form = answers[url]["raw_form"]
        if event.raw_url is None:
            assert raw_form is None, url
            continue
        assert raw_form == {"raw": event.raw_url, "source": event.source}, url
        recorded += event.source == "link"
        if event.source == "link":  # the absolute form of an href some fetched page wrote
            assert event.raw_url in forms[url], (url, event.raw_url, forms[url])
    assert recorded >= 10
    # Canonical links cost nothing: the raw forms are those of URLs first seen written otherwise.
    assert 0 < recorded < sum(e.source == "link" for e in crawl.forwarded)


def test_replay_rebuilds_the_raw_forms_of_links(crawl: Crawl) -> None:
    from crawlstream.cli._replay import replay_into

    urls = sorted(e.url for e in crawl.forwarded if e.raw_url is not None)
    live = url_answers(crawl.settings, urls)
    into = crawl.root / "replayed"
    state, _ = prepare_target(into, sorted(REPLAY_SOURCES))
    with open(os.devnull, "w") as sink:
        summary = replay_into(crawl.settings, into, state, progress_out=sink)
    assert summary["interrupted"] is False
    rebuilt = crawl_settings(into)
    assert (rebuilt.data_dir / "urls" / f"dataset_id={RAW_FORMS_DATASET}").is_dir()
    assert url_answers(rebuilt, urls) == live
    assert all(doc["raw_form"] is not None for doc in live.values())
