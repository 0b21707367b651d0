"""The query API: domain -> datasets -> URLs over HTTP (aiohttp), from pinned index versions.

``create_app(reader, ...)`` builds the application from plain collaborators (tests);
``from_settings(settings)`` and ``serve(settings)`` are what ``crawlstream serve`` and the
``query-api`` service run. With a ``ContentStore`` it also reads, deletes and searches
stored pages (``/v1/content``, ``/v1/content/search``). Response shapes, status codes and
ACL rules: the ``_app`` and ``_content`` docstrings, the OpenAPI document at
``/openapi.json`` and services/query_api/README.md.
"""

from crawlstream.api._acl import Acl, Grant
from crawlstream.api._app import REQUEST_ID_HEADER, RUNNER_OPTIONS, VERSION_HEADER, create_app, from_settings, serve
from crawlstream.api._content import CONTENT_HASH_HEADER, FETCHED_AT_HEADER, URL_KEY_HEADER, ContentApi
from crawlstream.api._inputs import ApiError, reduce_to_domain
from crawlstream.api._metrics import ApiMetrics
from crawlstream.api._openapi import openapi_document

__all__ = [
    "CONTENT_HASH_HEADER",
    "FETCHED_AT_HEADER",
    "REQUEST_ID_HEADER",
    "RUNNER_OPTIONS",
    "URL_KEY_HEADER",
    "VERSION_HEADER",
    "Acl",
    "ApiError",
    "ApiMetrics",
    "ContentApi",
    "Grant",
    "create_app",
    "from_settings",
    "openapi_document",
    "reduce_to_domain",
    "serve",
]
