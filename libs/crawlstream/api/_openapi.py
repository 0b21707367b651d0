"""The OpenAPI 3.0 document of the query API (pure: built from the app's parameters).

It is generated from the same limits the handlers enforce (``max_limit``, the id ranges),
and declares bearer auth on every ``/v1`` operation (optional for reads where anonymous reads
are allowed; always required for deletes), so a property-based client (schemathesis) can hold
the server to it. The content routes are listed only when a content
store is configured (without one they exist but answer 503).
"""

from __future__ import annotations

from typing import Any

from crawlstream.api._content import MAX_DOMAIN_CHARS, MAX_PATH_PREFIX_CHARS, MAX_TAG_CHARS, MAX_TAGS_PER_REQUEST
from crawlstream.api._inputs import MAX_DATASET_ID, MAX_OFFSET

__all__ = ["openapi_document"]

_JSON = "application/json"


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


def openapi_document(
    *, max_limit: int, default_limit: int, anonymous_reads: bool, content: bool = False, status: bool = False
) -> dict[str, Any]:
    errors = {
        "400": _response("invalid input; `message` says what was expected", "Error"),
        "404": _response("unknown domain or dataset (or not visible to this token)", "Error"),
        "503": _response("no index is loaded yet, or the request timed out", "Error"),
    }
    errors["401"] = _response("missing or unknown bearer token", "Error", versioned=False)
    domain_param = {
        "name": "domain",
        "in": "path",
        "required": True,
        "description": (
            "a registered domain, any host under it, or an http(s) URL (percent-encode its `/` as %2F); "
            "reduced to the registered domain (eTLD+1, punycode)"
        ),
        "schema": {"type": "string", "minLength": 1},
    }
    dataset_param = {
        "name": "dataset_id",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_DATASET_ID},
    }
    paths: dict[str, Any] = {
        "/v1/domain/{domain}": {
            "get": {
                "operationId": "getDomain",
                "summary": "Datasets containing a domain, with exact URL counts",
                "parameters": [domain_param],
                "responses": {"200": _response("the datasets (visible to this token)", "DomainDatasets"), **errors},
            }
        },
        "/v1/domain/{domain}/datasets/{dataset_id}/urls": {
            "get": {
                "operationId": "getDomainDatasetUrls",
                "summary": "A page of a domain's URLs in one dataset, ordered by URL",
                "parameters": [
                    domain_param,
                    dataset_param,
                    {
                        "name": "offset",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "description": f"page size; more than {max_limit} is rejected (400), not clamped",
                        "schema": {"type": "integer", "minimum": 1, "maximum": max_limit, "default": default_limit},
                    },
                ],
                "responses": {"200": _response("one page", "UrlPage"), **errors},
            }
        },
        "/v1/url": {
            "get": {
                "operationId": "lookupUrl",
                "summary": "Canonical form, url_key, domain and the datasets containing a URL",
                "description": (
                    "Any raw form (a seed line, an href as written) is canonicalized first; `url` is its "
                    "canonical form. When the crawl recorded redirects from `url`, `redirects` lists the hops "
                    "in order and `canonical_url` is where the chain ends (`canonical_datasets` hold it); "
                    "without redirects both equal `url` and `datasets`. `raw_form` is the text the URL was "
                    "first seen as when that was not canonical. Redirects and raw forms are shown to tokens "
                    "that see every dataset (or are granted the reserved alias datasets, ADR 024)."
                ),
                "parameters": [
                    {"name": "url", "in": "query", "required": True, "schema": {"type": "string", "minLength": 1}}
                ],
                "responses": {
                    "200": _response("the lookup (datasets may be empty)", "UrlLookup"),
                    "400": errors["400"],
                    "503": errors["503"],
                    "401": errors["401"],
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Is an index version loaded, and which",
                "security": [],
                "responses": {
                    "200": _response("serving", "Health"),
                    "503": _response("no index loaded", "Health"),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (text exposition format)",
                "security": [],
                "responses": {
                    "200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "security": [],
                "responses": {
                    "200": {"description": "OpenAPI 3 document", "content": {_JSON: {"schema": {"type": "object"}}}}
                },
            }
        },
    }
    if content:
        paths.update(_content_paths(max_limit=max_limit, default_limit=default_limit))
    if status:  # documented when the API has a status collector (else /v1/status answers 503)
        paths.update(_status_paths(errors["401"]))
    version = {"type": "string", "description": "index version the answer was computed from"}
    schemas: dict[str, Any] = {
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
                "index_version": version,
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
            "required": ["domain", "dataset_id", "total", "items", "next_offset", "index_version"],
            "properties": {
                "domain": {"type": "string"},
                "dataset_id": {"type": "integer", "minimum": 0},
                "total": {"type": "integer", "minimum": 0, "description": "exact URL count of the pair"},
                "items": {"type": "array", "items": _ref("UrlItem")},
                "next_offset": {"type": "integer", "minimum": 0, "nullable": True},
                "index_version": version,
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
                "index_version": version,
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
                "index_version": version,
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
                "index_version": version,
            },
        },
    }
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": "crawlstream query API",
            "version": "1",
            "description": "Which datasets contain domain D, and which URLs of D are in dataset N.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    }
    doc["components"]["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "a token of the API's tokens file (README: Tokens); deletes need one granted 'delete'",
        }
    }
    # Reads: a token, or none where anonymous reads are allowed (the empty requirement).
    doc["security"] = [{"bearer": []}, {}] if anonymous_reads else [{"bearer": []}]
    if content:  # writes need a token, always
        for path, method in (("/v1/content", "delete"), ("/v1/content/tags", "put"), ("/v1/content/tags", "delete")):
            doc["paths"][path][method]["security"] = [{"bearer": []}]
    return doc


def _content_paths(*, max_limit: int, default_limit: int) -> dict[str, Any]:
    def error(description: str) -> dict[str, Any]:
        return _response(description, "Error", versioned=False)

    common = {
        "400": error("invalid input; `message` says what was expected"),
        "503": error("no content store is configured, it cannot be read, or the request timed out"),
    }
    common["401"] = error("missing or unknown bearer token (deletes always need one)")
    common["403"] = error("the token is limited to some datasets (content needs '*'), or may not delete")
    url_param = {
        "name": "url",
        "in": "query",
        "required": True,
        "description": "an absolute http(s) URL; canonicalized as the store does",
        "schema": {"type": "string", "minLength": 1},
    }
    tag_param = {
        "name": "tag",
        "in": "query",
        "required": True,
        "description": "a tag; repeat the parameter for several",
        "style": "form",
        "explode": True,
        "schema": {
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
    }
    text = {"type": "string", "description": "stored value"}
    body_headers = {
        "X-Content-Hash": {"description": "xxh3-128 of the body, hex", "schema": text},
        "X-Url-Key": {"description": "int63 url_key (schemas/URL_KEYS.md)", "schema": text},
        "X-Fetched-At": {"description": "when the page was fetched, ISO 8601 UTC", "schema": text},
    }
    page_params = [
        {
            "name": "offset",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        },
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "description": f"page size; more than {max_limit} is rejected (400), not clamped",
            "schema": {"type": "integer", "minimum": 1, "maximum": max_limit, "default": default_limit},
        },
    ]
    return {
        "/v1/content": {
            "get": {
                "operationId": "readContent",
                "summary": "The stored body of a URL, byte for byte, with its stored content type",
                "parameters": [url_param],
                "responses": {
                    "200": {
                        "description": "the body (served with `Content-Security-Policy: sandbox`)",
                        "headers": body_headers,
                        "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    "404": error("no content is stored for this URL (never stored, or deleted)"),
                    "502": error("the stored record is damaged and quarantined: it is not served"),
                    **common,
                },
            },
            "delete": {
                "operationId": "deleteContent",
                "summary": "Delete the stored content of a URL (effective at once)",
                "parameters": [url_param],
                "responses": {
                    "204": {"description": "deleted"},
                    "404": error("no content is stored for this URL"),
                    **common,
                },
            },
        },
        "/v1/content/search": {
            "get": {
                "operationId": "searchContent",
                "summary": "Stored pages by domain, path prefix and/or tag (at least one), in URL order",
                "parameters": [
                    {
                        "name": "domain",
                        "in": "query",
                        "required": False,
                        "description": "registered domain, host or URL; reduced to the registered domain",
                        "schema": {"type": "string", "maxLength": MAX_DOMAIN_CHARS},
                    },
                    {
                        "name": "path_prefix",
                        "in": "query",
                        "required": False,
                        "description": "prefix of the canonical path and query, starting with '/'",
                        "schema": {"type": "string", "maxLength": MAX_PATH_PREFIX_CHARS},
                    },
                    {
                        "name": "tag",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "maxLength": MAX_TAG_CHARS},
                    },
                    *page_params,
                ],
                "responses": {"200": _response("one page of matches", "ContentPage", versioned=False), **common},
            }
        },
        "/v1/content/tags": {
            method: {
                "operationId": f"{verb}ContentTags",
                "summary": f"{verb.capitalize()} tags of a stored page (a write: needs a token with the delete right)",
                "parameters": [url_param, tag_param],
                "responses": {
                    "200": _response("the page's tags after the change", "ContentTags", versioned=False),
                    "404": error("no content is stored for this URL"),
                    **common,
                },
            }
            for method, verb in (("put", "add"), ("delete", "remove"))
        },
    }


def _status_paths(unauthorized: dict[str, Any]) -> dict[str, Any]:
    return {
        "/v1/status": {
            "get": {
                "operationId": "status",
                "summary": "What the /status page shows: crawl progress, lag and rates per consumer group, errors "
                "by kind, top domains, store and index sizes",
                "description": (
                    "Each part the API cannot read is null and named in `unavailable` (ADR 020). It aggregates "
                    "every dataset, so a token limited to some datasets gets 403."
                ),
                "responses": {
                    "200": {
                        "description": "the status document",
                        "content": {_JSON: {"schema": {"type": "object", "required": ["unavailable"]}}},
                    },
                    "401": unauthorized,
                    "403": _response(
                        "the token is limited to some datasets: the status needs '*'", "Error", versioned=False
                    ),
                    "503": _response("this API was started without a status collector", "Error", versioned=False),
                },
            }
        },
        "/status": {
            "get": {
                "operationId": "statusPage",
                "summary": "The status page (HTML; it polls /v1/status every 2 s)",
                "security": [],
                "responses": {
                    "200": {"description": "the page", "content": {"text/html": {"schema": {"type": "string"}}}}
                },
            }
        },
    }
