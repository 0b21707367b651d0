"""Issue 26's first must-show: a crawl plus an imported dataset written to S3 (a real S3 server,
versitygw on loopback) and served from S3 answer exactly as the same crawl and import on local
disk: every ``/v1/domain/{d}``, every page of every URL listing, ``/v1/url``, and every stored
page's ``/v1/content`` body, with the content store's archive tier on S3 too.

Two embedded crawls of the same synthetic web (one with ``lake.uri`` and ``store.archive_uri`` on
S3, one all local), each followed by the same ``crawlstream ingest`` of a real URL list and an
index build; then every page of the S3 store is moved to the archive tier (tier ages 0), which
uploads its segments, and read back through the API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import api_answers, content_answers, crawl_env, crawl_settings, demo_web, indexed_urls, url_answers

from crawlstream.cli import main as cli_main
from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexBuilder
from crawlstream.objectstore import open_objects, parse_location
from crawlstream.runtime import open_host
from crawlstream.settings import Settings
from crawlstream.store import open_store
from crawlstream.urls import registered_domain_or_host

IMPORTED_ID = 7
IMPORT_LINES = 3000  # of ../shared/data/urls/protego-top-10000-websites.txt


def _crawl_and_import(settings: Settings, env: dict[str, str], imported: Path, web: Any,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    with open_host(settings) as host:
        summary = run_crawl(host, web.seed_urls(), services=DEFAULT_SERVICES, exit_when_done=True,
                            resolve_map=web.resolve_map)
    assert summary.to_json()["reason"] == "drained"
    with monkeypatch.context() as m:
        for key, value in env.items():
            m.setenv(key, value)
        assert cli_main(["ingest", str(imported), "--dataset-id", str(IMPORTED_ID), "--no-rejects"]) == 0
    assert IndexBuilder.from_settings(settings).build().version is not None


@pytest.fixture(scope="module")
def crawls(tmp_path_factory: pytest.TempPathFactory, s3_server: LocalS3, shared_data: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("s3crawl")
    imported = root / "imported.txt"
    hosts = (shared_data / "urls" / "protego-top-10000-websites.txt").read_text().split()[:IMPORT_LINES]
    imported.write_text("".join(f"https://{h}/\n" for h in hosts))  # the list holds bare host names
    s3_extra = {**s3_server.env, "CRAWLSTREAM_LAKE_URI": "s3://crawlstream/e2e-crawl/lake",
                "CRAWLSTREAM_STORE_ARCHIVE_URI": "s3://crawlstream/e2e-crawl/archive"}
    runs: dict[str, Any] = {}
    monkeypatch = pytest.MonkeyPatch()
    try:
        with demo_web(n_domains=12) as web:
            for name, extra in (("local", {}), ("s3", s3_extra)):
                data_dir = root / name / "data"
                env = crawl_env(data_dir, **extra)
                settings = crawl_settings(data_dir, **extra)
                web.clear_log()
                _crawl_and_import(settings, env, imported, web, monkeypatch)
                runs[name] = settings
            domains = {registered_domain_or_host(h) for h in web.hosts}
        domains |= {registered_domain_or_host(h) for h in hosts[:300]}
        runs["domains"] = sorted(domains)
        yield runs
    finally:
        monkeypatch.undo()


def test_the_lake_and_index_live_on_s3_and_not_on_local_disk(crawls: dict[str, Any]) -> None:
    s3: Settings = crawls["s3"]
    store = open_objects(parse_location(s3.lake.uri), s3.s3)
    keys = [o.rel for o in store.list()]
    assert any(k.startswith("urls/dataset_id=1/") and k.endswith(".parquet") for k in keys)
    assert any(k.startswith(f"urls/dataset_id={IMPORTED_ID}/") for k in keys)
    assert "index/manifest.json" in keys
    assert not (s3.data_dir / "urls").exists() and not (s3.data_dir / "index").exists()


def test_every_answer_from_s3_equals_the_local_one(crawls: dict[str, Any]) -> None:
    local = api_answers(crawls["local"], crawls["domains"])
    remote = api_answers(crawls["s3"], crawls["domains"])
    assert remote == local
    urls = indexed_urls(local)
    assert len(urls) > 200 and len(set(urls)) == len(urls)
    sample = [*urls[::7], "http://NOT-CRAWLED.example/", urls[0].upper()]
    assert url_answers(crawls["s3"], sample) == url_answers(crawls["local"], sample)


def test_pages_archived_on_s3_are_served_byte_identical(crawls: dict[str, Any]) -> None:
    local: Settings = crawls["local"]
    s3: Settings = crawls["s3"]
    urls = [u for u in indexed_urls(api_answers(local, crawls["domains"])) if "/p" in u or u.endswith("/")]
    before = content_answers(local, urls)
    assert sum(not v.startswith("HTTP") for v in before.values()) > 50
    archiving = dataclasses.replace(s3, store=dataclasses.replace(
        s3.store, warm_after_s=0.0, cold_after_s=0.0, archive_after_s=0.0))
    with open_store(archiving) as store:
        report = store.recompress(0.0, tier="archive")
    assert report.moved_bodies > 50 and report.segments_written
    archive = open_objects(parse_location(s3.store.archive_uri), s3.s3)
    assert any(o.rel.endswith(".seg") for o in archive.list())
    assert content_answers(s3, urls) == before
