"""A loopback HTTP server whose response head is worth archiving (a custom reason phrase,
repeated and mixed-case headers, gzip over chunked transfer), and a fetch of it through the
real Fetcher: the response-head tests (tests/fetch) and the WARC tests (tests/store) share it."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Any

from aiohttp import web

from crawlstream.fetch import Fetcher, FetchOutcome
from crawlstream.settings import FetchSettings

ARCHIVE_BODY = b"<html><title>t</title><body>" + b"hello archive " * 200 + b"</body></html>"


async def archive_page(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, reason="Fine By Me")
    resp.headers["Content-Type"] = "text/html; charset=utf-8"
    resp.headers["Content-Encoding"] = "gzip"
    resp.headers.add("Set-Cookie", "a=1; Path=/")
    resp.headers.add("Set-Cookie", "b=2; Path=/")
    resp.headers["X-Archive-Test"] = "MiXeD Case value"
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    packed = gzip.compress(ARCHIVE_BODY)
    await resp.write(packed[:100])
    await resp.write(packed[100:])
    await resp.write_eof()
    return resp


async def fetch_from_server(handler: Callable[[web.Request], Any], path: str = "/") -> FetchOutcome:
    """Serve ``handler`` on 127.0.0.1 and fetch ``path`` from it once (robots not asked)."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with Fetcher(
            config=FetchSettings(allow_private_networks=True, timeout_s=5.0), obey_robots=False
        ) as fetcher:
            return await fetcher.afetch(f"http://127.0.0.1:{port}{path}")
    finally:
        await runner.cleanup()
