"""Shapes and status codes of every endpoint, against a real lake + index on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry
from yarl import URL

from crawlstream.api import Acl
from crawlstream.index import IndexReader
from crawlstream.urls import url_key
from tests.api._lake import BIG, DATASETS, TS_MS, expected_urls, run_client

Client = TestClient[Any, Any]


@pytest.fixture(scope="module", params=["local", "s3"])
def reader(request: pytest.FixtureRequest, lake_root: Path) -> Iterator[IndexReader]:
    """Every endpoint over the index and lake in a local directory, then on S3 (uploaded as built)."""
    if request.param == "local":
        r = IndexReader(lake_root)
    else:
        from tests.index._s3 import s3_reader

        r = s3_reader(lake_root, request.getfixturevalue("s3_server"))
    yield r
    r.close()


def _get(client: Client, path: str, **kw: Any) -> Any:
    return client.get(URL(path, encoded=True), **kw)


async def _json(client: Client, path: str, **kw: Any) -> tuple[int, dict[str, Any], Any]:
    resp = await _get(client, path, **kw)
    return resp.status, await resp.json(), resp.headers


def test_domain_lists_every_dataset_with_exact_counts(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/v1/domain/example.co.uk")

    status, body, headers = run_client(reader, go)
    assert status == 200
    assert body["domain"] == "example.co.uk"
    assert isinstance(body["domain_id"], int)
    assert body["datasets"] == [
        {"dataset_id": 1, "url_count": BIG},
        {"dataset_id": 2, "url_count": 30},
        {"dataset_id": 7, "url_count": 3},
    ]
    assert body["index_version"] == headers["X-Index-Version"]


@pytest.mark.parametrize(
    ("given", "domain"),
    [
        ("www.Example.co.uk", "example.co.uk"),
        ("EXAMPLE.CO.UK.", "example.co.uk"),
        ("shop.example.co.uk:8443", "example.co.uk"),
        ("https:%2F%2Fx.example.co.uk%2Fa%3Fq%3D1", "example.co.uk"),
        ("x.example.co.uk%2Fpath", "example.co.uk"),
        ("b%C3%BCcher.de", "xn--bcher-kva.de"),
        ("www.xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("deep.sub.other.com", "other.com"),
        ("192.168.1.1", "192.168.1.1"),
    ],
)
def test_any_host_or_url_is_reduced_to_its_registered_domain(reader: IndexReader, given: str, domain: str) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, f"/v1/domain/{given}")

    status, body, _ = run_client(reader, go)
    assert (status, body["domain"]) == (200, domain)


def test_unknown_domain_is_404_naming_the_version(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/v1/domain/never-seen.example")

    status, body, headers = run_client(reader, go)
    assert status == 404
    assert body["error"] == "unknown_domain" and "never-seen.example" in body["message"]
    assert body["index_version"] == headers["X-Index-Version"]
    assert body["request_id"] == headers["X-Request-Id"]


@pytest.mark.parametrize("given", ["%20", "exa%20mple.com", "ftp:%2F%2Fexample.com%2F", "a..b.com", "%00", "-" * 300])
def test_invalid_domain_input_is_400_saying_what_was_expected(reader: IndexReader, given: str) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, f"/v1/domain/{given}")

    status, body, headers = run_client(reader, go)
    assert status == 400
    assert body["error"] == "invalid_domain" and "expected" in body["message"]
    assert "X-Index-Version" not in headers  # rejected before the index was consulted


def test_first_page_has_the_seed_shape_and_default_limit(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/v1/domain/www.example.co.uk/datasets/1/urls")

    status, body, headers = run_client(reader, go)
    want = expected_urls("example.co.uk", 1)
    assert status == 200
    assert set(body) == {"domain", "dataset_id", "total", "items", "next_offset", "next", "index_version"}
    assert (body["domain"], body["dataset_id"], body["total"]) == ("example.co.uk", 1, BIG)
    assert [i["url"] for i in body["items"]] == want[:20]  # default_limit=20 in run_client
    assert body["next_offset"] == 20
    version = body["index_version"]
    assert body["next"] == f"/v1/domain/example.co.uk/datasets/1/urls?offset=20&limit=20&version={version}"
    first = body["items"][0]
    assert first["url_key"] == url_key(first["url"])
    assert first["ts"] == "2024-06-14T10:00:00.000Z"
    assert headers["X-Index-Version"] == body["index_version"]


def test_pages_walked_by_next_offset_reproduce_the_full_list(reader: IndexReader) -> None:
    async def go(c: Client) -> list[str]:
        urls: list[str] = []
        offset: int | None = 0
        while offset is not None:
            status, body, _ = await _json(c, f"/v1/domain/example.co.uk/datasets/1/urls?offset={offset}&limit=17")
            assert status == 200 and body["total"] == BIG
            assert len(body["items"]) == min(17, BIG - offset)
            urls += [i["url"] for i in body["items"]]
            offset = body["next_offset"]
        return urls

    assert run_client(reader, go) == expected_urls("example.co.uk", 1)


def test_limit_equal_to_the_cap_is_served_and_above_it_is_400(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        ok = await _json(c, "/v1/domain/example.co.uk/datasets/1/urls?limit=50")
        over = await _json(c, "/v1/domain/example.co.uk/datasets/1/urls?limit=51")
        return ok, over

    (s1, b1, _), (s2, b2, _) = run_client(reader, go, max_limit=50)
    assert s1 == 200 and len(b1["items"]) == 50 and b1["next_offset"] == 50
    assert s2 == 400 and b2["error"] == "invalid_limit" and "1..50" in b2["message"]


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=-1",
        "limit=abc",
        "limit=1.5",
        "limit=",
        "offset=-1",
        "offset=1e3",
        "offset=%2B5",
        "offset=99999999999999999999",
        "limit=5&limit=6",
    ],
)
def test_bad_offset_or_limit_is_400(reader: IndexReader, query: str) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, f"/v1/domain/example.co.uk/datasets/1/urls?{query}")

    status, body, _ = run_client(reader, go)
    assert status == 400 and body["error"] in {"invalid_limit", "invalid_offset"}


def test_offset_past_the_end_is_an_empty_last_page(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, f"/v1/domain/example.co.uk/datasets/1/urls?offset={2**63 - 1}")

    status, body, _ = run_client(reader, go)
    assert status == 200 and body["items"] == [] and body["next_offset"] is None and body["total"] == BIG


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/v1/domain/example.co.uk/datasets/9/urls", "unknown_dataset"),
        ("/v1/domain/example.co.uk/datasets/3/urls", "unknown_dataset"),  # dataset exists, not with this domain
        ("/v1/domain/never-seen.example/datasets/1/urls", "unknown_domain"),
    ],
)
def test_unknown_domain_or_dataset_pair_is_404(reader: IndexReader, path: str, code: str) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, path)

    status, body, headers = run_client(reader, go)
    assert (status, body["error"]) == (404, code)
    assert headers["X-Index-Version"] == body["index_version"]


@pytest.mark.parametrize("dataset", ["x", "-1", "4294967296", "1.0", "%201"])
def test_bad_dataset_id_is_400(reader: IndexReader, dataset: str) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, f"/v1/domain/example.co.uk/datasets/{dataset}/urls")

    status, body, _ = run_client(reader, go)
    assert (status, body["error"]) == (400, "invalid_dataset_id")


def test_url_lookup_returns_canonical_form_key_domain_and_datasets(reader: IndexReader) -> None:
    raw = "HTTPS://WWW.Example.co.uk:443/p/0007?b=2&a=1#frag"

    async def go(c: Client) -> Any:
        return await _json(c, "/v1/url", params={"url": raw})

    status, body, headers = run_client(reader, go)
    canonical = "https://www.example.co.uk/p/0007?a=1&b=2"
    assert status == 200
    assert body == {
        "url": canonical,
        "url_key": url_key(canonical),
        "domain": "example.co.uk",
        "datasets": [1],
        "index_version": headers["X-Index-Version"],
        # no redirect or raw form recorded: the chain is empty (ADR 024)
        "requested_url": raw,
        "canonical_url": canonical,
        "canonical_datasets": [1],
        "redirects": [],
        "redirect_end": "none",
        "raw_form": None,
    }


def test_url_lookup_finds_a_url_in_every_dataset_holding_it(lake_root: Path, reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return (
            await _json(c, "/v1/url", params={"url": "https://secret.org/2"}),
            await _json(c, "/v1/url", params={"url": "https://www.example.co.uk/p/9999"}),
            await _json(c, "/v1/url", params={"url": "https://nowhere.example/"}),
        )

    (s1, b1, _), (s2, b2, _), (s3, b3, _) = run_client(reader, go)
    assert (s1, b1["datasets"]) == (200, [7])
    assert (s2, b2["datasets"]) == (200, [])  # known domain, unknown URL
    assert (s3, b3["datasets"], b3["domain"]) == (200, [], "nowhere.example")


@pytest.mark.parametrize(
    "params", [{}, {"url": ""}, {"url": "not a url"}, {"url": "ftp://example.com/"}, {"url": "http://"}]
)
def test_url_lookup_rejects_a_missing_or_invalid_url_with_400(reader: IndexReader, params: dict[str, str]) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/v1/url", params=params)

    status, body, _ = run_client(reader, go)
    assert (status, body["error"]) == (400, "invalid_url")
    assert "expected" in body["message"]


def test_healthz_reports_the_loaded_version(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/healthz")

    status, body, headers = run_client(reader, go)
    assert status == 200
    assert body == {
        "status": "ok",
        "domains": 5,
        "datasets": len(DATASETS),
        "index_version": headers["X-Index-Version"],
    }


def test_without_an_index_healthz_and_queries_are_503_not_500(tmp_path: Path) -> None:
    empty = IndexReader(tmp_path)

    async def go(c: Client) -> Any:
        return await _json(c, "/healthz"), await _json(c, "/v1/domain/example.com")

    (s1, b1, _), (s2, b2, _) = run_client(empty, go)
    assert (s1, b1["status"]) == (503, "unavailable")
    assert (s2, b2["error"]) == (503, "index_unavailable") and "index build" in b2["message"]


def test_unknown_path_and_wrong_method_are_json_errors_after_authorization(reader: IndexReader) -> None:
    admin = {"Authorization": "Bearer tok-admin"}

    async def go(c: Client) -> Any:
        missing = await _get(c, "/v2/nothing")
        anonymous = await c.post("/v1/domain/example.co.uk")  # a write: authorization comes first
        wrong = await c.post("/v1/domain/example.co.uk", headers=admin)
        nowhere = await c.delete("/v1/nothing", headers=admin)
        return (
            (missing.status, await missing.json()),
            (anonymous.status, await anonymous.json()),
            (wrong.status, await wrong.json(), wrong.headers["Allow"]),
            nowhere.status,
        )

    acl = Acl.from_mapping({"tok-admin": {"datasets": "*", "delete": True}})
    (s1, b1), (s2, b2), (s3, b3, allow), s4 = run_client(reader, go, acl=acl, anonymous_reads=True)
    assert (s1, b1["error"]) == (404, "not_found")
    assert (s2, b2["error"]) == (401, "unauthorized")
    assert (s3, b3["error"]) == (405, "method_not_allowed") and "GET" in allow
    assert s4 == 404


class _BrokenReader:
    """A reader whose pin fails with a bug-class error: the HTTP boundary's edge case."""

    def pin(self) -> Any:
        raise RuntimeError("simulated bug: secret detail")


