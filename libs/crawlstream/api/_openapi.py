"""The OpenAPI 3.0 document of the query API (pure: built from the app's parameters).

It is generated from the same limits the handlers enforce (``max_limit``, the id ranges),
and declares bearer auth on every ``/v1`` operation (optional for reads where anonymous reads
are allowed; always required for deletes), so a property-based client (schemathesis) can hold
the server to it. The content routes are listed only when a content
store is configured (without one they exist but answer 503), the status routes only with a
status collector (without one ``/v1/status`` answers 503).

Everything is declared once: an operation is a row of ``_OPERATIONS`` (the routes
``create_app`` registers; tests/api/test_openapi.py holds the two together) naming its
parameters (``_parameters``), its own responses and the shared errors it answers with
(``_INDEX_ERRORS``, ``_CONTENT_ERRORS``); response bodies are the ``_SCHEMAS``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from crawlstream.api._content import MAX_DOMAIN_CHARS, MAX_PATH_PREFIX_CHARS, MAX_TAG_CHARS, MAX_TAGS_PER_REQUEST
from crawlstream.api._inputs import MAX_DATASET_ID, MAX_OFFSET

__all__ = ["openapi_document"]

_JSON = "application/json"
_BEARER: list[dict[str, list[str]]] = [{"bearer": []}]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _response(description: str, schema: str, *, versioned: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {_JSON: {"schema": _ref(schema)}}}
    if versioned:
        out["headers"] = {
            "X-Index-Version": {
                "description": "the index version the response was served from (absent if none was consulted)",
                "schema": {"type": "string"},
            }
        }
    return out


def _error(description: str) -> dict[str, Any]:
    """An ``Error`` answer that names no index version (content and status routes, 401s)."""
    return _response(description, "Error", versioned=False)


def _body(
    description: str, media_type: str, schema: dict[str, Any], headers: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A response whose body is not one of the ``_SCHEMAS`` (a page, a stored body, metrics)."""
    out: dict[str, Any] = {"description": description}
    if headers is not None:
        out["headers"] = headers
    out["content"] = {media_type: {"schema": schema}}
    return out


# ---------------------------------------------------------------------------------------------
# Parameters


def _param(
    name: str, where: str, schema: dict[str, Any], *, required: bool = False, description: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "in": where, "required": required}
    if description is not None:
        out["description"] = description
    return {**out, **extra, "schema": schema}


def _parameters(max_limit: int, default_limit: int) -> dict[str, dict[str, Any]]:
    """Every parameter an operation may name, by that name (``limit`` states the server's cap)."""
    return {
        "domain": _param(
            "domain", "path", {"type": "string", "minLength": 1}, required=True,
            description=(
                "a registered domain, any host under it, or an http(s) URL (percent-encode its `/` as %2F); "
                "reduced to the registered domain (eTLD+1, punycode)"
            ),
        ),
        "dataset_id": _param(
            "dataset_id", "path", {"type": "integer", "minimum": 0, "maximum": MAX_DATASET_ID}, required=True
        ),
        "offset": _param("offset", "query", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0}),
        "limit": _param(
            "limit", "query", {"type": "integer", "minimum": 1, "maximum": max_limit, "default": default_limit},
            description=f"page size; more than {max_limit} is rejected (400), not clamped",
        ),
        "version": _param(
            "version", "query", {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
            description=(
                "the index version to read (`index_version` of the first page; `next` carries it): every "
                "page of a walk comes from one version; 410 once that version was garbage-collected"
            ),
        ),
        "url": _param("url", "query", {"type": "string", "minLength": 1}, required=True),
        "stored_url": _param(
            "url", "query", {"type": "string", "minLength": 1}, required=True,
            description="an absolute http(s) URL; canonicalized as the store does",
        ),
        "tags": _param(
            "tag", "query",
            {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_TAGS_PER_REQUEST,
                "items": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TAG_CHARS,
                    "pattern": "^[^\\x00-\\x1f\\x7f]+$",
                },
            },
            required=True, description="a tag; repeat the parameter for several", style="form", explode=True,
        ),
        "domain_filter": _param(
            "domain", "query", {"type": "string", "maxLength": MAX_DOMAIN_CHARS},
            description="registered domain, host or URL; reduced to the registered domain",
        ),
        "path_prefix": _param(
            "path_prefix", "query", {"type": "string", "maxLength": MAX_PATH_PREFIX_CHARS},
            description="prefix of the canonical path and query, starting with '/'",
        ),
        "tag_filter": _param("tag", "query", {"type": "string", "maxLength": MAX_TAG_CHARS}),
    }


_PAGE = ("offset", "limit")


# ---------------------------------------------------------------------------------------------
# Shared errors and operations

