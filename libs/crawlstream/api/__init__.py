"""The query API: domain -> datasets -> URLs over HTTP (aiohttp), from pinned index versions.

``create_app(reader, ...)`` builds the application from plain collaborators (tests);
``from_settings(settings)`` and ``serve(settings)`` are what ``crawlstream serve`` and the
``query-api`` service run. With a ``ContentStore`` it also reads, deletes and searches
stored pages (``/v1/content``, ``/v1/content/search``). ``/status`` is the operator's page over
``/v1/status`` (``_status``; its sources: ``crawlstream.status``, ADR 020). Tokens live in a
tokens file (``_tokens``; ``crawlstream tokens``). Response shapes, status codes and access
rules: the ``_app``, ``_acl``, ``_content`` and ``_status`` docstrings, the OpenAPI document at ``/openapi.json``
and services/query_api/README.md.
"""

from crawlstream.api._acl import ANONYMOUS, Access, Acl, Grant, fingerprint
from crawlstream.api._app import (
    REQUEST_ID_HEADER,
    RUNNER_OPTIONS,
    VERSION_HEADER,
    check_port_free,
    create_app,
    from_settings,
    is_loopback,
    serve,
    tokens_from_settings,
)
from crawlstream.api._content import CONTENT_HASH_HEADER, FETCHED_AT_HEADER, URL_KEY_HEADER, ContentApi
from crawlstream.api._inputs import ApiError, reduce_to_domain
from crawlstream.api._metrics import ApiMetrics
from crawlstream.api._openapi import openapi_document
from crawlstream.api._tokens import (
    TokensFile,
    add_token,
    default_tokens_path,
    describe_tokens,
    ensure_tokens_file,
    revoke_token,
)

__all__ = [
    "ANONYMOUS",
    "CONTENT_HASH_HEADER",
    "FETCHED_AT_HEADER",
    "REQUEST_ID_HEADER",
    "RUNNER_OPTIONS",
    "URL_KEY_HEADER",
    "VERSION_HEADER",
    "Access",
    "Acl",
    "ApiError",
    "ApiMetrics",
    "ContentApi",
    "Grant",
    "TokensFile",
    "add_token",
    "check_port_free",
    "create_app",
    "default_tokens_path",
    "describe_tokens",
    "ensure_tokens_file",
    "fingerprint",
    "from_settings",
    "is_loopback",
    "openapi_document",
    "reduce_to_domain",
    "revoke_token",
    "serve",
    "tokens_from_settings",
]
