"""The query API: domain -> datasets -> URLs over HTTP (aiohttp), from pinned index versions.

``create_app(reader, ...)`` builds the application from plain collaborators (tests);
``from_settings(settings)`` and ``serve(settings)`` are what ``crawlstream serve`` and the
``query-api`` service run. Response shapes, status codes and ACL rules: ``_app`` docstring,
the OpenAPI document at ``/openapi.json`` and services/query_api/README.md.
"""

from crawlstream.api._acl import Acl, Grant
from crawlstream.api._app import REQUEST_ID_HEADER, RUNNER_OPTIONS, VERSION_HEADER, create_app, from_settings, serve
from crawlstream.api._inputs import ApiError, reduce_to_domain
from crawlstream.api._metrics import ApiMetrics
from crawlstream.api._openapi import openapi_document

__all__ = [
    "REQUEST_ID_HEADER",
    "RUNNER_OPTIONS",
    "VERSION_HEADER",
    "Acl",
    "ApiError",
    "ApiMetrics",
    "Grant",
    "create_app",
    "from_settings",
    "openapi_document",
    "reduce_to_domain",
    "serve",
]