_INVALID = "invalid input; `message` says what was expected"
_INDEX_ERRORS = {
    "400": _response(_INVALID, "Error"),
    "404": _response("unknown domain or dataset (or not visible to this token)", "Error"),
    "503": _response("no index is loaded yet, its storage is unavailable, or the request timed out", "Error"),
    "401": _error("missing or unknown bearer token"),
    "502": _response("stored index or lake data failed its checksum (corrupt); the operator is alerted", "Error"),
    "410": _response("the index version asked for (`version`) was garbage-collected: start over", "Error"),
}
_CONTENT_ERRORS = {
    "400": _error(_INVALID),
    "503": _error("no content store is configured, it cannot be read, or the request timed out"),
    "401": _error("missing or unknown bearer token (deletes always need one)"),
    "403": _error("the token is limited to some datasets (content needs '*'), or may not delete"),
}


def _only(errors: dict[str, Any], *codes: str) -> dict[str, Any]:
    return {code: errors[code] for code in codes}


@dataclass(frozen=True)
class _Operation:
    """One route's operation. ``access``: ``read`` follows the document's security (a token, or
    none where anonymous reads are allowed), ``open`` needs none, ``write`` always a token.
    ``part``: ``index`` is always listed, ``content`` with a content store, ``status`` with a
    status collector."""

    path: str
    method: str
    operation_id: str
    summary: str
    responses: dict[str, Any]
    errors: dict[str, Any] = field(default_factory=dict)
    parameters: tuple[str, ...] = ()
    description: str | None = None
    access: Literal["read", "open", "write"] = "read"
    part: Literal["index", "content", "status"] = "index"

    def document(self, parameters: dict[str, dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"operationId": self.operation_id, "summary": self.summary}
        if self.description is not None:
            out["description"] = self.description
        if self.access != "read":
            out["security"] = [] if self.access == "open" else _BEARER
        if self.parameters:
            out["parameters"] = [parameters[name] for name in self.parameters]
        out["responses"] = {**self.responses, **self.errors}
        return out


_TEXT = {"type": "string", "description": "stored value"}
_BODY_HEADERS = {
    "X-Content-Hash": {"description": "xxh3-128 of the body, hex", "schema": _TEXT},
    "X-Url-Key": {"description": "int63 url_key (schemas/URL_KEYS.md)", "schema": _TEXT},
    "X-Fetched-At": {"description": "when the page was fetched, ISO 8601 UTC", "schema": _TEXT},
}

_OPERATIONS = (
    _Operation(
        "/v1/domain/{domain}", "get", "getDomain", "Datasets containing a domain, with exact URL counts",
        {"200": _response("the datasets (visible to this token)", "DomainDatasets")},
        _only(_INDEX_ERRORS, "400", "404", "503", "401", "502"),
        parameters=("domain",),
    ),
    _Operation(
        "/v1/domain/{domain}/datasets/{dataset_id}/urls", "get", "getDomainDatasetUrls",
        "A page of a domain's URLs in one dataset, ordered by URL",
        {"200": _response("one page", "UrlPage")}, _INDEX_ERRORS,
        description=(
            "`next` is the path of the next page (null on the last): it names `index_version`, so a "
            "paging client reads every page from the version its first page came from."
        ),
        parameters=("domain", "dataset_id", *_PAGE, "version"),
    ),
    _Operation(
        "/v1/url", "get", "lookupUrl", "Canonical form, url_key, domain and the datasets containing a URL",
        {"200": _response("the lookup (datasets may be empty)", "UrlLookup")},
        _only(_INDEX_ERRORS, "400", "503", "401", "502"),
        parameters=("url",),
        description=(
            "Any raw form (a seed line, an href as written) is canonicalized first; `url` is its "
            "canonical form. When the crawl recorded redirects from `url`, `redirects` lists the hops "
            "in order and `canonical_url` is where the chain ends (`canonical_datasets` hold it); "
            "without redirects both equal `url` and `datasets`. `raw_form` is the text the URL was "
            "first seen as when that was not canonical. Redirects and raw forms are shown to tokens "
            "that see every dataset (or are granted the reserved alias datasets, ADR 024)."
        ),
    ),
    _Operation(
        "/healthz", "get", "health", "Is an index version loaded, and which",
        {"200": _response("serving", "Health"), "503": _response("no index loaded", "Health")}, access="open",
    ),
    _Operation(
        "/metrics", "get", "metrics", "Prometheus metrics (text exposition format)",
        {"200": _body("metrics", "text/plain", {"type": "string"})}, access="open",
    ),
    _Operation(
        "/openapi.json", "get", "openapi", "This document",
        {"200": _body("OpenAPI 3 document", _JSON, {"type": "object"})}, access="open",
    ),
    _Operation(
        "/v1/content", "get", "readContent", "The stored body of a URL, byte for byte, with its stored content type",
        {
            "200": _body(
                "the body (served with `Content-Security-Policy: sandbox`)", "*/*",
                {"type": "string", "format": "binary"}, headers=_BODY_HEADERS,
            ),
            "404": _error("no content is stored for this URL (never stored, or deleted)"),
            "502": _error("the stored record is damaged and quarantined: it is not served"),
        },
        _CONTENT_ERRORS, parameters=("stored_url",), part="content",
    ),
    _Operation(
        "/v1/content", "delete", "deleteContent", "Delete the stored content of a URL (effective at once)",
        {"204": {"description": "deleted"}, "404": _error("no content is stored for this URL")},
        _CONTENT_ERRORS, parameters=("stored_url",), access="write", part="content",
    ),
    _Operation(
        "/v1/content/search", "get", "searchContent",
        "Stored pages by domain, path prefix and/or tag (at least one), in URL order",
        {"200": _response("one page of matches", "ContentPage", versioned=False)}, _CONTENT_ERRORS,
        parameters=("domain_filter", "path_prefix", "tag_filter", *_PAGE), part="content",
    ),
    *(
        _Operation(
            "/v1/content/tags", method, f"{verb}ContentTags",
            f"{verb.capitalize()} tags of a stored page (a write: needs a token with the delete right)",
            {
                "200": _response("the page's tags after the change", "ContentTags", versioned=False),
                "404": _error("no content is stored for this URL"),
            },
            _CONTENT_ERRORS, parameters=("stored_url", "tags"), access="write", part="content",
        )
        for method, verb in (("put", "add"), ("delete", "remove"))
    ),
    _Operation(
        "/v1/status", "get", "status",
        "What the /status page shows: crawl progress, lag and rates per consumer group, errors "
        "by kind, top domains, store and index sizes",
        {
            "200": _body("the status document", _JSON, {"type": "object", "required": ["unavailable"]}),
            "403": _error("the token is limited to some datasets: the status needs '*'"),
            "503": _error("this API was started without a status collector"),
        },
        _only(_INDEX_ERRORS, "401"), part="status",
        description=(
            "Each part the API cannot read is null and named in `unavailable` (ADR 020). It aggregates "
            "every dataset, so a token limited to some datasets gets 403."
        ),
    ),
    _Operation(
        "/status", "get", "statusPage", "The status page (HTML; it polls /v1/status every 2 s)",
        {"200": _body("the page", "text/html", {"type": "string"})}, access="open", part="status",
    ),
)


# ---------------------------------------------------------------------------------------------
# Response bodies

_VERSION = {"type": "string", "description": "index version the answer was computed from"}
_SCHEMAS: dict[str, Any] = {
    "DatasetCount": {
        "type": "object",
        "required": ["dataset_id", "url_count"],
        "properties": {
            "dataset_id": {"type": "integer", "minimum": 0},
            "url_count": {"type": "integer", "minimum": 0, "description": "exact, deduplicated"},
        },
    },
    "DomainDatasets": {
        "type": "object",
        "required": ["domain", "domain_id", "datasets", "index_version"],
        "properties": {
            "domain": {"type": "string"},
            "domain_id": {
                "type": "integer",
                "minimum": 0,
                "description": "rank in this version's domain dictionary",
            },
            "datasets": {"type": "array", "items": _ref("DatasetCount")},
            "index_version": _VERSION,
        },
    },
    "UrlItem": {
        "type": "object",
        "required": ["url_key", "url", "ts"],
        "properties": {
            "url_key": {"type": "integer", "minimum": 0, "description": "int63, schemas/URL_KEYS.md"},
            "url": {"type": "string"},
            "ts": {"type": "string", "nullable": True, "description": "ISO 8601 UTC, null when unknown"},
        },
    },
    "UrlPage": {
        "type": "object",
        "required": ["domain", "dataset_id", "total", "items", "next_offset", "next", "index_version"],
        "properties": {
            "domain": {"type": "string"},
            "dataset_id": {"type": "integer", "minimum": 0},
            "total": {"type": "integer", "minimum": 0, "description": "exact URL count of the pair"},
            "items": {"type": "array", "items": _ref("UrlItem")},
            "next_offset": {"type": "integer", "minimum": 0, "nullable": True},
            "next": {"type": "string", "nullable": True,
                     "description": "path and query of the next page, pinned to index_version; null on the last"},
            "index_version": _VERSION,
        },
    },
    "UrlLookup": {
        "type": "object",
        "required": ["url", "url_key", "domain", "datasets", "index_version"],
        "properties": {
            "url": {"type": "string", "description": "canonical form"},
            "url_key": {"type": "integer", "minimum": 0},
            "domain": {"type": "string"},
            "datasets": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "requested_url": {"type": "string", "description": "the `url` parameter as given"},
            "canonical_url": {
                "type": "string",
                "description": "where the recorded redirect chain from `url` ends; `url` when none",
            },
            "canonical_datasets": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0},
                "description": "datasets containing `canonical_url`",
            },
            "redirects": {"type": "array", "items": _ref("RedirectHop"), "description": "hops, in order"},
            "redirect_end": {
                "type": "string",
                "enum": ["none", "target", "loop", "too_long"],
                "description": (
                    "`none`: no redirect recorded; `target`: `canonical_url` redirects no further; "
                    "`loop`: the last hop returns into the chain; `too_long`: cut after 20 hops"
                ),
            },
            "raw_form": {
                "type": "object",
                "nullable": True,
                "required": ["raw", "source"],
                "properties": {
                    "raw": {"type": "string", "description": "the text as first seen"},
                    "source": {"type": "string", "description": "`seed`, `migrate`, ..."},
                },
                "description": "the first recorded non-canonical form of `url`; null when none",
            },
            "index_version": _VERSION,
        },
    },
    "RedirectHop": {
        "type": "object",
        "required": ["url", "location", "status"],
        "properties": {
            "url": {"type": "string", "description": "the redirecting URL (canonical)"},
            "location": {"type": "string", "description": "the canonical target"},
            "status": {
                "type": "integer",
                "nullable": True,
                "minimum": 300,
                "maximum": 399,
                "description": "null when the source did not record it (a migrated row)",
            },
            "location_raw": {"type": "string", "description": "the Location header as written, if different"},
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["ok", "unavailable"]},
            "index_version": _VERSION,
            "domains": {"type": "integer", "minimum": 0},
            "datasets": {"type": "integer", "minimum": 0},
            "message": {"type": "string"},
        },
    },
    "ContentItem": {
        "type": "object",
        "required": ["url", "url_key", "content_type", "title", "size", "fetched_at", "tags"],
        "properties": {
            "url": {"type": "string", "description": "canonical form"},
            "url_key": {"type": "integer", "minimum": 0},
            "content_type": {"type": "string", "nullable": True},
            "title": {"type": "string", "nullable": True},
            "size": {"type": "integer", "minimum": 0, "description": "body size in bytes, uncompressed"},
            "fetched_at": {"type": "string", "nullable": True, "description": "ISO 8601 UTC"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    },
    "ContentTags": {
        "type": "object",
        "required": ["url", "tags"],
        "properties": {
            "url": {"type": "string", "description": "canonical form"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "the tags after the change"},
        },
    },
    "ContentPage": {
        "type": "object",
        "required": ["filters", "total", "items", "next_offset"],
        "properties": {
            "filters": {
                "type": "object",
                "description": "the filters applied (domain reduced to the registered domain)",
                "properties": {
                    "domain": {"type": "string", "nullable": True},
                    "path_prefix": {"type": "string", "nullable": True},
                    "tag": {"type": "string", "nullable": True},
                },
            },
            "total": {"type": "integer", "minimum": 0, "description": "exact count of matching URLs"},
            "items": {"type": "array", "items": _ref("ContentItem")},
            "next_offset": {"type": "integer", "minimum": 0, "nullable": True},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error", "message", "request_id"],
        "properties": {
            "error": {"type": "string", "description": "stable machine code, e.g. invalid_limit"},
            "message": {"type": "string"},
            "request_id": {"type": "string"},
            "index_version": _VERSION,
        },
    },
}


def openapi_document(
    *, max_limit: int, default_limit: int, anonymous_reads: bool, content: bool = False, status: bool = False
) -> dict[str, Any]:
    parameters = _parameters(max_limit, default_limit)
    listed = {"index": True, "content": content, "status": status}
    paths: dict[str, Any] = {}
    for operation in _OPERATIONS:
        if listed[operation.part]:
            paths.setdefault(operation.path, {})[operation.method] = operation.document(parameters)
    bearer = {
        "type": "http",
        "scheme": "bearer",
        "description": "a token of the API's tokens file (README: Tokens); deletes need one granted 'delete'",
    }
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": "crawlstream query API",
            "version": "1",
            "description": "Which datasets contain domain D, and which URLs of D are in dataset N.",
        },
        "paths": paths,
        "components": {"schemas": _SCHEMAS, "securitySchemes": {"bearer": bearer}},
        # Reads: a token, or none where anonymous reads are allowed (the empty requirement).
        "security": [*_BEARER, {}] if anonymous_reads else _BEARER,
    }
    return copy.deepcopy(doc)  # the declarations are module constants: each caller gets its own document
