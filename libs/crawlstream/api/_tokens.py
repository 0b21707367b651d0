"""The API's tokens file on disk: created with one admin token when none is configured, edited
by ``crawlstream tokens``, and re-read by a running API when it changes, so tokens rotate
without a restart.

The file is written whole and atomically (``crawlstream.durable.write_atomically``: a 0600
temporary file in the same directory, fsync, rename), so a reader never sees half a file, and
is never readable by other users: it holds secrets. A running API checks the file's identity
(inode, size, mtime) at most once per ``RELOAD_CHECK_S`` and keeps its current tokens if the
new file is invalid (logged and counted), so a typo never locks everyone out or opens the API.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crawlstream.api._acl import Acl, fingerprint
from crawlstream.durable import write_atomically
from crawlstream.errors import ConfigError

__all__ = [
    "RELOAD_CHECK_S",
    "TokenInfo",
    "TokensFile",
    "add_token",
    "default_tokens_path",
    "describe_tokens",
    "ensure_tokens_file",
    "new_token",
    "revoke_token",
]

logger = logging.getLogger(__name__)

RELOAD_CHECK_S = 1.0
_ADMIN = {"datasets": "*", "delete": True}


def default_tokens_path(data_dir: Path) -> Path:
    """Where the API keeps its tokens when ``api.tokens_file`` is not set."""
    return Path(data_dir) / "api" / "tokens.json"


def new_token() -> str:
    """256 random bits, URL-safe, with a prefix that secret scanners and humans recognise."""
    return "cst_" + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """What ``crawlstream tokens list`` shows of a token: never the token itself."""

    fingerprint: str
    datasets: str  # "*" or comma-separated ids
    delete: bool


def _read_doc(path: Path) -> dict[str, object]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"tokens file {path} does not exist; create it with `crawlstream tokens add`") from None
    except OSError as exc:
        raise ConfigError(f"tokens file {path}: cannot read it ({exc.strerror})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tokens file {path}: not valid JSON ({exc})") from exc
    Acl.from_mapping(doc, source=f"tokens file {path}")  # validates; ConfigError names the token
    assert isinstance(doc, dict)
    return doc


def _write_doc(path: Path, doc: dict[str, object], *, exclusive: bool = False) -> None:
    """Atomically replace (or, ``exclusive``, create) ``path`` with ``doc``, mode 0600."""
    Acl.from_mapping(doc, source=f"tokens file {path}")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    write_atomically(path, data, mode=0o600, exclusive=exclusive)


def ensure_tokens_file(path: Path) -> bool:
    """Create ``path`` holding one admin token (every dataset, delete) unless it exists.

    Returns whether it was created. Safe against a concurrent start (only one creates it).
    """
    if path.exists():
        return False
    try:
        _write_doc(path, {new_token(): dict(_ADMIN)}, exclusive=True)
    except FileExistsError:
        return False
    return True


def add_token(path: Path, datasets: list[int] | None, *, delete: bool) -> str:
    """Add a new token with these rights (``datasets=None``: every dataset); returns the token.
    Creates the file if it does not exist."""
    doc = _read_doc(path) if path.exists() else {}
    token = new_token()
    doc[token] = {"datasets": "*" if datasets is None else sorted(set(datasets)), "delete": delete}
    _write_doc(path, doc)
    return token


def revoke_token(path: Path, token_fingerprint: str) -> None:
    """Remove the token with this fingerprint (``crawlstream tokens list`` shows them)."""
    doc = _read_doc(path)
    matches = [t for t in doc if fingerprint(t) == token_fingerprint]
    if not matches:
        raise ConfigError(f"tokens file {path}: no token has fingerprint {token_fingerprint!r} (see `tokens list`)")
    if len(matches) == len(doc):
        raise ConfigError(
            f"tokens file {path}: {token_fingerprint} is the last token; add its replacement first "
            "(`crawlstream tokens add`), then revoke it"
        )
    for token in matches:
        del doc[token]
    _write_doc(path, doc)


def describe_tokens(path: Path) -> list[TokenInfo]:
    acl = Acl.from_mapping(_read_doc(path), source=f"tokens file {path}")
    return [
        TokenInfo(g.fingerprint, "*" if g.datasets is None else ",".join(map(str, sorted(g.datasets))), g.delete)
        for g in acl.grants()
    ]


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class TokensFile:
    """The :class:`Acl` of a tokens file, re-read when the file changes.

    Start-up fails on a missing or invalid file (ConfigError); later, an invalid or vanished
    file keeps the tokens last loaded (logged once per change, ``on_reload_failure`` called).
    """

    def __init__(
        self,
        path: Path,
        *,
        check_interval_s: float = RELOAD_CHECK_S,
        on_reload_failure: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._interval = check_interval_s
        self.on_reload_failure = on_reload_failure
        self._clock = clock
        self._lock = threading.Lock()
        st = self._stat()
        if st is None:
            raise ConfigError(f"api tokens_file {path} does not exist; create it with `crawlstream tokens add`")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning(
                "tokens file %s is readable by other users (mode %o): chmod 600 it", path, stat.S_IMODE(st.st_mode)
            )
        self._seen: tuple[int, int, int, int] | None = _identity(st)
        self._acl = self._load()
        self._checked = clock()

    def _stat(self) -> os.stat_result | None:
        try:
            return self.path.stat()
        except OSError:
            return None

    def _load(self) -> Acl:
        return Acl.from_mapping(_read_doc(self.path), source=f"api tokens_file {self.path}")

    def current(self) -> Acl:
        """The tokens now in force (at most ``check_interval_s`` behind the file)."""
        now = self._clock()
        if now - self._checked < self._interval:
            return self._acl
        with self._lock:
            if now - self._checked < self._interval:
                return self._acl
            self._checked = now
            st = self._stat()
            seen = _identity(st) if st is not None else None
            if seen == self._seen:
                return self._acl
            self._seen = seen
            try:
                self._acl = self._load()
            except ConfigError as exc:
                logger.error("tokens file changed but was not loaded (the previous tokens stay in force): %s", exc)
                if self.on_reload_failure is not None:
                    self.on_reload_failure()
            else:
                logger.info("tokens file %s reloaded: %d tokens", self.path, len(self._acl))
        return self._acl
