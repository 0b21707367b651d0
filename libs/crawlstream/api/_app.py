"""The aiohttp query API over an :class:`~crawlstream.index.IndexReader`.

Contract:

* Every answer that consults the index is computed from ONE pinned version (``reader.pin()``
  held for the whole request) and names it in the body (``index_version``) and the
  ``X-Index-Version`` header. A 400 (input rejected before the index is consulted) and a
  401 carry no version.
* User input can only produce 4xx: inputs are validated in ``_inputs`` before any index call.
  A 500 means a bug: it is logged with the request id (``X-Request-Id``) and the body is
  generic. An unavailable index (no manifest yet, storage down) is a 503; stored bytes that
  fail their checksum are a 502 (``corrupt_data``, logged and counted), never a wrong answer.
* A page names the next one (``next``: offset, limit and ``version=<index_version>``), so a
  paging client reads every page from one version; once gc removed it, 410 (``version_gone``).
* An index on S3 (``index.uri``) never reads on the event loop: what is not in the reader's
  memory is read on the pool (``_run``), and an outage is a fast 503 (the reader's breaker).
* Where the work runs was decided by measurement (bench/bench_api.py, quick mode, 2 shared
  cores, 16 connections): warm reads are GIL-bound, so a thread-pool hop only adds cost for
  work that never blocks. ``/v1/domain`` and ``/healthz`` (memory-mapped index lookups) run
  on the loop: all-on-loop 6710 vs all-in-pool 2753 req/s, p99 3.8 vs 10.3 ms. Pages and URL
  lookups first try on the loop with a ``cached_only`` pin: when every row group they need is
  in the reader's cache they finish there (a thread hop costs ~0.1 ms of CPU and ~0.15 ms of
  wall time on the 2 shared cores, about what the reader spends on a cached first page). A
  miss (:class:`~crawlstream.index.NotCached`) runs again on the pool, where Parquet reads,
  possibly from disk, do not stall the loop: first page 1051 vs 678 req/s, p99 28 vs 56 ms
  against all-on-loop (interleaved runs, all misses). ``executor_threads=0`` runs everything
  on the loop. The JSON body is encoded where the work ran.
* Authorization (``_acl.Access``) is decided in the middleware before any other work, for
  every path under ``/v1/`` (matched or not, so a 401 never reveals which routes exist):
  writes and deletes need a token granted ``delete``; reads need a token unless anonymous
  reads are allowed (loopback bind, no tokens file: ``from_settings``). Datasets the token
  may not see are filtered out, and asking for one directly is a 404 identical to a dataset
  that does not exist, so existence does not leak. ``/healthz``, ``/metrics``,
  ``/openapi.json`` and the ``/status`` page's static files stay open (probes and scrapers
  carry no token; the page's data comes from ``/v1/status``: ``_status`` docstring).
* Nothing here logs URLs, domains of requests or tokens (seed §8): logs carry the route
  template, status, latency and request id.
* Content read / delete / search over the :class:`~crawlstream.store.ShardedStore` (optional
  ``store``): ``_content`` docstring.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from crawlstream.api._acl import GRANT_KEY, Access, Acl
from crawlstream.api._content import add_content_routes
from crawlstream.api._inputs import (
    ApiError,
    format_ts,
    parse_dataset_id,
    parse_page,
    parse_url,
    parse_version,
    query_param,
    reduce_to_domain,
)
from crawlstream.api._metrics import ApiMetrics
from crawlstream.api._openapi import openapi_document
from crawlstream.api._status import add_status_routes
from crawlstream.api._tokens import TokensFile, default_tokens_path, ensure_tokens_file
from crawlstream.api._urls import url_answer
from crawlstream.errors import ChecksumMismatch, ConfigError, CrawlstreamError, TransientError
from crawlstream.index import NotCached, VersionGone
from crawlstream.lake import is_alias_dataset
from crawlstream.settings import ApiSettings

if TYPE_CHECKING:
    from crawlstream.index import IndexReader, PinnedIndex
    from crawlstream.settings import Settings
    from crawlstream.status import StatusCollector
    from crawlstream.store import ShardedStore

__all__ = [
    "GRANT_KEY",
    "REQUEST_ID_HEADER",
    "RUNNER_OPTIONS",
    "VERSION_HEADER",
    "check_port_free",
    "create_app",
    "from_settings",
    "is_loopback",
    "serve",
    "tokens_from_settings",
]

logger = logging.getLogger(__name__)

VERSION_HEADER = "X-Index-Version"
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID_OK = re.compile(r"[A-Za-z0-9._-]{1,64}")
RUNNER_OPTIONS: dict[str, Any] = {"access_log": None}
"""Options for aiohttp's runner (``run_app``/``AppRunner``/``TestServer``): the access log is off
because its request line carries URLs and domains (seed §8); the middleware logs route templates."""
_APP_KEY: web.AppKey[QueryApi] = web.AppKey("crawlstream_query_api")


class _Result:
    """A finished answer, encoded off the loop: status, JSON bytes, the version it came from."""

    __slots__ = ("body", "status", "version")

    def __init__(self, status: int, body: bytes, version: str | None) -> None:
        self.status = status
        self.body = body
        self.version = version


class RawJson(str):
    """Already-encoded JSON text: :func:`_encode` inserts it as is."""


_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _encode(doc: dict[str, Any]) -> bytes:
    """``doc`` as compact JSON; a :class:`RawJson` value (the long lists of an answer, written by
    the handlers without a dict per element) goes in as is."""
    fields = [f"{_dumps(k)}:{v if type(v) is RawJson else _dumps(v)}" for k, v in doc.items()]
    return ("{" + ",".join(fields) + "}").encode()


def _ts_json(ts_ms: int | None) -> str:
    ts = format_ts(ts_ms)
    return "null" if ts is None else f'"{ts}"'  # ASCII digits and punctuation: nothing to escape


def _items_json(rows: list[tuple[int, str, int | None]]) -> RawJson:
    """A page's items as JSON, with ``json.dumps``'s string escaping (~3x faster than dicts + dumps)."""
    esc = encode_basestring_ascii
    return RawJson("[" + ",".join([f'{{"url_key":{k},"url":{esc(u)},"ts":{_ts_json(t)}}}' for k, u, t in rows]) + "]")


class QueryApi:
    """The handlers and their shared state (reader, ACL, metrics, executor)."""

    def __init__(
        self,
        reader: IndexReader,
        *,
        config: ApiSettings,
        access: Access,
        metrics: ApiMetrics,
        content: bool = False,
        status: bool = False,
    ) -> None:
        self.reader = reader
        self.max_limit = config.max_limit
        self.default_limit = min(config.default_limit, config.max_limit)
        self.access = access
        self.metrics = metrics
        self.request_timeout_s = config.request_timeout_s
        threads = config.executor_threads
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="query-api") if threads > 0 else None
        self.openapi = _encode(
            openapi_document(
                max_limit=self.max_limit,
                default_limit=self.default_limit,
                anonymous_reads=access.anonymous_reads,
                content=content,
                status=status,
            )
        )

    # -- plumbing --------------------------------------------------------------------------

    def _pinned(
        self, work: Callable[[PinnedIndex], dict[str, Any]], cached_only: bool = False, version: str | None = None
    ) -> _Result:
        """Run ``work`` on one pinned version and encode its answer (on the calling thread)."""
        with self.reader.pin(cached_only=cached_only, version=version) as idx:
            try:
                doc = work(idx)
            except ApiError as exc:
                exc.index_version = idx.version
                raise
            doc["index_version"] = idx.version
            return _Result(200, _encode(doc), idx.version)

    async def _run(
        self,
        request: web.Request,
        work: Callable[[PinnedIndex], dict[str, Any]],
        *,
        reads_lake: bool,
        version: str | None = None,
    ) -> web.Response:
        """``reads_lake``: the work may read Parquet (possibly from disk). It runs on the loop if
        every row group it needs is cached (a thread hop costs more than such a page), else on
        the pool, pinning the then current version (or ``version``). An index on S3 takes that
        path for every request: anything not in memory is read on the pool, bounded by
        ``request_timeout_s`` (and the reader's S3 deadline, no longer than it)."""
        try:
            if self.executor is None or not (reads_lake or self.reader.remote):
                result = self._pinned(work, version=version)
            else:
                try:
                    result = self._pinned(work, True, version)
                except NotCached:
                    loop = asyncio.get_running_loop()
                    future = loop.run_in_executor(self.executor, self._pinned, work, False, version)
                    result = await asyncio.wait_for(future, self.request_timeout_s)
        except TimeoutError:
            self.metrics.timeouts.inc()
            raise ApiError(
                503, "timeout", f"the index did not answer within {self.request_timeout_s} s; retry later"
            ) from None
        except TransientError as exc:
            raise ApiError(503, "index_unavailable", f"no index version can be served: {exc}") from None
        except VersionGone as exc:
            raise ApiError(410, "version_gone", str(exc)) from None
        except ChecksumMismatch as exc:  # corrupt stored bytes: an error, never a wrong answer
            self.metrics.integrity_errors.inc()
            logger.error("integrity error on route %s: %s", request.match_info.route.resource, exc)
            raise ApiError(502, "corrupt_data", f"stored index data failed its checksum: {exc}") from None
        resp = web.Response(body=result.body, status=result.status, content_type="application/json")
        if result.version is not None:
            resp.headers[VERSION_HEADER] = result.version
        return resp

    # -- /v1 -------------------------------------------------------------------------------

    async def domain(self, request: web.Request) -> web.Response:
        grant = request[GRANT_KEY]
        domain = reduce_to_domain(request.match_info["domain"])

        def work(idx: PinnedIndex) -> dict[str, Any]:
            domain_id = idx.domain_id(domain)
            found = idx.datasets_for_domain_id(domain, domain_id) if domain_id is not None else ()
            visible = [d for d in found if grant.allows(d.dataset_id) and not is_alias_dataset(d.dataset_id)]
            if not visible:
                raise ApiError(404, "unknown_domain", f"no dataset (visible to you) contains domain {domain!r}")
            datasets = ",".join([f'{{"dataset_id":{ds},"url_count":{n}}}' for ds, n in visible])
            return {"domain": domain, "domain_id": domain_id, "datasets": RawJson(f"[{datasets}]")}

        return await self._run(request, work, reads_lake=False)

    async def urls(self, request: web.Request) -> web.Response:
        grant = request[GRANT_KEY]
        domain = reduce_to_domain(request.match_info["domain"])
        dataset_id = parse_dataset_id(request.match_info["dataset_id"])
        offset, limit = parse_page(request.query, default_limit=self.default_limit, max_limit=self.max_limit)
        version = parse_version(request.query)

        def work(idx: PinnedIndex) -> dict[str, Any]:
            page = idx.urls(domain, dataset_id, offset, limit) if grant.allows(dataset_id) else None
            if page is None:
                if grant.datasets is None and idx.domain_id(domain) is None:
                    raise ApiError(404, "unknown_domain", f"no dataset contains domain {domain!r}")
                raise ApiError(
                    404, "unknown_dataset", f"dataset {dataset_id} has no URLs of domain {domain!r} visible to you"
                )
            return {
                "domain": domain,
                "dataset_id": dataset_id,
                "total": page.total,
                "items": _items_json(page.rows),
                "next_offset": page.next_offset,
                "next": None if page.next_offset is None else (
                    f"/v1/domain/{quote(domain, safe='')}/datasets/{dataset_id}/urls"
                    f"?offset={page.next_offset}&limit={limit}&version={idx.version}"
                ),
            }

        return await self._run(request, work, reads_lake=True, version=version)

    async def url(self, request: web.Request) -> web.Response:
        grant = request[GRANT_KEY]
        requested = query_param(request.query, "url")
        canon = parse_url(requested)  # 400 when missing: ``requested`` is a str from here on
        requested = requested or ""
        from crawlstream.urls import url_key

        key = url_key(canon)

        def work(idx: PinnedIndex) -> dict[str, Any]:
            return url_answer(idx, canon, key, requested, grant)  # + redirect chain, raw form (ADR 024)

        return await self._run(request, work, reads_lake=True)

    # -- operations ------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        def work(idx: PinnedIndex) -> dict[str, Any]:
            datasets = sum(1 for d in idx.dataset_ids() if not is_alias_dataset(d))  # the alias map is no dataset
            return {"status": "ok", "domains": idx.domain_count(), "datasets": datasets}

        try:
            return await self._run(request, work, reads_lake=False)
        except ApiError as exc:
            if exc.status != 503:
                raise
            return web.json_response({"status": "unavailable", "message": exc.message}, status=503)

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        registry: CollectorRegistry = request.app[_REGISTRY_KEY]
        resp = web.Response(body=generate_latest(registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def openapi_endpoint(self, request: web.Request) -> web.Response:
        return web.Response(body=self.openapi, content_type="application/json")

    async def close(self, app: web.Application) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


_REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("crawlstream_metrics_registry")
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _request_id(request: web.Request) -> str:
    given = request.headers.get(REQUEST_ID_HEADER)
    return given if given and _REQUEST_ID_OK.fullmatch(given) else os.urandom(8).hex()


def _error(status: int, code: str, message: str, request_id: str, version: str | None) -> web.Response:
    doc: dict[str, Any] = {"error": code, "message": message, "request_id": request_id}
    if version is not None:
        doc["index_version"] = version
    resp = web.Response(body=_encode(doc), status=status, content_type="application/json")
    if version is not None:
        resp.headers[VERSION_HEADER] = version
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="crawlstream"'
    return resp


def _middleware(api: QueryApi) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.perf_counter()
        rid = _request_id(request)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        api.metrics.in_flight.inc()
        resp: web.StreamResponse
        try:
            if request.path.startswith("/v1/"):
                write = request.method not in _READ_METHODS
                request[GRANT_KEY] = api.access.decide(request.headers.get("Authorization"), write=write)
            resp = await handler(request)
        except ApiError as exc:
            resp = _error(exc.status, exc.code, exc.message, rid, exc.index_version)
        except web.HTTPException as exc:  # the router's own 404 / 405
            code = "not_found" if exc.status == 404 else "method_not_allowed" if exc.status == 405 else "http_error"
            resp = _error(exc.status, code, exc.reason, rid, None)
            if "Allow" in exc.headers:
                resp.headers["Allow"] = exc.headers["Allow"]
        except asyncio.CancelledError:
            raise
        except Exception:  # the HTTP boundary: a bug must become a logged 500, not a dropped connection
            api.metrics.internal_errors.inc()
            logger.exception("internal error: request %s on route %s", rid, route)
            resp = _error(500, "internal", f"internal error; quote request id {rid} to the operator", rid, None)
        finally:
            api.metrics.in_flight.dec()
        resp.headers[REQUEST_ID_HEADER] = rid
        elapsed = time.perf_counter() - started
        api.metrics.observe(route, request.method, resp.status, elapsed)
        logger.debug("%s %s -> %d in %.1f ms (request %s)", request.method, route, resp.status, elapsed * 1e3, rid)
        return resp

    return middleware


def create_app(
    reader: IndexReader,
    *,
    acl: Acl | TokensFile | None,
    registry: CollectorRegistry,
    config: ApiSettings | None = None,
    anonymous_reads: bool | None = None,
    store: ShardedStore | None = None,
    status: StatusCollector | None = None,
) -> web.Application:
    """The application. The caller owns ``reader`` and ``store`` (close them after the app is cleaned up).

    ``config``: the ``api.*`` settings (``ApiSettings``, taken whole; its defaults when None):
    ``max_limit``, ``default_limit``, ``executor_threads`` and ``request_timeout_s`` shape the app.

    ``registry`` receives this app's metrics and is what ``/metrics`` exposes; pass a fresh
    ``CollectorRegistry`` per app in tests (names can be registered once per registry).
    ``store``: serves ``/v1/content*`` (and documents them in ``/openapi.json``); without one
    those routes answer 503. ``status``: what ``/v1/status`` answers from (None: 503).
    ``acl``: the tokens (None: no token exists, so nothing can be
    written); ``anonymous_reads`` defaults to ``acl is None``.
    """
    metrics = ApiMetrics(registry)
    if isinstance(acl, TokensFile) and acl.on_reload_failure is None:
        acl.on_reload_failure = metrics.token_reload_failures.inc
    api = QueryApi(
        reader,
        config=config if config is not None else ApiSettings(),
        access=Access(acl, anonymous_reads=acl is None if anonymous_reads is None else anonymous_reads),
        metrics=metrics,
        content=store is not None,
        status=status is not None,
    )
    app = web.Application(middlewares=[_middleware(api)], client_max_size=64 * 1024)
    app[_APP_KEY] = api
    app[_REGISTRY_KEY] = registry
    app.router.add_get("/v1/domain/{domain}", api.domain)
    app.router.add_get("/v1/domain/{domain}/datasets/{dataset_id}/urls", api.urls)
    app.router.add_get("/v1/url", api.url)
    add_content_routes(app, api, store, registry)
    add_status_routes(app, api, status)
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/metrics", api.metrics_endpoint)
    app.router.add_get("/openapi.json", api.openapi_endpoint)
    app.on_cleanup.append(api.close)
    return app


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (unresolvable: no)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).partition("%")[0]).is_loopback for info in infos)


