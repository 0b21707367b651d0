"""Canonicalize a column of raw URLs at once: the batch form of :func:`canonicalize`.

Batch ingest (``crawlstream ingest``, ``crawlstream spark-ingest``'s Arrow batches) hands a whole
column over in one call; each answer is exactly what :func:`canonicalize` gives for that row.

Two paths (ADR 032). Rows of one conservative shape, for which every rule of ``_canonical``
reduces to column operations, are canonicalized by pyarrow.compute kernels over the whole
column (``_fast_rows``): a lowercase-able ``http(s)`` scheme, a DNS-style ASCII host (no
``xn--``, not ending in a number, within the DNS lengths), an optional port, a path and query
of characters canonicalize keeps as they are and of escapes it keeps as they are (uppercase
hex, not of an unreserved character), and a printable-ASCII fragment. For them canonicalize
only lowercases, drops the fragment, a trailing host dot and a default port, collapses runs of
``/`` and sorts the query's parameters; the registered domain is looked up once per distinct
host. Every other row (and every row the column result would make too long) goes through
:func:`canonicalize` itself, so an invalid row's reason and message are always its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawlstream.errors import InvalidUrl
from crawlstream.urls._canonical import MAX_HOST_LENGTH, MAX_URL_LENGTH, canonicalize
from crawlstream.urls._domains import registered_domain_or_host

__all__ = ["CanonicalColumn", "canonicalize_column"]

_MISSING = ("missing", "no value (null)")
_BLANK = ("blank", "empty line or value")

# The raw characters canonicalize leaves as they are: _CLEAN_PATH_CHARS / _CLEAN_QUERY of
# _canonical without the backslash (which the general parser turns into '/' before a query).
_PATH_CHAR = r"[!$&'()*+,\-./0-9:;=@A-Z\[\]_a-z|~]"
_QUERY_CHAR = r"[!$&()*+,\-./0-9:;=?@A-Z\[\]^_`a-z{|}~]"
# An escape percent-normalization keeps: uppercase hex, not of an unreserved character
# (- . 0-9 A-Z _ a-z ~ are 2D 2E 30-39 41-5A 5F 61-7A 7E, which it would decode).
_KEPT_ESCAPE = r"%(?:[01][0-9A-F]|2[0-9A-CF]|3[A-F]|40|5[B-E]|60|7[B-DF]|[89A-F][0-9A-F])"
_SHAPE = (
    r"^([hH][tT][tT][pP][sS]?)://([A-Za-z0-9_.\-]{1,254})(?::([0-9]{1,5}))?"
    rf"(/(?:{_PATH_CHAR}|{_KEPT_ESCAPE})*)?"
    rf"(?:\?((?:{_QUERY_CHAR}|{_KEPT_ESCAPE})*))?"
    r"(?:#[!-~]*)?$"
)
# A canonical host (lowercase, trailing dot gone) _host_and_domain takes as it is: DNS labels...
_HOST_LABELS = r"^(?:[a-z0-9_\-]{1,63}\.)*[a-z0-9_\-]{1,63}$"
# ... but not one it parses as IPv4 (last label a number) or passes through IDNA.
_ENDS_IN_NUMBER = r"(?:^|\.)(?:[0-9]+|0x[0-9a-f]*)$"
_DOT_SEGMENT = r"/\.\.?(?:/|$)"
# Rows that are canonical as they are: lowercase scheme and host (DNS labels, no trailing dot),
# no port, a path (not empty) without '//' or dot segments, a query without '&', no fragment.
_SEGMENT_CHAR = r"(?:[!$&'()*+,\-.0-9:;=@A-Z\[\]_a-z|~]|" + _KEPT_ESCAPE + ")"
_SEGMENT_START = r"(?:[!$&'()*+,\-0-9:;=@A-Z\[\]_a-z|~]|" + _KEPT_ESCAPE + ")"
_SEGMENT = rf"(?:{_SEGMENT_START}{_SEGMENT_CHAR}*|\.{_SEGMENT_START}{_SEGMENT_CHAR}*|\.\.{_SEGMENT_CHAR}+)"
_CANON = (
    r"^https?://(?:[a-z0-9_\-]{1,63}\.)*[a-z0-9_\-]{1,63}"
    rf"(?:/|(?:/{_SEGMENT})+/?)"
    rf"(?:\?(?:[!$()*+,\-./0-9:;=?@A-Z\[\]^_`a-z{{|}}~]|{_KEPT_ESCAPE})+)?$"
)


@dataclass(frozen=True)
class CanonicalColumn:
    """Row ``i`` is valid when ``reason[i]`` is null: then ``url[i]`` and ``domain[i]`` are its
    canonical URL and registered domain; else both are null and ``reason[i]`` / ``error[i]``
    say why (``blank``, ``missing``, or an ``InvalidUrl.reason``).

    ``fast_rows``: how many rows the column kernels canonicalized (the rest went through
    ``canonicalize`` one by one); benchmarks and tests watch it so the fast path cannot
    quietly stop being taken."""

    url: pa.StringArray
    domain: pa.StringArray
    reason: pa.StringArray
    error: pa.StringArray
    fast_rows: int = 0

    def __len__(self) -> int:
        return len(self.url)

    @property
    def valid(self) -> pa.BooleanArray:
        return self.reason.is_null()


def canonicalize_column(raw: pa.Array | pa.ChunkedArray) -> CanonicalColumn:
    """``canonicalize`` of every row of a string column; a null row is ``missing``, an empty one
    ``blank``. Equal row by row to the per-row loop (``_slow_rows``), only faster."""
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks() if raw.num_chunks else pa.array([], pa.string())
    if not pa.types.is_string(raw.type):
        raw = raw.cast(pa.string())
    n = len(raw)
    if n == 0:
        empty = pa.array([], pa.string())
        return CanonicalColumn(empty, empty, empty, empty)
    taken, url, domain = _fast_rows(raw)
    slow_index = np.flatnonzero(~taken)
    if len(slow_index) == 0:
        nulls = pa.nulls(n, pa.string())
        return CanonicalColumn(url, domain, nulls, nulls, n)
    s_url, s_domain, s_reason, s_error = _slow_rows(raw.take(slow_index))
    none = pa.nulls(len(url), pa.string())
    return CanonicalColumn(_merge(taken, url, s_url), _merge(taken, domain, s_domain),
                           _merge(taken, none, s_reason), _merge(taken, none, s_error), len(url))


def _merge(first: np.ndarray, a: pa.Array, b: pa.Array) -> pa.Array:
    """Rows in order: where ``first`` is true the next value of ``a``, elsewhere the next of ``b``
    (one ``take``; ``replace_with_mask`` of strings is several times slower)."""
    index = np.where(first, np.cumsum(first) - 1, len(a) + np.cumsum(~first) - 1)
    return pa.concat_arrays([a, b]).take(pa.array(index))


def _slow_rows(raw: pa.StringArray) -> tuple[pa.StringArray, ...]:
    """(url, domain, reason, error) by ``canonicalize`` row by row: the reference the fast path
    must equal, and the answer for every row outside its shape."""
    n = len(raw)
    urls: list[str | None] = [None] * n
    domains: list[str | None] = [None] * n
    reasons: list[str | None] = [None] * n
    errors: list[str | None] = [None] * n
    for i, value in enumerate(raw.to_pylist()):
        if value is None:
            reasons[i], errors[i] = _MISSING
        elif not value:
            reasons[i], errors[i] = _BLANK
        else:
            try:
                canon = canonicalize(value)
            except InvalidUrl as exc:
                reasons[i], errors[i] = exc.reason, str(exc)
            else:
                urls[i], domains[i] = canon.url, canon.domain
    return (pa.array(urls, pa.string()), pa.array(domains, pa.string()),
            pa.array(reasons, pa.string()), pa.array(errors, pa.string()))


def _fast_rows(raw: pa.StringArray) -> tuple[np.ndarray, pa.StringArray, pa.StringArray]:
    """(taken, url, domain): which rows the column kernels canonicalized (a mask) and, for
    those rows in order, their answers. A row is taken only when every step is canonicalize's.

    Shapes are checked by regex matches (RE2's DFA: extracting groups in the same pass is
    several times slower). Most rows are canonical as they are (``_CANON``: the URL is the
    input, only the host is cut out); the rest of ``_SHAPE`` is taken apart by splits at the
    first delimiter and put together again (``_rebuilt``)."""
    short = pc.fill_null(pc.less_equal(pc.binary_length(raw), MAX_URL_LENGTH), False)
    canon = _mask(pc.and_(short, pc.match_substring_regex(raw, _CANON)))
    candidates = np.flatnonzero(~canon & _mask(short))
    others = raw.take(pa.array(candidates))
    shaped = _mask(pc.match_substring_regex(others, _SHAPE))
    b_ok, b_url, b_host = _rebuilt(others.filter(shaped))
    rows = canon.copy()
    rows[candidates[shaped]] = True
    first = canon[rows]  # among the rows taken so far: canonical as they are (else rebuilt)
    c_url = raw.filter(pa.array(canon))
    url = _merge(first, c_url, b_url)
    host = _merge(first, _part(c_url, "/", 2, 3), b_host)  # "http:" / "" / host / path
    ok = np.ones(len(first), dtype=bool)
    ok[~first] = _mask(b_ok)
    ok &= _mask(pc.less_equal(pc.binary_length(url), MAX_URL_LENGTH))
    ok_mask = pa.array(ok)
    domain = _domains(host.filter(ok_mask))
    found = _mask(domain.is_valid())  # null: a host canonicalize would treat otherwise
    taken = np.zeros(len(raw), dtype=bool)
    taken[np.flatnonzero(rows)[ok][found]] = True
    found_mask = pa.array(found)
    return taken, url.filter(ok_mask).filter(found_mask), domain.filter(found_mask)


def _mask(values: pa.Array) -> np.ndarray:
    """A boolean column as a numpy mask, null as false."""
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _rebuilt(rows: pa.StringArray) -> tuple[pa.BooleanArray, pa.StringArray, pa.StringArray]:
    """(ok, url, host) of ``_SHAPE`` rows taken apart and put together the canonical way:
    scheme and host lowercase, fragment, trailing host dot and default port dropped, runs of
    ``/`` collapsed, the query sorted. ``ok`` is false where a part is outside the shape
    canonicalize keeps (a dot segment, a host of bad labels, a port over 65535)."""
    null = pa.scalar(None, pa.string())
    before_query, query = _split_once(_split_once(rows, "#")[0], "?")
    scheme, rest = _split_once(before_query, "://")
    authority, path = _split_once(rest, "/")
    host, port_text = _split_once(pc.ascii_lower(authority), ":")
    https = pc.equal(pc.binary_length(scheme), 5)
    scheme = pc.if_else(https, "https", "http")
    trailing_dot = pc.ends_with(host, ".")
    if pc.any(trailing_dot).as_py():
        host = pc.if_else(trailing_dot, pc.utf8_slice_codeunits(host, 0, -1), host)
    ok = pc.match_substring_regex(host, _HOST_LABELS)
    port_part = pa.nulls(len(rows), pa.string())
    if port_text.null_count < len(port_text):
        port = pc.cast(port_text, pa.int32())
        ok = pc.and_(ok, pc.fill_null(pc.less_equal(port, 65535), True))
        default = pc.equal(port, pc.if_else(https, 443, 80))
        port_part = pc.if_else(pc.fill_null(default, True), null,
                               pc.binary_join_element_wise(":", pc.cast(port, pa.string()), ""))
    path = pc.binary_join_element_wise("/", pc.fill_null(path, ""), "")
    ok = pc.and_not(ok, pc.match_substring_regex(path, _DOT_SEGMENT))
    doubled = pc.match_substring(path, "//")
    if pc.any(doubled).as_py():
        path = pc.if_else(doubled, pc.replace_substring_regex(path, "//+", "/"), path)
    query = _sorted_queries(pc.fill_null(query, ""), ok)
    query_part = pc.if_else(pc.equal(query, ""), null, pc.binary_join_element_wise("?", query, ""))
    url = pc.binary_join_element_wise(scheme, "://", host, port_part, path, query_part, "",
                                      null_handling="skip")
    return ok, url, host


def _split_once(text: pa.StringArray, sep: str) -> tuple[pa.StringArray, pa.StringArray]:
    """(before, after) the first ``sep`` of each (non-null) row; ``after`` is null when there
    is no ``sep``."""
    return _part(text, sep, 0, 1), _part(text, sep, 1, 1)


def _part(text: pa.StringArray, sep: str, index: int, max_splits: int) -> pa.StringArray:
    """Part ``index`` of each (non-null) row split at ``sep`` (at most ``max_splits`` times),
    null when it has fewer parts.
    ``split_pattern`` plus a take by the list offsets: ``list_element`` fails on a short list."""
    lists = pc.split_pattern(text, sep, max_splits=max_splits)
    offsets = lists.offsets.to_numpy()
    starts = offsets[:-1]
    return lists.values.take(pa.array(starts + index, mask=(offsets[1:] - starts) <= index))


def _sorted_queries(query: pa.StringArray, rows: pa.BooleanArray) -> pa.StringArray:
    """``_normalize_query`` of clean queries (no escape to normalize): a query with ``&`` loses
    its empty parameters and has the rest stable-sorted by key (byte order equals code point
    order in ASCII); one without is kept. Only the ``rows`` that are taken are sorted."""
    many = pc.fill_null(pc.and_(rows, pc.match_substring(query, "&")), False)
    if not pc.any(many).as_py():
        return query
    split = pc.split_pattern(query.filter(many), "&")
    params = pc.list_flatten(split)
    parent = pc.list_parent_indices(split)
    kept = pc.greater(pc.binary_length(params), 0)
    params, parent = params.filter(kept), parent.filter(kept)
    key = pc.extract_regex(params, r"^(?P<key>[^=]*)").field("key")
    order = pc.sort_indices(
        pa.table({"parent": parent, "key": key, "at": pa.array(np.arange(len(params)))}),
        sort_keys=[("parent", "ascending"), ("key", "ascending"), ("at", "ascending")],
    )
    counts = np.bincount(parent.to_numpy(), minlength=len(split))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32())
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, params.take(order)), "&")
    return pc.replace_with_mask(query, many, joined)


def _domains(host: pa.StringArray) -> pa.StringArray:
    """``registered_domain_or_host`` once per distinct host (hosts repeat heavily in a batch),
    taken back to the rows. Null for a host ``_host_and_domain`` would not take as it is (over
    MAX_HOST_LENGTH, ending in a number: IPv4, or with an ``xn--`` label: IDNA), checked per
    distinct host too, and for one whose lookup raised: those rows go the slow way."""
    encoded = pc.dictionary_encode(host)
    distinct = encoded.dictionary
    plain = _mask(pc.less_equal(pc.binary_length(distinct), MAX_HOST_LENGTH))
    plain &= ~_mask(pc.match_substring_regex(distinct, _ENDS_IN_NUMBER))
    plain &= ~_mask(pc.match_substring(distinct, "xn--"))
    answers: list[str | None] = []
    for value, keep in zip(distinct.to_pylist(), plain.tolist(), strict=True):
        try:
            answers.append(registered_domain_or_host(value) if keep else None)
        except Exception:  # canonicalize itself decides what such a host gives
            answers.append(None)
    return pa.array(answers, pa.string()).take(encoded.indices)
