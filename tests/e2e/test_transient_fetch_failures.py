"""A failure that passes must not cost the page, nor, for a seed, the site.

RFC 9309: a 5xx or an unreachable robots.txt means "disallow everything" *until it can be
read*. The crawl once gave up a URL on that answer at once; when it was a seed, the whole
site was lost (a loaded machine timing out robots.txt fetches lost whole domains in the
Kafka fault tests). Likewise a connection that closed mid-response (a server restarting, a
reset) was outcome ``error``, never retried. Here a real server on loopback answers robots.txt
with 503, then too late, then normally, and cuts its first response for a page short: the seed
waits, the page is asked again, and the site is crawled.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from e2e_support import FETCH_TIMEOUT_S, crawl_settings

from crawlstream.cli._run import run_crawl
from crawlstream.runtime import open_host
from crawlstream.store import open_store

HOST = "flaky-robots.example"
PAGES = {
    "/": b'<html><body><a href="/a">a</a> <a href="/dropped-once">d</a></body></html>',
    "/a": b"<html><body>a leaf</body></html>",
    "/dropped-once": b"<html><body>served on the second try</body></html>",
}


class FlakyRobots(ThreadingHTTPServer):
    """robots.txt: 503, then an answer slower than the fetch timeout, then 200 allowing all."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[str] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: FlakyRobots

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests.append(self.path)
            robots_seen = self.server.requests.count("/robots.txt")
        if self.path == "/robots.txt":
            if robots_seen == 1:
                return self._send(503, b"down for a moment")
            if robots_seen == 2:
                time.sleep(FETCH_TIMEOUT_S * 2)  # the fetcher gave up before this
                return self._send(200, b"User-agent: *\nDisallow: /\n")
            return self._send(200, b"User-agent: *\nAllow: /\n")
        if self.path == "/dropped-once" and self.server.requests.count(self.path) == 1:
            # cut mid-body: a dropped connection before any response aiohttp itself asks again
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAGES[self.path])))
            self.end_headers()
            self.wfile.write(PAGES[self.path][:10])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        body = PAGES.get(self.path)
        if body is None:
            return self._send(404, b"not found")
        return self._send(200, body, "text/html")

    def _send(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the fetcher timed out and left
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[FlakyRobots]:
    httpd = FlakyRobots()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.timeout(120)
def test_a_seed_whose_robots_txt_fails_twice_waits_and_a_dropped_connection_is_retried(
    tmp_path: Path, server: FlakyRobots
) -> None:
    settings = crawl_settings(tmp_path / "data")
    resolve_map = {HOST: ("127.0.0.1", server.server_address[1])}
    with open_host(settings) as host:
        summary = run_crawl(
            host,
            [f"http://{HOST}/"],
            services=("deduper", "scheduler", "fetcher", "link-extractor", "bucket-compressor"),
            exit_when_done=True,
            resolve_map=resolve_map,
        )
    assert summary.reason == "drained"
    pages = [p for p in server.requests if p != "/robots.txt"]
    assert server.requests.count("/robots.txt") == 3  # 503, timed out, read
    # each page once after robots.txt could be read (it names no sitemap: the fallback is tried),
    # the dropped one twice
    assert sorted(pages) == ["/", "/a", "/dropped-once", "/dropped-once", "/sitemap.xml"]
    assert server.requests.index("/") > 2
    with open_store(settings) as store:
        assert {e.url: store.get(e.url) for e in store.search() if e.status == 200} == {
            f"http://{HOST}{path}": body for path, body in PAGES.items()
        }