def tokens_from_settings(settings: Settings) -> tuple[TokensFile, bool]:
    """The API's tokens and whether it allows anonymous reads (fails early, naming the setting).

    A configured ``api.tokens_file`` is used as is: every ``/v1`` request needs a token. Without
    one the API may only bind loopback; it then allows anonymous reads and keeps its tokens in
    ``<data_dir>/api/tokens.json``, created with one admin token (mode 0600) on first start.
    """
    api = settings.api
    if api.tokens_file is not None:
        return TokensFile(api.tokens_file), False
    if not is_loopback(api.host):
        raise ConfigError(
            f"the query API would listen on {api.host!r}, beyond this machine, with no tokens file: set "
            "CRAWLSTREAM_API_TOKENS_FILE (create one with `crawlstream tokens add --file PATH`), "
            "or bind 127.0.0.1 (--api-host)"
        )
    path = default_tokens_path(settings.data_dir)
    if ensure_tokens_file(path):
        logger.warning("created an admin token for writes and deletes in %s (mode 0600)", path)
    return TokensFile(path), True


def from_settings(settings: Settings, *, registry: CollectorRegistry | None = None) -> web.Application:
    """The app over ``<data_dir>/index`` (and ``<data_dir>/store`` if it exists); what it opens
    is closed on app cleanup."""
    from crawlstream.index import IndexReader
    from crawlstream.store import open_store

    tokens, anonymous_reads = tokens_from_settings(settings)
    reader = IndexReader.from_settings(settings)
    # The store has one writer per root and opening it repairs torn tails: only open it when
    # no bucket compressor writes there (ApiSettings.serve_content; `crawlstream demo` does).
    serve_content = settings.api.serve_content and (settings.data_dir / "store").is_dir()
    store = open_store(settings) if serve_content else None
    from crawlstream.status import StatusCollector

    status = StatusCollector.from_settings(settings, store=store)
    app = create_app(
        reader,
        config=settings.api,
        acl=tokens,
        anonymous_reads=anonymous_reads,
        registry=REGISTRY if registry is None else registry,
        store=store,
        status=status,
    )

    async def close_reader(app: web.Application) -> None:
        reader.close()
        status.close()
        if store is not None:
            store.close()

    app.on_cleanup.append(close_reader)
    return app


