"""The fetcher keeps each response's original head and peer address (for WARC export, ADR 022):
a real aiohttp server on 127.0.0.1 with a custom reason phrase, repeated headers, gzip and
chunked transfer, and the demo web."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.fetch import Fetcher, FetchOutcome
from crawlstream.fetch._outcome import MAX_RESPONSE_HEAD_BYTES, response_head
from crawlstream.settings import FetchSettings
from tests.fetch.archive_server import ARCHIVE_BODY, archive_page, fetch_from_server


@pytest.fixture
def served() -> FetchOutcome:
    return asyncio.run(fetch_from_server(archive_page))


def test_the_head_keeps_version_reason_order_case_and_repeats(served: FetchOutcome) -> None:
    assert served.outcome == "ok" and served.body == ARCHIVE_BODY
    lines = served.response_head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 Fine By Me"
    assert served.response_head.endswith(b"\r\n") and not served.response_head.endswith(b"\r\n\r\n")
    headers = [tuple(line.split(b": ", 1)) for line in lines[1:-1]]
    assert [v for n, v in headers if n == b"Set-Cookie"] == [b"a=1; Path=/", b"b=2; Path=/"]
    assert (b"X-Archive-Test", b"MiXeD Case value") in headers
    assert (b"Content-Encoding", b"gzip") in headers and (b"Transfer-Encoding", b"chunked") in headers
    # the bounded subset downstream services use is unchanged
    assert served.headers["content-encoding"] == "gzip" and "set-cookie" not in served.headers


def test_the_peer_address_is_the_loopback_server(served: FetchOutcome) -> None:
    assert served.ip_address == "127.0.0.1"


def test_the_request_head_is_the_request_line_and_headers_sent() -> None:
    """What the server received is what the fetcher reports having sent (the WARC request record)."""
    received: list[tuple[str, list[tuple[str, str]]]] = []

    async def echo(request: web.Request) -> web.Response:
        received.append((f"{request.method} {request.raw_path} HTTP/1.1", list(request.headers.items())))
        return web.Response(text="ok")

    outcome = asyncio.run(fetch_from_server(echo, "/a/b?q=1&r=%20"))
    lines = outcome.request_head.decode("latin-1").split("\r\n")
    assert outcome.request_head.endswith(b"\r\n") and lines[-1] == ""
    [(line, headers)] = received
    assert lines[0] == line == "GET /a/b?q=1&r=%20 HTTP/1.1"
    sent = [tuple(x.split(": ", 1)) for x in lines[1:-1]]
    assert {n.lower() for n, _ in sent} >= {"host", "user-agent", "accept-encoding"}
    assert set(sent) <= set(headers)  # every header reported was received as such


def test_error_responses_keep_their_head_too() -> None:
    async def gone(request: web.Request) -> web.Response:
        return web.Response(status=410, reason="Gone Fishing", text="bye")

    outcome = asyncio.run(fetch_from_server(gone))
    assert outcome.outcome == "http_error"
    assert outcome.response_head.startswith(b"HTTP/1.1 410 Gone Fishing\r\n")


def test_the_demo_web_head_names_its_server() -> None:
    async def go(demo: DemoWeb) -> FetchOutcome:
        async with Fetcher(
            config=FetchSettings(allow_private_networks=True, timeout_s=5.0),
            resolve_map=demo.resolve_map,
            resolve_map_only=True,
        ) as fetcher:
            return await fetcher.afetch(demo.seed_urls()[0])

    with DemoWeb(2, pages_per_domain=3, seed=1, special_every=0) as demo:
        outcome = asyncio.run(go(demo))
    assert outcome.outcome == "ok" and outcome.ip_address == "127.0.0.1"
    assert outcome.response_head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nServer: Python/" in outcome.response_head


def test_a_connection_failure_has_no_head_or_address() -> None:
    async def go() -> FetchOutcome:
        config = FetchSettings(allow_private_networks=True, timeout_s=2.0)
        async with Fetcher(config=config, obey_robots=False) as fetcher:
            return await fetcher.afetch("http://127.0.0.1:9/")  # discard port: nothing listens

    outcome = asyncio.run(go())
    assert outcome.status == 0 and outcome.response_head == b"" and outcome.ip_address == ""
    assert outcome.request_head == b""  # nothing was sent


def test_the_head_is_bounded_by_whole_lines() -> None:
    many = [(b"X-Filler-%05d" % i, b"v" * 100) for i in range(1000)]
    head = response_head((1, 0), 200, "OK", many)
    assert head.startswith(b"HTTP/1.0 200 OK\r\n") and head.endswith(b"v\r\n")
    assert MAX_RESPONSE_HEAD_BYTES - 120 < len(head) <= MAX_RESPONSE_HEAD_BYTES
    assert response_head((1, 1), 204, None, []) == b"HTTP/1.1 204 \r\n"
