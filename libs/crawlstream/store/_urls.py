"""How the store names a URL: canonical form, url_key, registered domain, path.

Thin adapter over ``crawlstream.urls`` so tests can inject a key function (forced
collisions) without touching the URL library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["UrlParts", "describe_url", "path_of"]


@dataclass(frozen=True)
class UrlParts:
    url: str
    url_key: int
    domain: str
    path: str


def describe_url(url: str, key_fn: Callable[[str], int] | None = None) -> UrlParts:
    """Canonicalize ``url`` (raises crawlstream.errors.InvalidUrl) and derive its keys."""
    from crawlstream.urls import canonicalize, url_key  # imported late: a sibling package

    canon = canonicalize(url)
    key = key_fn(canon.url) if key_fn is not None else url_key(canon.url)
    return UrlParts(canon.url, key, canon.domain, canon.path_query)


def path_of(url: str) -> str:
    """The path and query of a canonical URL (``UrlParts.path``) without canonicalizing it again:
    everything from the first ``/`` after the authority (which holds none)."""
    start = url.find("://")
    slash = url.find("/", start + 3 if start >= 0 else 0)
    return url[slash:] if slash >= 0 else ""
