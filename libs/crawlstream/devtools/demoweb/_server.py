"""The synthetic web's HTTP server: one loopback port, many hosts told apart by Host.

Runs on the caller's event loop (``astart``/``astop``) or on its own thread
(``start``/``stop``, and ``with DemoWeb(...)``) for synchronous tests and the CLI.
Two ways in, both keeping plain ``http://host/`` (port 80) URLs:

* ``resolve_map`` (every demo host -> 127.0.0.1:port) for our fetcher. Loopback is a
  private address, so the fetcher needs ``allow_private_networks=True``
  (``--allow-private-networks``).
* ``proxy_url``: the server also answers absolute-form proxy requests for its own hosts,
  so any HTTP client (Scrapy's ``HTTP_PROXY``, ``--http-proxy``) can crawl it unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict

from crawlstream.devtools.demoweb._model import Page, WebModel, not_modified
from crawlstream.devtools.demoweb._render import (
    PDF_BYTES,
    PNG_BYTES,
    gzip_bomb,
    render_html,
    render_huge,
    render_sitemap,
)
from crawlstream.links import Scope

__all__ = ["DemoWeb", "RequestRecord", "pairs_apart"]

logger = logging.getLogger(__name__)

# A request whose bytes reached the kernel more than STALL_S before its handler ran waited in a
# stalled server (a loaded machine starved the thread; the web shares a test's process). Its
# arrival is then the kernel's (TCP_INFO's tcpi_last_data_recv, counted in jiffies: 4 ms with
# HZ=250, 10 ms with HZ=100, so JIFFY_S earlier is the bound), and its client may have given up.
STALL_S = 0.05
JIFFY_S = 0.01
_TCP_INFO = struct.Struct("8B13I")  # struct tcp_info up to tcpi_last_ack_recv
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8  # reset; the peer closed its side


@dataclass(frozen=True)
class RequestRecord:
    """One request the server saw: tests count fetches and measure spacing from these."""

    host: str
    path: str
    time_s: float  # time.monotonic() at arrival
    status: int
    user_agent: str
    if_none_match: str | None = None  # the conditional request headers, as received
    if_modified_since: str | None = None
    # Set when the request waited in a stalled server (``STALL_S``): the earliest it may have
    # arrived (the kernel's receive time), and whether its client had given up by then.
    earliest_s: float | None = None
    abandoned: bool = False

    @property
    def arrived_from_s(self) -> float:
        """The earliest this request may have arrived (``time_s`` unless the loop was stalled)."""
        return self.time_s if self.earliest_s is None else self.earliest_s

    def apart_s(self, other: RequestRecord) -> float:
        """The most the two requests' arrivals may have been apart: their handling times apart,
        or more when one waited in a stalled loop. Spacing checks compare this with the delay,
        so a server starved on a loaded machine is not taken for an impolite crawler."""
        return max(other.time_s - self.arrived_from_s, self.time_s - other.arrived_from_s)

    @property
    def conditional(self) -> bool:
        return self.if_none_match is not None or self.if_modified_since is not None

    @property
    def url(self) -> str:
        return f"http://{self.host}{self.path}"


def pairs_apart(records: Iterable[RequestRecord]) -> list[tuple[RequestRecord, RequestRecord, float]]:
    """Consecutive requests by handling time, each pair with the most their arrivals may have
    been apart (``RequestRecord.apart_s``): what a spacing check compares with the delay."""
    ordered = sorted(records, key=lambda r: r.time_s)
    return [(a, b, a.apart_s(b)) for a, b in itertools.pairwise(ordered)]


def _kernel_view(request: web.Request) -> tuple[float, bool]:
    """(seconds since the request's last bytes reached the kernel, whether its client has closed
    or reset the connection), from the socket's TCP_INFO; (0, False) where it cannot be read (a
    request that did not wait is never judged abandoned)."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if transport is None or sock is None:
        return 0.0, False
    try:
        info = _TCP_INFO.unpack(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size))
    except (OSError, struct.error):
        return 0.0, False
    state, last_data_recv_ms = info[0], info[8 + 11]
    return last_data_recv_ms / 1000, state in (_TCP_CLOSE, _TCP_CLOSE_WAIT) or transport.is_closing()


