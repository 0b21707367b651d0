"""Where every URL came from (issue 14, ADR 024), on a crawl of the synthetic web.

One embedded crawl (module fixture) of a small web seeded with its home pages written in
non-canonical raw forms (``WebModel.raw_seed_lines``); its lake is indexed and the query API
asked, on 127.0.0.1:

* for every URL the web's own request log shows answering a 3xx: ``/v1/url`` gives the chain
  the web's model says (each hop, status, the Location as written when it was not canonical)
  and the canonical target it ends at, with the datasets holding it;
* for every seed line: its raw form maps to its canonical URL, and that URL's recorded raw
  form is the line (none for a line already canonical).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import pytest
from e2e_support import ROBOTS_PATHS, crawl_settings, demo_web, url_answers

from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.demoweb import DemoWeb, RequestRecord
from crawlstream.index import IndexBuilder
from crawlstream.services._host import open_host
from crawlstream.settings import Settings
from crawlstream.urls import canonicalize


@dataclass
class Crawl:
    web: DemoWeb
    settings: Settings
    log: list[RequestRecord]
    seeds: list[str]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    settings = crawl_settings(tmp_path_factory.mktemp("provenance") / "data")
    with demo_web(n_domains=8, pages_per_domain=4, special_every=7) as web:
        seeds = web.raw_seed_lines()
        with open_host(settings) as host:
            summary = run_crawl(
                host, seeds, services=DEFAULT_SERVICES, exit_when_done=True, resolve_map=web.resolve_map,
                progress_stream=io.StringIO(), is_tty=False,
            )
        assert summary.reason == "drained"
        log = web.requests()
    IndexBuilder.from_settings(settings).build()
    yield Crawl(web, settings, log, seeds)


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