def test_an_internal_bug_is_a_logged_generic_500_with_request_id(caplog: pytest.LogCaptureFixture) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/v1/domain/example.com", headers={"X-Request-Id": "req-abc.1"})

    with caplog.at_level(logging.ERROR, logger="crawlstream.api"):
        status, body, headers = run_client(_BrokenReader(), go)
    assert status == 500
    assert body["error"] == "internal" and "secret detail" not in body["message"]
    assert body["request_id"] == headers["X-Request-Id"] == "req-abc.1"
    assert any("req-abc.1" in r.getMessage() and r.exc_info for r in caplog.records)


def test_metrics_count_requests_per_route_and_status(reader: IndexReader) -> None:
    registry = CollectorRegistry()

    async def go(c: Client) -> str:
        for _ in range(3):
            await _get(c, "/v1/domain/example.co.uk")
        await _get(c, "/v1/domain/never-seen.example")
        await _get(c, "/v1/domain/example.co.uk/datasets/1/urls?limit=2")
        resp = await _get(c, "/metrics")
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()

    text = run_client(reader, go, registry=registry)
    sample = registry.get_sample_value
    assert (
        sample("crawlstream_api_requests_total", {"route": "/v1/domain/{domain}", "method": "GET", "status": "200"})
        == 3
    )
    assert (
        sample("crawlstream_api_requests_total", {"route": "/v1/domain/{domain}", "method": "GET", "status": "404"})
        == 1
    )
    assert (
        sample(
            "crawlstream_api_request_duration_seconds_count",
            {"route": "/v1/domain/{domain}/datasets/{dataset_id}/urls", "status": "200"},
        )
        == 1
    )
    assert 'crawlstream_api_requests_total{method="GET",route="/v1/domain/{domain}",status="200"} 3.0' in text
    assert "example.co.uk" not in text  # route templates, never raw paths