async def _settle(app: web.Application) -> None:
    """Open the current index version before the first request, then move everything allocated
    so far (modules, the PSL, the version's tables: ~90k objects) out of the cyclic collector's
    reach: a full collection over them took 25-35 ms of CPU, a stall every request in flight
    would wait for."""
    reduce_to_domain("www.example.com")  # loads the public suffix list
    try:
        app[_APP_KEY].reader.pin().release()
    except CrawlstreamError as exc:  # no (readable) index yet: requests answer 503 / retry the open
        logger.warning("index not opened at start-up: %s", exc)
    gc.collect()
    gc.freeze()


def check_port_free(host: str, port: int) -> None:
    """Fail at start-up, naming the setting, when the API could not listen where configured."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"the query API cannot listen on {host}:{port} ({exc.strerror}): stop the process that holds "
                "the port, or choose another with --api-port / CRAWLSTREAM_API_PORT"
            ) from None


def serve(settings: Settings) -> int:
    """Run the API on ``settings.api.host:port`` until SIGINT/SIGTERM (blocking)."""
    check_port_free(settings.api.host, settings.api.port)
    app = from_settings(settings)
    app.on_startup.append(_settle)
    logger.info(
        "query API listening on http://%s:%d (index at %s, tokens %s, anonymous reads %s, max_limit %d, "
        "content store %s)",
        settings.api.host,
        settings.api.port,
        app[_APP_KEY].reader.index_store,
        app[_APP_KEY].access.source,
        "on" if app[_APP_KEY].access.anonymous_reads else "off",
        settings.api.max_limit,
        "on" if (settings.data_dir / "store").is_dir() else "off",
    )
    web.run_app(app, host=settings.api.host, port=settings.api.port, print=None, **RUNNER_OPTIONS)
    return 0
