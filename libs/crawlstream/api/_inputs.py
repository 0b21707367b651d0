"""Validation of request inputs: pure functions, no I/O; every rejection is an ``ApiError``.

Anything a client can type is checked here before it reaches the index, so user input can
only ever produce a 4xx (never a 500).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from crawlstream.errors import InvalidUrl
from crawlstream.urls import CanonicalUrl, canonicalize

__all__ = [
    "MAX_DATASET_ID",
    "MAX_OFFSET",
    "ApiError",
    "format_ts",
    "has_control_chars",
    "parse_dataset_id",
    "parse_page",
    "parse_url",
    "parse_version",
    "reduce_to_domain",
]

MAX_DATASET_ID = 2**32 - 1  # dataset ids are UInt32 (seed §1.2)
MAX_OFFSET = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,20}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ApiError(Exception):
    """A response other than 200: HTTP status, a stable machine code and a readable message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.index_version: str | None = None  # set when raised while a version was pinned


def has_control_chars(text: str) -> bool:
    """C0 controls or DEL: what a filter or tag may not hold (they would break logs and
    headers); other Unicode is fine."""
    return any(ord(c) < 0x20 or c == "\x7f" for c in text)


def _bad(code: str, message: str) -> ApiError:
    return ApiError(400, code, message)


@lru_cache(maxsize=4096)  # pure; rejections raise and are not cached
def reduce_to_domain(raw: str) -> str:
    """The registered domain (eTLD+1, lowercase punycode) of a host or URL a client typed.

    ``www.Example.co.uk``, ``https://x.example.com/a`` and ``bücher.de`` all work: a value
    with ``/`` or ``://`` is read as a URL (``http://`` assumed when it has no scheme),
    anything else as a host (a ``:port`` is allowed). The rules are the lake's own
    (``canonicalize``), so a host that is a public suffix alone stays itself, as it is stored.
    """
    text = raw.strip()
    if not text:
        raise _bad("invalid_domain", "expected a domain, host or URL in the path, found an empty value")
    looks_like_url = "/" in text or "\\" in text or "://" in text
    candidate = text if "://" in text or text.startswith("//") else f"http://{text}"
    if not looks_like_url:
        candidate += "/"
    try:
        canon = canonicalize(candidate)
    except InvalidUrl as exc:
        raise _bad(
            "invalid_domain",
            f"expected a domain (example.com), host (www.example.co.uk) or http(s) URL, found {_preview(raw)}: {exc}",
        ) from None
    return canon.domain


def parse_url(raw: str | None) -> CanonicalUrl:
    if raw is None or not raw.strip():
        raise _bad("invalid_url", "expected the query parameter url=<http(s) URL>, found none")
    try:
        return canonicalize(raw)
    except InvalidUrl as exc:
        raise _bad("invalid_url", f"expected an absolute http(s) URL, found {_preview(raw)}: {exc}") from None


def _int(name: str, raw: str, lo: int, hi: int) -> int:
    if not _DIGITS.fullmatch(raw):
        raise _bad(f"invalid_{name}", f"expected {name} to be a decimal integer in {lo}..{hi}, found {_preview(raw)}")
    value = int(raw)
    if not lo <= value <= hi:
        raise _bad(f"invalid_{name}", f"expected {name} in {lo}..{hi}, found {value}")
    return value


def parse_dataset_id(raw: str) -> int:
    return _int("dataset_id", raw, 0, MAX_DATASET_ID)


def _single(query: Mapping[str, str] | object, name: str) -> str | None:
    getall = getattr(query, "getall", None)
    values = list(getall(name, [])) if getall is not None else []
    if len(values) > 1:
        raise _bad(f"invalid_{name}", f"expected {name} at most once, found it {len(values)} times")
    return values[0] if values else None


def parse_page(query: object, *, default_limit: int, max_limit: int) -> tuple[int, int]:
    """(offset, limit) from a query multidict. A limit above ``max_limit`` is a 400, not clamped:
    a client asking for more than it can get should learn so rather than silently get less."""
    raw_offset = _single(query, "offset")
    raw_limit = _single(query, "limit")
    offset = 0 if raw_offset is None else _int("offset", raw_offset, 0, MAX_OFFSET)
    limit = default_limit if raw_limit is None else _int("limit", raw_limit, 1, max_limit)
    return offset, limit


_VERSION_OK = re.compile(r"[A-Za-z0-9._-]{1,64}")


def parse_version(query: object) -> str | None:
    """The ``version`` a paging client pins (the first page's ``index_version``), or None."""
    raw = _single(query, "version")
    if raw is not None and not _VERSION_OK.fullmatch(raw):
        raise _bad("invalid_version", f"expected version to be an index version (as in index_version), "
                                      f"found {_preview(raw)}")
    return raw


def query_param(query: object, name: str) -> str | None:
    return _single(query, name)


@lru_cache(maxsize=4096)
def _day(days: int) -> str | None:
    try:
        return (_EPOCH + timedelta(days=days)).strftime("%Y-%m-%dT")
    except OverflowError:
        return None


def format_ts(ts_ms: int | None) -> str | None:
    """ISO 8601 UTC with milliseconds (``2024-06-14T10:00:00.000Z``), or None when unknown or
    out of range. The date is cached per day and the time is integer arithmetic: a page formats
    100 of these (~4 µs each through datetime + strftime)."""
    if ts_ms is None:
        return None
    days, ms = divmod(ts_ms, 86_400_000)
    day = _day(days)
    if day is None:
        return None
    s, ms = divmod(ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return f"{day}{h:02d}:{m:02d}:{s:02d}.{ms:03d}Z"


def _preview(raw: str, limit: int = 80) -> str:
    text = raw if len(raw) <= limit else raw[:limit] + "..."
    return repr(text)
