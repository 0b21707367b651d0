"""The OpenAPI 3.0 document of the query API (pure: built from the app's parameters).

It is generated from the same limits the handlers enforce (``max_limit``, the id ranges),
and declares bearer auth only when an ACL is configured, so a property-based client
(schemathesis) can hold the server to it.
"""

from __future__ import annotations

from typing import Any

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


def openapi_document(*, max_limit: int, default_limit: int, secured: bool) -> dict[str, Any]:
    errors = {
        "400": _response("invalid input; `message` says what was expected", "Error"),
        "404": _response("unknown domain or dataset (or not visible to this token)", "Error"),
        "503": _response("no index is loaded yet, or the request timed out", "Error"),
    }
    if secured:
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
                "parameters": [
                    {"name": "url", "in": "query", "required": True, "schema": {"type": "string", "minLength": 1}}
                ],
                "responses": {
                    "200": _response("the lookup (datasets may be empty)", "UrlLookup"),
                    "400": errors["400"],
                    "503": errors["503"],
                    **({"401": errors["401"]} if secured else {}),
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
                "index_version": version,
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
    if secured:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
