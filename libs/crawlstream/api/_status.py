"""Status routes of the query API: the ``/status`` page and its data, ``GET /v1/status``.

Contract:

* ``/status``, ``/status/status.js``, ``/status/status.css`` are static (the page holds no
  data), open like ``/healthz``, and served with a strict Content-Security-Policy (scripts
  and styles only from this origin, requests only to it, no framing).
* ``GET /v1/status`` is under ``/v1``, so the middleware authorizes it (ADR 014) like every
  read. It aggregates over every dataset (top domains, counts), so it needs a grant that
  sees every dataset; a dataset-limited token gets a 403, as for the content routes.
* It answers 200 whatever is missing: each part the collector cannot read is ``null`` (the
  page shows n/a) and named in ``unavailable`` (ADR 020). Collection runs on the API's pool
  (file reads, or Kafka admin calls bounded by their own timeouts), never on the loop; the
  answer is not tied to an index version and carries none.
* No status collector (an app built without one): 503 ``status_unavailable``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from crawlstream.api._acl import GRANT_KEY
from crawlstream.api._inputs import ApiError
from crawlstream.api._status_page import STATUS_CSS, STATUS_JS, status_html

if TYPE_CHECKING:
    from crawlstream.api._app import QueryApi
    from crawlstream.status import StatusCollector

__all__ = ["PAGE_CSP", "StatusApi", "add_status_routes"]

PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class StatusApi:
    """The handlers; ``collector`` None answers 503 on ``/v1/status`` (the page still loads)."""

    def __init__(self, api: QueryApi, collector: StatusCollector | None) -> None:
        self.api = api
        self.collector = collector
        self.html = status_html(anonymous_reads=api.access.anonymous_reads).encode()

    async def page(self, request: web.Request) -> web.Response:
        return self._static(self.html, "text/html")

    async def script(self, request: web.Request) -> web.Response:
        return self._static(STATUS_JS.encode(), "text/javascript")

    async def style(self, request: web.Request) -> web.Response:
        return self._static(STATUS_CSS.encode(), "text/css")

    @staticmethod
    def _static(body: bytes, content_type: str) -> web.Response:
        resp = web.Response(body=body, content_type=content_type, charset="utf-8")
        resp.headers["Content-Security-Policy"] = PAGE_CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    async def status(self, request: web.Request) -> web.Response:
        if request[GRANT_KEY].datasets is not None:
            raise ApiError(
                403, "forbidden", "the status aggregates every dataset: it needs a token granted every dataset ('*')"
            )
        collector = self.collector
        if collector is None:
            raise ApiError(503, "status_unavailable", "this API was started without a status collector")
        loop = asyncio.get_running_loop()
        doc = await loop.run_in_executor(self.api.executor, collector.collect)
        resp = web.Response(body=json.dumps(doc, separators=(",", ":")).encode(), content_type="application/json")
        resp.headers["Cache-Control"] = "no-store"
        return resp


def add_status_routes(app: web.Application, api: QueryApi, collector: StatusCollector | None) -> StatusApi:
    status = StatusApi(api, collector)
    app.router.add_get("/status", status.page)
    app.router.add_get("/status/status.js", status.script)
    app.router.add_get("/status/status.css", status.style)
    app.router.add_get("/v1/status", status.status)
    if collector is not None:

        async def close_collector(app: web.Application) -> None:
            collector.close()

        app.on_cleanup.append(close_collector)
    return status
