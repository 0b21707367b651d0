"""Content read / delete / search over a real ContentStore of real pages, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from crawlstream import settings as settings_mod
from crawlstream.api import (
    CONTENT_HASH_HEADER,
    FETCHED_AT_HEADER,
    RUNNER_OPTIONS,
    URL_KEY_HEADER,
    Acl,
    from_settings,
)
from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import ConfigError
from crawlstream.index import IndexReader
from crawlstream.objectstore import open_objects, parse_location
from crawlstream.store import ContentStore
from crawlstream.urls import canonicalize, url_key
from tests.api._lake import run_client
from tests.api.test_openapi import _fuzz

Client = TestClient[Any, Any]
T = TypeVar("T")

FETCHED_AT_MS = 1_718_359_200_000  # 2024-06-14T10:00:00.000Z
BOOKS = 5  # pages of booksamillion.com (one domain, paths under /product/)
NYT = 3  # pages of nytimes.com


def _real_pages(shared_data: Path) -> list[tuple[str, bytes]]:
    """(canonical url, html) of a few real pages: BOOKS of one site, then NYT of another."""
    want = {"booksamillion.com": BOOKS, "nytimes.com": NYT}
    pages: list[tuple[str, bytes]] = []
    with open(shared_data / "html" / "manifest.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["url"] and want.get(row["site_key"], 0) > 0:
                want[row["site_key"]] -= 1
                body = gzip.decompress((shared_data / "html" / row["file"]).read_bytes())
                pages.append((canonicalize(row["url"]).url, body))
    assert len(pages) == BOOKS + NYT
    return sorted(pages, key=lambda page: ("booksamillion" not in page[0], page[0]))  # books first


@pytest.fixture(scope="module")
def pages(shared_data: Path) -> list[tuple[str, bytes]]:
    return _real_pages(shared_data)


def _fill(store: ContentStore, pages: list[tuple[str, bytes]]) -> None:
    for i, (url, body) in enumerate(pages):
        tags = ["books"] if "booksamillion" in url else ["news"]
        if i % 2 == 0:
            tags.append("even")
        store.put(
            url,
            body,
            content_type="text/html; charset=utf-8",
            title=f"page {i}",
            fetched_at_ms=FETCHED_AT_MS + i,
            tags=tags,
        )


@pytest.fixture
def store(tmp_path: Path, pages: list[tuple[str, bytes]]) -> Iterator[ContentStore]:
    with ContentStore(tmp_path / "store") as s:
        _fill(s, pages)
        yield s


def serve(
    reader: IndexReader,
    store: ContentStore | None,
    scenario: Callable[[Client], Awaitable[T]],
    *,
    acl: Acl | None = None,
    registry: CollectorRegistry | None = None,
    max_limit: int = 50,
) -> T:
    """Start the API (with ``store``) on 127.0.0.1, run ``scenario`` against it, stop it.

    Without ``acl``: the default loopback set-up (anonymous reads, the tokens of ACL_DOC)."""
    return run_client(
        reader,
        scenario,
        max_limit=max_limit,
        acl=Acl.from_mapping(ACL_DOC) if acl is None else acl,
        anonymous_reads=acl is None,
        registry=registry,
        default_limit=3,
        store=store,
    )


AS_DELETER = {"headers": {"Authorization": "Bearer tok-deleter-klmnopqrs"}}


def as_token(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _json(c: Client, method: str, path: str, **kw: Any) -> tuple[int, Any]:
    resp = await c.request(method, path, **kw)
    body = await resp.read()
    return resp.status, (await resp.json() if body else None)


# -- read ------------------------------------------------------------------------------------


def test_every_stored_page_reads_back_byte_identical_with_its_metadata(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    async def go(c: Client) -> list[tuple[int, bytes, Any]]:
        out = []
        for url, _ in pages:
            resp = await c.get("/v1/content", params={"url": url})
            out.append((resp.status, await resp.read(), resp.headers))
        return out

    for (url, body), (status, got, headers) in zip(pages, serve(reader, store, go), strict=True):
        entry = store.entry(url)
        assert entry is not None
        assert status == 200
        assert got == body
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert headers[CONTENT_HASH_HEADER] == entry.content_hash.hex()
        assert headers[URL_KEY_HEADER] == str(url_key(url))
        assert headers[FETCHED_AT_HEADER].startswith("2024-06-14T10:00:00.00")
        assert headers["Content-Security-Policy"] == "sandbox"  # stored pages never run with our origin
        assert "X-Index-Version" not in headers


def test_a_non_canonical_spelling_of_a_url_reads_the_same_page(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    url, body = pages[0]
    messy = url.replace("http://www.booksamillion.com", "HTTP://WWW.BooksAMillion.com:80") + "#reviews"

    async def go(c: Client) -> tuple[int, bytes]:
        resp = await c.get("/v1/content", params={"url": messy})
        return resp.status, await resp.read()

    assert serve(reader, store, go) == (200, body)


def test_unknown_url_is_404_and_invalid_url_is_400(reader: IndexReader, store: ContentStore) -> None:
    async def go(c: Client) -> list[tuple[int, Any]]:
        return [
            await _json(c, "GET", "/v1/content", params={"url": "https://never-stored.example.com/"}),
            await _json(c, "GET", "/v1/content", params={"url": "not a url"}),
            await _json(c, "GET", "/v1/content"),
            await _json(c, "DELETE", "/v1/content", params={"url": "ftp://x.example.com/"}, **AS_DELETER),
        ]

    (s404, e404), (s400, e400), (smissing, emissing), (sdel, edel) = serve(reader, store, go)
    assert (s404, e404["error"]) == (404, "not_stored")
    assert (s400, e400["error"]) == (400, "invalid_url")
    assert (smissing, emissing["error"]) == (400, "invalid_url")
    assert (sdel, edel["error"]) == (400, "invalid_url")


def test_a_stored_content_type_that_could_split_headers_is_served_as_octet_stream(
    reader: IndexReader, store: ContentStore
) -> None:
    store.put("https://evil.example.com/x", b"<p>hi</p>", content_type="text/html\r\nSet-Cookie: a=b")

    async def go(c: Client) -> tuple[int, bytes, Any]:
        resp = await c.get("/v1/content", params={"url": "https://evil.example.com/x"})
        return resp.status, await resp.read(), resp.headers

    status, body, headers = serve(reader, store, go)
    assert (status, body) == (200, b"<p>hi</p>")
    assert headers["Content-Type"] == "application/octet-stream"
    assert "Set-Cookie" not in headers


# -- delete ----------------------------------------------------------------------------------


def test_delete_is_204_and_the_page_is_gone_at_once_from_reads_and_search(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    victim = pages[1][0]

    async def go(c: Client) -> list[tuple[int, Any]]:
        return [
            await _json(c, "DELETE", "/v1/content", params={"url": victim}, **AS_DELETER),
            await _json(c, "GET", "/v1/content", params={"url": victim}),
            await _json(c, "DELETE", "/v1/content", params={"url": victim}, **AS_DELETER),
            await _json(c, "GET", "/v1/content/search", params={"domain": "booksamillion.com", "limit": "50"}),
        ]

    (sdel, body), (sget, err), (sagain, _), (ssearch, found) = serve(reader, store, go)
    assert (sdel, body) == (204, None)
    assert (sget, err["error"]) == (404, "not_stored")
    assert sagain == 404
    assert ssearch == 200 and victim not in [i["url"] for i in found["items"]] and found["total"] == BOOKS - 1
    assert store.entry(victim) is None
    assert store.get(pages[0][0]) == pages[0][1]  # only the victim went


# -- search ----------------------------------------------------------------------------------


def _urls(pages: list[tuple[str, bytes]], site: str) -> list[str]:
    return sorted(u for u, _ in pages if site in u)


def test_search_by_domain_path_prefix_and_tag_lists_the_matching_entries(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    async def go(c: Client) -> dict[str, Any]:
        out = {}
        for name, params in {
            "domain": {"domain": "www.BooksAMillion.com"},
            "prefix": {"path_prefix": "/product/978031"},
            "tag": {"tag": "news"},
            "tag_and_domain": {"tag": "even", "domain": "nytimes.com"},
            "nothing": {"tag": "no-such-tag"},
        }.items():
            status, doc = await _json(c, "GET", "/v1/content/search", params={**params, "limit": "50"})
            assert status == 200, doc
            out[name] = doc
        return out

    got = serve(reader, store, go)
    books, nyt = _urls(pages, "booksamillion"), _urls(pages, "nytimes")
    assert [i["url"] for i in got["domain"]["items"]] == books
    assert got["domain"]["filters"]["domain"] == "booksamillion.com"
    assert [i["url"] for i in got["prefix"]["items"]] == [u for u in books if "/product/978031" in u]
    assert got["prefix"]["items"]  # the prefix really matches something
    assert [i["url"] for i in got["tag"]["items"]] == nyt
    even_nyt = sorted(u for i, (u, _) in enumerate(pages) if i % 2 == 0 and "nytimes" in u)
    assert [i["url"] for i in got["tag_and_domain"]["items"]] == even_nyt
    assert got["nothing"] == {
        "filters": {"domain": None, "path_prefix": None, "tag": "no-such-tag"},
        "total": 0,
        "items": [],
        "next_offset": None,
    }
    first = got["domain"]["items"][0]
    entry = store.entry(first["url"])
    assert entry is not None
    assert first == {
        "url": entry.url,
        "url_key": entry.url_key,
        "content_type": "text/html; charset=utf-8",
        "title": entry.title,
        "size": entry.raw_size,
        "fetched_at": f"2024-06-14T10:00:00.00{entry.fetched_at_ms - FETCHED_AT_MS}Z",
        "tags": sorted(entry.tags),
    }


def test_search_pages_walked_by_next_offset_list_every_match_once(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    async def go(c: Client) -> list[dict[str, Any]]:
        docs, offset = [], 0
        while offset is not None:
            params = {"domain": "booksamillion.com", "limit": "2", "offset": str(offset)}
            status, doc = await _json(c, "GET", "/v1/content/search", params=params)
            assert status == 200
            docs.append(doc)
            offset = doc["next_offset"]
        return docs

    docs = serve(reader, store, go)
    assert [len(d["items"]) for d in docs] == [2, 2, 1]
    assert all(d["total"] == BOOKS for d in docs)
    assert [i["url"] for d in docs for i in d["items"]] == _urls(pages, "booksamillion")


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({}, "missing_filter"),
        ({"limit": "5"}, "missing_filter"),
        ({"domain": "a.com", "limit": "51"}, "invalid_limit"),  # above max_limit: 400, not clamped
        ({"domain": "a.com", "offset": "-1"}, "invalid_offset"),
        ({"path_prefix": "product"}, "invalid_path_prefix"),
        ({"tag": "x" * 300}, "invalid_tag"),
        ({"domain": "a..b"}, "invalid_domain"),
    ],
)
def test_search_without_a_filter_or_with_a_bad_parameter_is_400(
    reader: IndexReader, store: ContentStore, params: dict[str, str], error: str
) -> None:
    async def go(c: Client) -> tuple[int, Any]:
        return await _json(c, "GET", "/v1/content/search", params=params)

    status, doc = serve(reader, store, go)
    assert (status, doc["error"]) == (400, error), doc


# -- damage ----------------------------------------------------------------------------------


def test_a_damaged_record_is_502_never_served_counted_and_logged_once(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    victim_url = pages[2][0]
    victim = store.entry(victim_url)
    assert victim is not None
    seg = store.root / "segments" / victim.location.segment
    data = bytearray(seg.read_bytes())
    data[victim.location.offset + victim.location.length - 10] ^= 0x55  # one flipped byte in the frame
    seg.write_bytes(bytes(data))
    registry = CollectorRegistry()

    async def go(c: Client) -> list[tuple[int, bytes, Any]]:
        out = []
        for url in (victim_url, victim_url, pages[3][0]):
            resp = await c.get("/v1/content", params={"url": url})
            out.append((resp.status, await resp.read(), resp.headers))
        return out

    with caplog.at_level(logging.ERROR, logger="crawlstream.api"):
        (s1, b1, h1), (s2, b2, _), (s3, b3, _) = serve(reader, store, go, registry=registry)
    assert (s1, s2) == (502, 502)
    assert b"damaged" in b1 and b"damaged" in b2 and pages[2][1][:100] not in b1
    assert h1["Content-Type"].startswith("application/json")
    assert (s3, b3) == (200, pages[3][1])  # the rest of the segment is still served
    assert registry.get_sample_value("crawlstream_api_damaged_records_total") == 2
    api_errors = [r for r in caplog.records if r.name == "crawlstream.api._content"]
    assert len(api_errors) == 1 and str(victim.url_key) in api_errors[0].getMessage()
    assert victim_url not in caplog.text  # logs carry url_keys, never URLs
    assert store.quarantined() == [(victim.location.segment, victim.location.offset)]


# -- ACL -------------------------------------------------------------------------------------

LIMITED = "tok-limited-0123456789"  # datasets 1 and 2
READER = "tok-reader-abcdefghij"  # every dataset, no delete
DELETER = "tok-deleter-klmnopqrs"  # every dataset and delete
ACL_DOC: dict[str, Any] = {LIMITED: [1, 2], READER: "*", DELETER: {"datasets": "*", "delete": True}}


def test_a_dataset_1_token_cannot_read_dataset_2_anywhere(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    """Index, URL lookup, content and search: what only dataset 2 holds never reaches a token
    granted dataset 1, while a token granted every dataset sees it (so the data is there)."""
    one, every = "tok-dataset-one-0123", "tok-every-dataset-45"
    only_in_2 = "https://shop.example.co.uk/item/3"
    stored = pages[0][0]

    async def go(c: Client) -> dict[str, Any]:
        async def ask(token: str, path: str, **params: str) -> tuple[int, Any]:
            resp = await c.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
            body = await resp.read()
            return resp.status, (json.loads(body) if resp.content_type == "application/json" else body)

        out: dict[str, Any] = {}
        for name, token in (("one", one), ("every", every)):
            status, doc = await ask(token, "/v1/domain/example.co.uk")
            out[f"{name} domain"] = (status, [d["dataset_id"] for d in doc["datasets"]])
            out[f"{name} only-2 domain"] = (await ask(token, "/v1/domain/bücher.de"))[0]
            out[f"{name} urls of 2"] = (await ask(token, "/v1/domain/example.co.uk/datasets/2/urls"))[0]
            status, doc = await ask(token, "/v1/url", url=only_in_2)
            out[f"{name} url lookup"] = (status, doc["datasets"])
            out[f"{name} content"] = (await ask(token, "/v1/content", url=stored))[0]
            out[f"{name} search"] = (await ask(token, "/v1/content/search", domain="booksamillion.com"))[0]
        return out

    answers = serve(reader, store, go, acl=Acl.from_mapping({one: [1], every: "*"}))
    assert answers == {
        "one domain": (200, [1]),
        "one only-2 domain": 404,
        "one urls of 2": 404,
        "one url lookup": (200, []),
        "one content": 403,
        "one search": 403,
        "every domain": (200, [1, 2, 7]),
        "every only-2 domain": 200,
        "every urls of 2": 200,
        "every url lookup": (200, [2]),
        "every content": 200,
        "every search": 200,
    }


def test_acl_content_needs_an_all_datasets_token_and_delete_needs_the_delete_right(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    url = pages[0][0]
    q = {"url": url}

    def auth(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def go(c: Client) -> dict[str, int]:
        async def status(method: str, path: str, token: str | None, params: dict[str, str]) -> int:
            resp = await c.request(method, path, params=params, headers=auth(token) if token else {})
            await resp.read()
            return resp.status

        return {
            "anonymous read": await status("GET", "/v1/content", None, q),
            "anonymous search": await status("GET", "/v1/content/search", None, {"tag": "books"}),
            "limited read": await status("GET", "/v1/content", LIMITED, q),
            "limited read of an unknown url": await status("GET", "/v1/content", LIMITED, {"url": "http://n.org/"}),
            "limited search": await status("GET", "/v1/content/search", LIMITED, {"tag": "books"}),
            "reader read": await status("GET", "/v1/content", READER, q),
            "reader search": await status("GET", "/v1/content/search", READER, {"tag": "books"}),
            "reader delete": await status("DELETE", "/v1/content", READER, q),
            "read after refused delete": await status("GET", "/v1/content", READER, q),
            "deleter delete": await status("DELETE", "/v1/content", DELETER, q),
            "read after delete": await status("GET", "/v1/content", READER, q),
        }

    assert serve(reader, store, go, acl=Acl.from_mapping(ACL_DOC)) == {
        "anonymous read": 401,
        "anonymous search": 401,
        "limited read": 403,
        "limited read of an unknown url": 403,  # the same answer: existence does not leak
        "limited search": 403,
        "reader read": 200,
        "reader search": 200,
        "reader delete": 403,
        "read after refused delete": 200,
        "deleter delete": 204,
        "read after delete": 404,
    }


@pytest.mark.parametrize(
    "value",
    [
        {"datasets": "*", "delete": "yes"},
        {"delete": True},
        {"datasets": "*", "delete": True, "admin": True},
        {"datasets": [1, "x"], "delete": True},
    ],
)
def test_acl_object_form_is_validated(value: object) -> None:
    with pytest.raises(ConfigError):
        Acl.from_mapping({"tok": value})


def test_acl_list_form_never_grants_delete_and_object_form_can() -> None:
    acl = Acl.from_mapping({"a": "*", "b": [3], "c": {"datasets": [3], "delete": True}, "d": {"datasets": "*"}})
    grants = {t: acl.authorize(f"Bearer {t}") for t in "abcd"}
    assert {t: (g.datasets, g.delete) for t, g in grants.items() if g is not None} == {
        "a": (None, False),
        "b": (frozenset({3}), False),
        "c": (frozenset({3}), True),
        "d": (None, False),
    }


# -- wiring ----------------------------------------------------------------------------------


def test_without_a_store_content_routes_are_503_and_not_documented(reader: IndexReader) -> None:
    async def go(c: Client) -> list[Any]:
        return [
            await _json(c, "GET", "/v1/content", params={"url": "http://a.com/"}),
            await _json(c, "DELETE", "/v1/content", params={"url": "http://a.com/"}, **AS_DELETER),
            await _json(c, "GET", "/v1/content/search", params={"tag": "x"}),
            await _json(c, "GET", "/openapi.json"),
        ]

    *answers, (_, doc) = serve(reader, None, go)
    assert [(s, d["error"]) for s, d in answers] == [(503, "store_unavailable")] * 3
    assert not any(p.startswith("/v1/content") for p in doc["paths"])


def test_from_settings_serves_the_store_under_the_data_dir(tmp_path: Path, pages: list[tuple[str, bytes]]) -> None:
    with ContentStore(tmp_path / "store") as store:  # written, then closed: the API opens its own
        _fill(store, pages)
    settings = settings_mod.load({"CRAWLSTREAM_DATA_DIR": str(tmp_path), "CRAWLSTREAM_API_SERVE_CONTENT": "1"})
    url, body = pages[4]

    async def main() -> tuple[int, bytes]:
        app = from_settings(settings, registry=CollectorRegistry())
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(**RUNNER_OPTIONS)
        async with TestClient(server) as c:
            resp = await c.get("/v1/content", params={"url": url})
            return resp.status, await resp.read()

    assert asyncio.run(asyncio.wait_for(main(), timeout=60)) == (200, body)


def test_openapi_documents_the_content_routes_and_schemathesis_finds_no_server_error(
    reader: IndexReader, store: ContentStore
) -> None:
    async def go(c: Client) -> tuple[Any, tuple[list[str], dict[int, int]]]:
        doc = await (await c.get("/openapi.json")).json()
        base = str(c.make_url("")).rstrip("/")
        return doc, await asyncio.to_thread(_fuzz, base, {})

    doc, (failures, statuses) = serve(reader, store, go)
    assert {"/v1/content", "/v1/content/search"} <= set(doc["paths"])
    assert set(doc["paths"]["/v1/content"]) == {"get", "delete"}
    limit = next(p for p in doc["paths"]["/v1/content/search"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == 50
    assert failures == []
    assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > 0 and statuses.get(404, 0) > 0, statuses
    assert statuses.get(401, 0) > 0, statuses  # every DELETE without a token


def test_schemathesis_with_an_acl_and_a_store_finds_no_server_error(reader: IndexReader, store: ContentStore) -> None:
    async def go(c: Client) -> tuple[list[str], dict[int, int]]:
        base = str(c.make_url("")).rstrip("/")
        return await asyncio.to_thread(_fuzz, base, {"Authorization": f"Bearer {DELETER}"})

    failures, statuses = serve(reader, store, go, acl=Acl.from_mapping(ACL_DOC))
    assert failures == []
    assert statuses.get(200, 0) > 0 and statuses.get(401, 0) > 0, statuses  # authorized and not


# -- tags ------------------------------------------------------------------------------------


def test_tags_are_added_and_removed_through_the_api_and_found_by_search(
    reader: IndexReader, store: ContentStore, pages: list[tuple[str, bytes]]
) -> None:
    url = pages[2][0]
    messy = url.replace("http://", "HTTP://") + "#frag"  # any spelling of the stored URL

    async def go(c: Client) -> dict[str, Any]:
        async def put(params: Any, **kw: Any) -> tuple[int, Any]:
            return await _json(c, "PUT", "/v1/content/tags", params=params, **kw)

        many = [("url", url)] + [("tag", f"t{i}") for i in range(33)]
        return {
            "add": await put([("url", messy), ("tag", "keep"), ("tag", "🔖 review")], **AS_DELETER),
            "search": await _json(c, "GET", "/v1/content/search", params={"tag": "🔖 review"}),
            "remove": await _json(c, "DELETE", "/v1/content/tags", params={"url": url, "tag": "keep"}, **AS_DELETER),
            "anonymous": (await put({"url": url, "tag": "x"}))[0],
            "reader": (await put({"url": url, "tag": "x"}, headers=as_token(READER)))[0],
            "not stored": (await put({"url": "http://nope.example/", "tag": "x"}, **AS_DELETER))[0],
            "no tag": (await put({"url": url}, **AS_DELETER))[0],
            "control char": (await put({"url": url, "tag": "a\nb"}, **AS_DELETER))[0],
            "too many": (await put(many, **AS_DELETER))[0],
        }

    answers = serve(reader, store, go)
    before = {"books", "even"} if "booksamillion" in url else {"news", "even"}
    status, body = answers["add"]
    assert status == 200 and body == {"url": url, "tags": sorted(before | {"keep", "🔖 review"})}
    status, found = answers["search"]
    assert status == 200 and [i["url"] for i in found["items"]] == [url]
    assert answers["remove"] == (200, {"url": url, "tags": sorted(before | {"🔖 review"})})
    assert (answers["anonymous"], answers["reader"], answers["not stored"]) == (401, 403, 404)
    assert (answers["no tag"], answers["control char"], answers["too many"]) == (400, 400, 400)
    entry = store.entry(url)
    assert entry is not None and entry.tags == before | {"🔖 review"}


def test_pages_archived_on_s3_are_served_and_an_s3_outage_is_503(
    reader: IndexReader, tmp_path: Path, pages: list[tuple[str, bytes]], s3_server: LocalS3, s3_prefix: str
) -> None:
    """The archive tier on S3 (ADR 029): a page is one ranged GET; with S3 down the read is a 503
    (retry later), never a 500 or a hang, and the same store serves it again once S3 is back."""
    env = dict(s3_server.env, CRAWLSTREAM_S3_DEADLINE_S="1")
    archive = open_objects(parse_location(s3_prefix), settings_mod.load(env).s3)
    with ContentStore(tmp_path / "store", archive=archive) as store:
        _fill(store, pages)
        store.maintain(ages_zero=True)
        assert {store.entry(u).location.tier for u, _ in pages} == {"archive"}  # type: ignore[union-attr]
        url, body = pages[0]

        async def go(c: Client) -> list[tuple[int, bytes]]:
            out = []
            resp = await c.get("/v1/content", params={"url": url})
            out.append((resp.status, await resp.read()))
            s3_server.stop(keep_data=True)
            try:
                resp = await c.get("/v1/content", params={"url": url})
                out.append((resp.status, await resp.read()))
            finally:
                s3_server.restart()
            resp = await c.get("/v1/content", params={"url": url})
            out.append((resp.status, await resp.read()))
            return out

        (s1, b1), (s2, b2), (s3, b3) = serve(reader, store, go)
    assert (s1, b1) == (200, body)
    assert s2 == 503 and body[:100] not in b2
    assert (s3, b3) == (200, body)
