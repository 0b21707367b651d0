"""Content routes of the query API: read, delete and search pages in the :class:`~crawlstream.store.ShardedStore`.

Contract:

* ``GET /v1/content?url=`` answers the stored body byte for byte with its stored content type
  and ``X-Content-Hash`` (xxh3-128, hex), ``X-Url-Key``, ``X-Fetched-At`` (ISO 8601 UTC). Pages
  are third-party HTML served from the API's origin, so every body carries
  ``Content-Security-Policy: sandbox`` and ``X-Content-Type-Options: nosniff``: a browser
  never runs a stored page's scripts with the API's origin.
* A record whose checksums fail is never served: the store quarantines it and the answer is a
  **502** ``damaged_record`` (the server's own storage failed, not the client's input, and a
  retry will not help until the URL is re-fetched). Counted always, logged once per url_key.
* ``DELETE /v1/content?url=`` tombstones the URL (204; effective for the next request) or 404.
* ``GET /v1/content/search`` reads the store's index only (never a body); at least one of
  ``domain``, ``path_prefix``, ``tag``; pages in URL order with the API's ``limit`` cap.
* ``PUT`` / ``DELETE /v1/content/tags?url=&tag=...`` add / remove tags of a stored page (1 to
  ``MAX_TAGS_PER_REQUEST`` tags of printable characters, each at most ``MAX_TAG_CHARS``) and
  answer the page's tags after the change; 404 if the URL is not stored. Writes: they need a
  token with the write (``delete``) right like every write.
* The store is not versioned like the index: these answers carry no ``index_version``.
* Access: the store does not know which dataset a page belongs to, so the content routes need
  a grant that sees every dataset (a ``"*"`` token, or an anonymous read where those are
  allowed); a dataset-limited token gets a 403 whatever the URL (existence does not leak).
  ``DELETE`` needs a token granted ``"delete": true``, always (checked by the middleware).
* No store configured: every content route is a 503 ``store_unavailable``.
* Logs carry url_keys and token fingerprints, never URLs or tokens (seed §8).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from crawlstream.api._acl import GRANT_KEY
from crawlstream.api._inputs import (
    ApiError,
    format_ts,
    has_control_chars,
    parse_page,
    parse_url,
    query_param,
    reduce_to_domain,
)
from crawlstream.errors import ChecksumMismatch, TransientError
from crawlstream.urls import CanonicalUrl

if TYPE_CHECKING:
    from crawlstream.api._acl import Grant
    from crawlstream.api._app import QueryApi
    from crawlstream.store import Entry, ShardedStore

__all__ = [
    "CONTENT_HASH_HEADER",
    "FETCHED_AT_HEADER",
    "MAX_TAGS_PER_REQUEST",
    "URL_KEY_HEADER",
    "ContentApi",
    "add_content_routes",
]

logger = logging.getLogger(__name__)

CONTENT_HASH_HEADER = "X-Content-Hash"
URL_KEY_HEADER = "X-Url-Key"
FETCHED_AT_HEADER = "X-Fetched-At"
# Caps sized so a request with every filter at its cap fits aiohttp's 8190-byte request line
# even when each character is a percent-encoded 4-byte UTF-8 sequence (12 bytes):
# (256 + 128 + 253) * 12 = 7644 bytes. A longer line is a 400 from aiohttp itself (text/plain).
MAX_PATH_PREFIX_CHARS = 256
MAX_TAG_CHARS = 128
MAX_DOMAIN_CHARS = 253
MAX_TAGS_PER_REQUEST = 32
_FALLBACK_TYPE = "application/octet-stream"
# A stored content type is echoed only if it is a plain `type/subtype[; params]` of visible
# ASCII: anything else (CR/LF, non-ASCII) could split or corrupt the response headers.
_CONTENT_TYPE_OK = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(;[\x20-\x7e]*)?")
_LOGGED_DAMAGE_MAX = 10_000  # url_keys remembered for log-once (bounded memory)

T = TypeVar("T")


def _content_type(stored: str | None) -> str:
    if stored and len(stored) <= 256 and _CONTENT_TYPE_OK.fullmatch(stored.strip()):
        return stored.strip()
    return _FALLBACK_TYPE


def _item(entry: Entry) -> dict[str, Any]:
    return {
        "url": entry.url,
        "url_key": entry.url_key,
        "content_type": entry.content_type,
        "title": entry.title,
        "size": entry.raw_size,
        "fetched_at": format_ts(entry.fetched_at_ms),
        "tags": sorted(entry.tags),
    }


def _text_filter(query: object, name: str, max_chars: int) -> str | None:
    raw = query_param(query, name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_chars or has_control_chars(raw):
        raise ApiError(
            400, f"invalid_{name}", f"expected {name} of at most {max_chars} printable characters, found {len(raw)}"
        )
    return raw


def _tags(query: Any) -> list[str]:
    """The ``tag`` parameters of a tag change: 1..MAX_TAGS_PER_REQUEST printable strings."""
    tags = query.getall("tag", [])
    if not 1 <= len(tags) <= MAX_TAGS_PER_REQUEST:
        raise ApiError(400, "invalid_tag", f"expected 1 to {MAX_TAGS_PER_REQUEST} tag= parameters, found {len(tags)}")
    for tag in tags:
        if not tag or len(tag) > MAX_TAG_CHARS or has_control_chars(tag):
            raise ApiError(
                400,
                "invalid_tag",
                f"expected each tag to be 1 to {MAX_TAG_CHARS} printable characters, found {tag[:80]!r}",
            )
    return tags


class ContentApi:
    """The content handlers; plumbing (grant, executor, timeout, caps) is the ``QueryApi``'s."""

    def __init__(self, api: QueryApi, store: ShardedStore | None, registry: CollectorRegistry) -> None:
        self.api = api
        self.store = store
        self._logged_damage: set[int] = set()
        self.damaged_reads = Counter(
            "crawlstream_api_damaged_records",
            "content reads refused because the stored record failed its checksums (quarantined)",
            registry=registry,
        )
        self.deletes = Counter("crawlstream_api_content_deletes", "URLs deleted through the API", registry=registry)

    # -- plumbing --------------------------------------------------------------------------

    def _ready(self, request: web.Request) -> tuple[ShardedStore, Grant]:
        """The store (503 when none is configured) for a grant that sees every dataset (403)."""
        grant: Grant = request[GRANT_KEY]
        if grant.datasets is not None:
            raise ApiError(
                403,
                "forbidden",
                "content is not partitioned by dataset: it needs a token granted every dataset ('*')",
            )
        if self.store is None:
            raise ApiError(
                503, "store_unavailable", "content store not configured: no <data_dir>/store when the API started"
            )
        return self.store, grant

    async def _call(self, fn: Callable[[], T]) -> T:
        """Run store work on the API's pool (bodies are read from disk and decompressed)."""
        api = self.api
        try:
            if api.executor is None:
                return fn()
            loop = asyncio.get_running_loop()
            return await asyncio.wait_for(loop.run_in_executor(api.executor, fn), api.request_timeout_s)
        except TimeoutError:
            api.metrics.timeouts.inc()
            raise ApiError(
                503, "timeout", f"the content store did not answer within {api.request_timeout_s} s; retry later"
            ) from None
        except TransientError as exc:
            raise ApiError(503, "store_unavailable", f"the content store cannot be read: {exc}") from None

    def _damaged(self, url_key: int) -> ApiError:
        self.damaged_reads.inc()
        if url_key not in self._logged_damage and len(self._logged_damage) < _LOGGED_DAMAGE_MAX:
            self._logged_damage.add(url_key)
            logger.error("stored record of url_key %d is damaged and quarantined; not served", url_key)
        return ApiError(
            502,
            "damaged_record",
            "the stored record is damaged and quarantined, so it is not served; re-fetch the URL to store it again",
        )

    @staticmethod
    def _not_stored(canon: CanonicalUrl) -> ApiError:
        return ApiError(404, "not_stored", f"no content is stored for {canon.url!r}")

    # -- handlers --------------------------------------------------------------------------

    async def read(self, request: web.Request) -> web.Response:
        store, _ = self._ready(request)
        canon = parse_url(query_param(request.query, "url"))

        def work() -> tuple[Entry, bytes | None] | None:
            """(entry, body), (entry, None) when the record is damaged, None when not stored."""
            entry = store.entry(canon.url)
            if entry is None:
                return None
            try:
                return entry, store.get_by_key(entry.url_key, entry.url)
            except KeyError:  # deleted between the lookup and the read
                return None
            except ChecksumMismatch:  # the store has quarantined it (and logged the region)
                return entry, None

        found = await self._call(work)
        if found is None:
            raise self._not_stored(canon)
        if found[1] is None:
            raise self._damaged(found[0].url_key)
        entry, body = found[0], found[1]
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = _content_type(entry.content_type)
        resp.headers[CONTENT_HASH_HEADER] = entry.content_hash.hex()
        resp.headers[URL_KEY_HEADER] = str(entry.url_key)
        fetched_at = format_ts(entry.fetched_at_ms)
        if fetched_at is not None:
            resp.headers[FETCHED_AT_HEADER] = fetched_at
        resp.headers["Content-Security-Policy"] = "sandbox"
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    async def delete(self, request: web.Request) -> web.Response:
        store, grant = self._ready(request)
        canon = parse_url(query_param(request.query, "url"))

        def work() -> int | None:
            entry = store.entry(canon.url)
            if entry is None or not store.delete(canon.url):
                return None
            return entry.url_key

        url_key = await self._call(work)
        if url_key is None:
            raise self._not_stored(canon)
        self.deletes.inc()
        logger.info("deleted stored content of url_key %d (token %s)", url_key, grant.fingerprint)
        return web.Response(status=204)

    async def search(self, request: web.Request) -> web.Response:
        store, _ = self._ready(request)
        query = request.query
        raw_domain = _text_filter(query, "domain", MAX_DOMAIN_CHARS)
        domain = reduce_to_domain(raw_domain) if raw_domain else None
        path_prefix = _text_filter(query, "path_prefix", MAX_PATH_PREFIX_CHARS)
        if path_prefix is not None and not path_prefix.startswith("/"):
            raise ApiError(
                400, "invalid_path_prefix", f"expected path_prefix to start with '/', found {path_prefix[:80]!r}"
            )
        tag = _text_filter(query, "tag", MAX_TAG_CHARS)
        if domain is None and path_prefix is None and tag is None:
            raise ApiError(
                400,
                "missing_filter",
                "expected at least one of domain=, path_prefix=, tag= (a full listing is not served)",
            )
        offset, limit = parse_page(query, default_limit=self.api.default_limit, max_limit=self.api.max_limit)

        def work() -> bytes:
            # The store sorts every match before yielding the first, so listing them all
            # costs little more and gives the exact total.
            matches = list(store.search(domain=domain, path_prefix=path_prefix, tag=tag))
            total = len(matches)
            doc = {
                "filters": {"domain": domain, "path_prefix": path_prefix, "tag": tag},
                "total": total,
                "items": [_item(e) for e in matches[offset : offset + limit]],
                "next_offset": offset + limit if offset + limit < total else None,
            }
            return json.dumps(doc, separators=(",", ":")).encode()

        return web.Response(body=await self._call(work), content_type="application/json")


    async def _change_tags(self, request: web.Request, *, add: bool) -> web.Response:
        store, grant = self._ready(request)
        canon = parse_url(query_param(request.query, "url"))
        tags = _tags(request.query)

        def work() -> list[str] | None:
            try:
                (store.tag if add else store.untag)(canon.url, *tags)
            except KeyError:  # not stored (or deleted meanwhile)
                return None
            entry = store.entry(canon.url)
            return sorted(entry.tags) if entry is not None else None

        now = await self._call(work)
        if now is None:
            raise self._not_stored(canon)
        logger.info("%s %d tags (token %s)", "added" if add else "removed", len(tags), grant.fingerprint)
        body = json.dumps({"url": canon.url, "tags": now}, separators=(",", ":")).encode()
        return web.Response(body=body, content_type="application/json")

    async def add_tags(self, request: web.Request) -> web.Response:
        return await self._change_tags(request, add=True)

    async def remove_tags(self, request: web.Request) -> web.Response:
        return await self._change_tags(request, add=False)


def add_content_routes(
    app: web.Application, api: QueryApi, store: ShardedStore | None, registry: CollectorRegistry
) -> ContentApi:
    content = ContentApi(api, store, registry)
    app.router.add_get("/v1/content", content.read)
    app.router.add_delete("/v1/content", content.delete)
    app.router.add_get("/v1/content/search", content.search)
    app.router.add_put("/v1/content/tags", content.add_tags)
    app.router.add_delete("/v1/content/tags", content.remove_tags)
    return content
