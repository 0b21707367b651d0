"""Access control by bearer token (seed §8): who may read which datasets, and who may delete.

:class:`Access` decides every ``/v1`` request before any other work is done. A request
without a token may read (every dataset, never write) only when the API allows anonymous
reads (no tokens file configured and a loopback-only bind: ``from_settings``); writes and
deletes always need a token granted ``"delete": true``.

The tokens file is JSON ``{"<token>": [dataset_id, ...] | "*"}``; a token's value may also be
``{"datasets": [dataset_id, ...] | "*", "delete": true}`` to grant the right to delete stored
content (``DELETE /v1/content``), which the list form never grants. A request presents
``Authorization: Bearer <token>``; the token's grant filters dataset ids out of answers.
Tokens are compared in constant time against every configured token (no early exit, so the
time taken does not reveal which token or how many characters matched) and never logged:
only a short, non-reversible fingerprint is, to tell grants apart in logs.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from crawlstream.api._inputs import ApiError
from crawlstream.errors import ConfigError

__all__ = ["ANONYMOUS", "GRANT_KEY", "Access", "Acl", "Grant", "fingerprint"]

logger = logging.getLogger(__name__)

_UINT32_MAX = 2**32 - 1


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token may see: every dataset (``datasets is None``) or the listed ones;
    ``delete``: whether it may delete stored content."""

    datasets: frozenset[int] | None
    fingerprint: str
    delete: bool = False

    def allows(self, dataset_id: int) -> bool:
        return self.datasets is None or dataset_id in self.datasets

    def filter(self, dataset_ids: Iterable[int]) -> list[int]:
        return [d for d in dataset_ids if self.allows(d)]


GRANT_KEY: web.RequestKey[Grant] = web.RequestKey("crawlstream_grant", Grant)
"""Where the middleware leaves a ``/v1`` request's :class:`Grant` for the handlers."""
ANONYMOUS = Grant(None, "anonymous", delete=False)
"""The grant of a request without a token where anonymous reads are allowed: read everything."""


def fingerprint(token: str) -> str:
    """A short, non-reversible name for a token, for logs and ``crawlstream tokens list``."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


class Acl:
    """Token -> allowed datasets. Build with :meth:`from_mapping` (or a ``TokensFile``)."""

    def __init__(self, grants: Mapping[str, frozenset[int] | None], *, deleters: Iterable[str] = ()) -> None:
        """``deleters``: the tokens (keys of ``grants``) that may also delete stored content."""
        if not grants:
            raise ConfigError("a tokens file needs at least one token (`crawlstream tokens add`)")
        may_delete = set(deleters)
        self._tokens: list[tuple[bytes, Grant]] = [
            (token.encode(), Grant(datasets, fingerprint(token), delete=token in may_delete))
            for token, datasets in grants.items()
        ]

    def __len__(self) -> int:
        return len(self._tokens)

    @classmethod
    def from_mapping(cls, doc: object, *, source: str = "ACL") -> Acl:
        """Validate the JSON document shape; ConfigError names the offending token's fingerprint."""
        if not isinstance(doc, dict):
            raise ConfigError(
                f"{source}: expected a JSON object {{token: [dataset ids] | '*'}}, found {type(doc).__name__}"
            )
        grants: dict[str, frozenset[int] | None] = {}
        deleters: list[str] = []
        for token, entry in doc.items():
            where = f"{source}: token {fingerprint(str(token))} (sha256 prefix)"
            if not isinstance(token, str) or not token or token != token.strip():
                raise ConfigError(f"{where}: a token must be a non-empty string without surrounding spaces")
            value = entry
            if isinstance(entry, dict):
                unknown = set(entry) - {"datasets", "delete"}
                if unknown or "datasets" not in entry or not isinstance(entry.get("delete", False), bool):
                    raise ConfigError(
                        f"{where}: expected {{'datasets': [dataset ids] | '*', 'delete': true | false}}, "
                        f"found keys {sorted(map(str, entry))} and delete={entry.get('delete')!r}"
                    )
                value = entry["datasets"]
                if entry.get("delete", False):
                    deleters.append(token)
            if value == "*":
                grants[token] = None
                continue
            if not isinstance(value, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _UINT32_MAX for d in value
            ):
                raise ConfigError(f"{where}: expected '*' or a list of dataset ids (0..2^32-1), found {value!r}")
            grants[token] = frozenset(value)
        return cls(grants, deleters=deleters)

    def grants(self) -> list[Grant]:
        return [grant for _, grant in self._tokens]

    def authorize(self, authorization: str | None) -> Grant | None:
        """The grant for an ``Authorization`` header value, or None (missing, malformed, unknown)."""
        if not authorization:
            return None
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        candidate = presented.strip().encode("utf-8", "surrogatepass")
        found: Grant | None = None
        for token, grant in self._tokens:  # every token is compared: constant time in the match
            if hmac.compare_digest(candidate, token):
                found = grant
        return found


class _AclSource(Protocol):
    @property
    def path(self) -> object: ...

    def current(self) -> Acl: ...


class Access:
    """The decision on one request, made before any other work: 401 without a usable token
    (unless anonymous reads are allowed and it only reads), 403 for a write by a token
    without the delete right. ``tokens``: an :class:`Acl`, a reloading ``TokensFile``, or
    None (no token exists: reads only)."""

    def __init__(self, tokens: Acl | _AclSource | None, *, anonymous_reads: bool) -> None:
        if tokens is None and not anonymous_reads:
            raise ConfigError("an API without tokens must allow anonymous reads, or nothing could be asked")
        self._tokens = tokens
        self.anonymous_reads = anonymous_reads

    @property
    def source(self) -> str:
        """Where the tokens come from, for the start-up log line."""
        tokens = self._tokens
        return "none" if tokens is None else "in memory" if isinstance(tokens, Acl) else str(tokens.path)

    def _acl(self) -> Acl | None:
        tokens = self._tokens
        return tokens if tokens is None or isinstance(tokens, Acl) else tokens.current()

    def decide(self, authorization: str | None, *, write: bool) -> Grant:
        if authorization:
            acl = self._acl()
            grant = acl.authorize(authorization) if acl is not None else None
            if grant is None:
                raise ApiError(
                    401, "unauthorized", "the bearer token is unknown (or the header is not 'Bearer <token>')"
                )
        elif self.anonymous_reads and not write:
            return ANONYMOUS
        elif write:
            raise ApiError(
                401,
                "unauthorized",
                "writes and deletes need 'Authorization: Bearer <token>' with a token granted 'delete': true",
            )
        else:
            raise ApiError(
                401, "unauthorized", "expected the header 'Authorization: Bearer <token>' with a known token"
            )
        if write and not grant.delete:
            raise ApiError(403, "forbidden", "this token may not write or delete: it needs 'delete': true")
        return grant
