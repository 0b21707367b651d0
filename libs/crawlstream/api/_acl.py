"""Per-dataset access control by bearer token (seed §8).

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
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from crawlstream.errors import ConfigError

__all__ = ["Acl", "Grant"]

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


OPEN = Grant(None, "open", delete=True)
"""The grant of every request when no ACL is configured (everything, deletion included)."""


def _fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:8]


class Acl:
    """Token -> allowed datasets. Build with :meth:`from_mapping` or :meth:`from_file`."""

    def __init__(self, grants: Mapping[str, frozenset[int] | None], *, deleters: Iterable[str] = ()) -> None:
        """``deleters``: the tokens (keys of ``grants``) that may also delete stored content."""
        if not grants:
            raise ConfigError("an ACL needs at least one token; leave tokens_file unset for an open API")
        may_delete = set(deleters)
        self._tokens: list[tuple[bytes, Grant]] = [
            (token.encode(), Grant(datasets, _fingerprint(token), delete=token in may_delete))
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
            where = f"{source}: token {_fingerprint(str(token))} (sha256 prefix)"
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

    @classmethod
    def from_file(cls, path: Path) -> Acl:
        try:
            doc = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(
                f"api tokens_file {path}: cannot read it ({exc.strerror}); fix the path or unset it"
            ) from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"api tokens_file {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        acl = cls.from_mapping(doc, source=f"api tokens_file {path}")
        logger.info("API ACL loaded from %s: %d tokens", path, len(acl))
        return acl

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
