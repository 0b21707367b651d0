"""Revisits at the fetch edge (ADR 022): validators sent back, 304 and identical bodies reported
as such, against the synthetic web on 127.0.0.1 (real HTTP)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import xxhash

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.fetch import Fetcher, FetchOutcome
from crawlstream.settings import FetchSettings


@pytest.fixture(scope="module")
def web() -> Iterator[DemoWeb]:
    with DemoWeb(3, pages_per_domain=6, seed=3, changing_every=2) as demo:
        yield demo


def _fetch(web: DemoWeb, url: str, **kw: Any) -> FetchOutcome:
    async def go() -> FetchOutcome:
        async with Fetcher(
            config=FetchSettings(user_agent="crawlstream-test/1.0", allow_private_networks=True, timeout_s=5.0),
            resolve_map=web.resolve_map,
            resolve_map_only=True,
        ) as fetcher:
            return await fetcher.afetch(url, attempt=0, **kw)

    return asyncio.run(go())


def _url(web: DemoWeb, k: int) -> str:
    return f"http://{web.model.domains[1]}/p/{k}"  # domain 1: robots.txt allows every /p/k


def test_a_matching_etag_gets_304_not_modified_and_the_server_saw_the_header(web: DemoWeb) -> None:
    first = _fetch(web, _url(web, 3))  # k % 3 == 0: ETag and Last-Modified; k odd: never changes
    assert first.outcome == "ok" and first.headers["etag"] and first.headers["last-modified"]
    again = _fetch(web, _url(web, 3), if_none_match=first.headers["etag"])
    assert (again.outcome, again.status, again.body) == ("not_modified", 304, b"")
    assert [r.if_none_match for r in web.requests() if r.url == _url(web, 3)] == [None, first.headers["etag"]]


def test_an_unchanged_last_modified_gets_304(web: DemoWeb) -> None:
    first = _fetch(web, _url(web, 1))  # k % 3 == 1: Last-Modified only
    assert "etag" not in first.headers
    again = _fetch(web, _url(web, 1), if_modified_since=first.headers["last-modified"])
    assert again.outcome == "not_modified"


def test_an_identical_body_without_validators_is_unchanged_and_not_carried(web: DemoWeb) -> None:
    first = _fetch(web, _url(web, 5))  # k % 3 == 2: no validators at all; k odd: static
    assert first.content_hash == xxhash.xxh3_128_hexdigest(first.body)
    again = _fetch(web, _url(web, 5), previous_content_hash=first.content_hash)
    assert (again.outcome, again.status, again.body, again.content_hash) == ("unchanged", 200, b"", first.content_hash)


def test_a_changing_page_answers_a_stale_etag_with_its_new_body(web: DemoWeb) -> None:
    url = _url(web, 0)  # k % 2 == 0: a new revision on every full response
    first = _fetch(web, url)
    second = _fetch(web, url, if_none_match=first.headers["etag"], previous_content_hash=first.content_hash)
    assert second.outcome == "ok" and second.body != first.body
    assert second.headers["etag"] != first.headers["etag"]
    assert b"revision 1" in second.body and web.revision(url) == 2
