"""``redirected_to_url`` feeds the alias map (issue 18, ADR 024): after ``crawlstream migrate
postgres`` on a real PostgreSQL server, ``/v1/url`` answers each redirected row's target and
chain, like a redirect the crawl itself saw; values that are no redirect are counted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
from aiohttp.test_utils import TestClient, TestServer
from migrate_support import migrate_settings, run_migration
from pg_support import create_schema
from prometheus_client import CollectorRegistry

from crawlstream.api import RUNNER_OPTIONS, from_settings
from crawlstream.events import EventCodec, UrlRecord
from crawlstream.index import IndexBuilder
from crawlstream.lake import REDIRECTS_DATASET
from crawlstream.runtime import open_host
from crawlstream.topics import URLS_RECORDS

DATASET = 5
# url, status, redirected_to_url
ROWS: list[tuple[str, int | None, str | None]] = [
    ("http://old.example.com/a", 301, "http://old.example.com/b"),  # a -> b -> https://new.example.org/c
    ("http://old.example.com/b", 302, "HTTPS://New.Example.org/c#top"),
    ("https://new.example.org/c", 200, None),
    ("http://old.example.com/rel", 200, "/moved?b=2&a=1"),  # relative; a non-3xx status is not the hop's
    ("http://old.example.com/self", 301, "http://OLD.example.com/self#x"),  # to itself: no hop
    ("http://old.example.com/bad", 301, "http://exa mple.com/"),  # not a URL
    ("http://old.example.com/blank", 301, "   "),
]


def _lookup(settings: Any, urls: list[str]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        server = TestServer(from_settings(settings, registry=CollectorRegistry()), host="127.0.0.1")
        await server.start_server(**RUNNER_OPTIONS)
        async with TestClient(server) as client:
            out = {}
            for url in urls:
                resp = await client.get("/v1/url", params={"url": url})
                assert resp.status == 200, await resp.text()
                out[url] = await resp.json()
            return out

    return asyncio.run(go())


def test_redirected_rows_are_answered_by_v1_url_with_their_chain(database: str, tmp_path: Path) -> None:
    create_schema(database)
    with psycopg.connect(database, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO visited_urls (url, crawled_timestamp, http_status_code, redirected_to_url) "
            "VALUES (%s, 1700000000, %s, %s)",
            ROWS,
        )
    settings = migrate_settings(tmp_path / "data")
    report = run_migration(settings, database, dataset_id=DATASET)
    details = report.tables["visited_urls"].details
    assert (details["redirect_mapped"], details["redirect_to_itself"], details["redirect_invalid"]) == (3, 1, 1)
    IndexBuilder.from_settings(settings).build()

    answers = _lookup(settings, [u for u, _, _ in ROWS])
    a = answers["http://old.example.com/a"]
    assert a["datasets"] == [DATASET] and a["canonical_url"] == "https://new.example.org/c"
    assert a["canonical_datasets"] == [DATASET] and a["redirect_end"] == "target"
    assert a["redirects"] == [
        {"url": "http://old.example.com/a", "location": "http://old.example.com/b", "status": 301},
        {"url": "http://old.example.com/b", "location": "https://new.example.org/c", "status": 302,
         "location_raw": "HTTPS://New.Example.org/c#top"},
    ]
    rel = answers["http://old.example.com/rel"]
    assert rel["redirects"] == [
        {"url": "http://old.example.com/rel", "location": "http://old.example.com/moved?a=1&b=2", "status": None,
         "location_raw": "/moved?b=2&a=1"}
    ]
    for url in ("http://old.example.com/self", "http://old.example.com/bad", "http://old.example.com/blank"):
        assert answers[url]["redirects"] == [] and answers[url]["datasets"] == [DATASET], url

    # published like the visited rows (marked as in the lake), so a replay rebuilds the map too
    codec = EventCodec.from_settings(settings)
    with open_host(settings) as host:
        consumer = host.bus.consumer("test-redirects")
        consumer.subscribe([URLS_RECORDS])
        records: list[UrlRecord] = []
        while batch := consumer.consume(1000, 0.5):
            records.extend(codec.decode(m.value) for m in batch)
        consumer.close()
    hops = {r.url: dict(r.extras) for r in records if r.dataset_id == REDIRECTS_DATASET}
    assert set(hops) == {"http://old.example.com/a", "http://old.example.com/b", "http://old.example.com/rel"}
    assert hops["http://old.example.com/b"]["location"] == "https://new.example.org/c"