def test_the_event_loop_mode_serves_the_same_answers(reader: IndexReader) -> None:
    """executor_threads=0 runs index reads on the loop: same bytes as the thread-pool mode."""

    async def go(c: Client) -> Any:
        return await _json(c, "/v1/domain/example.co.uk/datasets/2/urls?limit=50")

    inline = run_client(reader, go, executor_threads=0)
    pooled = run_client(reader, go, executor_threads=2)
    assert inline[:2] == pooled[:2]
    assert [i["url"] for i in inline[1]["items"]] == expected_urls("example.co.uk", 2)


def test_page_items_encode_to_the_json_of_their_dicts() -> None:
    """Items are written without a dict per item (``_items_json``): same JSON as ``json.dumps`` of dicts."""
    from crawlstream.api._app import _encode, _items_json

    rows = [(1, 'https://a.com/"q"\\\u2028ü', None), (2**62, "https://a.com/", TS_MS), (3, "https://b.com/", 10**20)]
    assert json.loads(_encode({"items": _items_json(rows), "next_offset": None})) == {
        "items": [
            {"url_key": 1, "url": rows[0][1], "ts": None},
            {"url_key": 2**62, "url": "https://a.com/", "ts": "2024-06-14T10:00:00.000Z"},
            {"url_key": 3, "url": "https://b.com/", "ts": None},  # out of range: unknown
        ],
        "next_offset": None,
    }