class DemoWeb:
    """Many registered domains on 127.0.0.1, deterministic from ``seed`` (see ``_model``)."""

    def __init__(
        self,
        n_domains: int = 20,
        *,
        pages_per_domain: int = 10,
        seed: int = 0,
        special_every: int = 10,
        crawl_delay_s: float = 0.2,
        slow_s: float = 3.0,
        huge_bytes: int = 2 * 1024 * 1024,
        bomb_bytes: int = 64 * 1024 * 1024,
        sitemap_bomb_bytes: int = 64 * 1024 * 1024,
        listen_host: str = "127.0.0.1",
        port: int = 0,
        changing_every: int = 0,
        page_bytes: tuple[int, int] | None = None,
    ) -> None:
        self.model = WebModel(
            n_domains=n_domains,
            pages_per_domain=pages_per_domain,
            seed=seed,
            special_every=special_every,
            crawl_delay_s=crawl_delay_s,
            changing_every=changing_every,
        )
        self._revisions: dict[tuple[str, str], int] = {}  # full responses served per changing page
        self.slow_s = slow_s
        self.page_bytes = page_bytes  # (min, max) size of padded HTML pages; None = ~1 KB pages
        self.huge_bytes = huge_bytes
        self.bomb_bytes = bomb_bytes
        self.sitemap_bomb_bytes = sitemap_bomb_bytes
        self._listen_host = listen_host
        self._port = port
        self._log: list[RequestRecord] = []
        self._log_lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None

    # -- facts for fetchers and tests ------------------------------------------------

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("DemoWeb is not started")
        return self._port

    @property
    def hosts(self) -> list[str]:
        return list(self.model.hosts)

    @property
    def resolve_map(self) -> dict[str, tuple[str, int]]:
        return {h: (self._listen_host, self.port) for h in self.model.hosts}

    @property
    def proxy_url(self) -> str:
        """Use as an HTTP proxy to reach every demo host without a resolver map."""
        return f"http://{self._listen_host}:{self.port}"

    @property
    def base_urls(self) -> list[str]:
        return [f"http://{h}" for h in self.model.hosts]

    def seed_urls(self) -> list[str]:
        return self.model.seed_urls()

    def raw_seed_lines(self) -> list[str]:
        return self.model.raw_seed_lines()

    def reachable_pages(self, scope: Scope | None = None, seeds: Iterable[str] | None = None, **kw: bool) -> set[str]:
        return self.model.reachable_pages(scope, seeds, **kw)

    def disallowed_paths(self, host: str) -> list[str]:
        return self.model.disallowed_paths(host)

    def noindex_pages(self) -> set[str]:
        return self.model.noindex_pages()

    def requests(self) -> list[RequestRecord]:
        """A copy of the request log (robots.txt fetches included)."""
        with self._log_lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()

    # -- serving -----------------------------------------------------------------------

    def _record(self, request: web.Request, host: str, status: int) -> None:
        now = time.monotonic()
        waited_s, gone = _kernel_view(request)
        stalled = waited_s > STALL_S
        rec = RequestRecord(
            host,
            request.rel_url.raw_path,
            now,
            status,
            request.headers.get("User-Agent", ""),
            request.headers.get("If-None-Match"),
            request.headers.get("If-Modified-Since"),
            now - waited_s - JIFFY_S if stalled else None,
            stalled and gone,
        )
        with self._log_lock:
            self._log.append(rec)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        host = (request.host or "").rsplit(":", 1)[0].lower() if not (request.host or "").startswith("[") else ""
        path = request.rel_url.raw_path
        if host not in self.model._host_domain:
            self._record(request, host, 404)
            return web.Response(status=404, text=f"unknown host {host!r}\n")
        if path == "/robots.txt":
            status, body, location = self.model.robots(host)
            self._record(request, host, status)
            headers = {"Location": location} if location else None
            return web.Response(status=status, text=body, content_type="text/plain", headers=headers)
        if path == "/robots-moved.txt":
            self._record(request, host, 200)
            return web.Response(text=self.model.moved_robots_body(host), content_type="text/plain")
        page = self.model.page(host, path)
        if page.kind in ("html", "refresh"):
            response = self._html(request, page, host, path)
            self._record(request, host, response.status)
            return response
        self._record(request, host, page.status)
        return await self._respond(page, host, path)

    def revision(self, url: str) -> int:
        """How many full responses a changing page has served (its next body's revision)."""
        host, _, path = url.split("://", 1)[1].partition("/")
        return self._revisions.get((host, "/" + path), 0)

    def _html(self, request: web.Request, page: Page, host: str, path: str) -> web.Response:
        """An HTML page with its validators; 304 when the request's validators still match."""
        body, ctype = render_html(page, host, path, self.model.seed, self.page_bytes)
        changing = self.model.changes(host, path)
        revision = self._revisions.get((host, path), 0) if changing else 0
        if changing:
            body = body.replace(b"\n</body></html>", f"\n<p>revision {revision}</p>\n</body></html>".encode())
        send_etag, send_modified = self.model.validator_kinds(host, path)
        etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"' if send_etag else None
        modified_s = self.model.last_modified_s(revision) if send_modified else None
        validators: dict[str, str] = {}
        if etag is not None:
            validators["ETag"] = etag
        if modified_s is not None:
            validators["Last-Modified"] = self.model.last_modified(revision)
        inm, ims = request.headers.get("If-None-Match"), request.headers.get("If-Modified-Since")
        if not_modified(inm, ims, etag, modified_s):
            return web.Response(status=304, headers=validators)
        if changing:
            self._revisions[(host, path)] = revision + 1
        headers = self._headers(page, ctype)
        headers.update(validators)
        return web.Response(body=body, headers=headers)

    async def _respond(self, page: Page, host: str, path: str) -> web.StreamResponse:
        if page.kind == "missing":
            return web.Response(status=404, text="not found\n")
        if page.kind == "redirect":
            return web.Response(status=page.status, headers={"Location": page.location or "/"})
        if page.kind == "status":
            headers = {"Retry-After": str(page.retry_after_s)} if page.retry_after_s is not None else None
            return web.Response(status=page.status, text=f"status {page.status}\n", headers=headers)
        if page.kind == "slow":
            await asyncio.sleep(self.slow_s)
            return web.Response(text="<html><body>finally</body></html>", content_type="text/html")
        if page.kind == "huge":
            return web.Response(body=render_huge(host, self.huge_bytes), content_type="text/html")
        if page.kind == "png":
            return web.Response(body=PNG_BYTES, content_type="image/png")
        if page.kind == "pdf":
            return web.Response(body=PDF_BYTES, headers=self._headers(page, "application/pdf"))
        if page.kind == "sitemap":
            body, ctype = await asyncio.get_running_loop().run_in_executor(
                None, render_sitemap, page, host, path, self.model.seed, self.sitemap_bomb_bytes
            )
            return web.Response(body=body, headers=self._headers(page, ctype))
        if page.kind == "bomb":
            body = await asyncio.get_running_loop().run_in_executor(None, gzip_bomb, self.bomb_bytes)
            return web.Response(body=body, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})
        body, ctype = render_html(page, host, path, self.model.seed, self.page_bytes)
        return web.Response(body=body, headers=self._headers(page, ctype))

    @staticmethod
    def _headers(page: Page, content_type: str) -> CIMultiDict[str]:
        """Content-Type plus one X-Robots-Tag header per value (repeated, as servers send them)."""
        headers: CIMultiDict[str] = CIMultiDict({"Content-Type": content_type})
        for value in page.x_robots_tag:
            headers.add("X-Robots-Tag", value)
        return headers

    async def astart(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._listen_host, self._port))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        logger.info(
            "demo web: %d domains, %d hosts on %s:%d",
            self.model.n_domains,
            len(self.model.hosts),
            self._listen_host,
            self._port,
        )

    async def astop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> DemoWeb:
        await self.astart()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # -- thread runner for synchronous callers -------------------------------------------

    def start(self, timeout_s: float = 10.0) -> DemoWeb:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stopped = asyncio.Event()
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_until_complete(self._stopped.wait())
            loop.run_until_complete(self.astop())
            loop.close()

        self._thread = threading.Thread(target=run, name="demo-web", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError(f"demo web did not start within {timeout_s} s")
        if errors:
            raise errors[0]
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread is None or self._loop is None or self._stopped is None:
            return
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout_s)
        self._thread = None

    def __enter__(self) -> DemoWeb:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
