"""The lake's row schema, the split of a canonical URL into its columns, and the derived
columns. Pure: no I/O.

A row stores ``domain`` + ``scheme`` + ``host_prefix`` + ``port`` + ``path_query``
(+ ``ts``, ``extras``). Everything else the seed's §2.1 lists is derived, because storing it
costs bytes that the URL already holds (docs/decisions/007-lake-derived-columns.md):

* ``host = host_prefix + domain`` (``"www."`` + ``"example.com"``; ``""`` when the host is
  the registered domain) — a dictionary of ~20 prefixes instead of every host string again;
* ``url = join_url(scheme, host, port, path_query)``; :func:`split_url` is its exact inverse;
* ``url_key = derive_url_key(domain, url)`` (the int63 of schemas/URL_KEYS.md);
* ``dataset_id`` (and ``domain_prefix``) from the file's path, the Hive partition.

:data:`DERIVED_SQL` derives the same columns in DuckDB over ``read_parquet(...,
hive_partitioning=true)``; :func:`register_duckdb` adds ``url_key`` as a function.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawlstream.urls import KEY_HASH_MASK, canonical_url_key, compose_key, domain_checksum, fnv1a_64

__all__ = [
    "DERIVED_SQL",
    "LAKE_COLUMNS",
    "LAKE_SCHEMA",
    "SORT_KEYS_DOC",
    "derive_url_key",
    "derive_url_keys",
    "host_prefix",
    "join_url",
    "lake_urls",
    "register_duckdb",
    "split_url",
    "split_urls",
]

LAKE_SCHEMA = pa.schema(
    [
        pa.field("domain", pa.string(), nullable=False),  # registered domain (eTLD+1)
        pa.field("scheme", pa.string(), nullable=False),
        pa.field("host_prefix", pa.string(), nullable=False),  # host = host_prefix + domain
        pa.field("port", pa.int32(), nullable=True),  # null = default port
        pa.field("path_query", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("ms"), nullable=True),
        pa.field("extras", pa.string(), nullable=True),  # JSON object text
    ]
)
LAKE_COLUMNS = tuple(LAKE_SCHEMA.names)
SORT_KEYS_DOC = "rows are sorted by (domain, url) with url = join_url(scheme, host, port, path_query)"

DERIVED_SQL = {
    "host": "host_prefix || domain",
    "url": "scheme || '://' || host_prefix || domain || coalesce(':' || CAST(port AS VARCHAR), '') || path_query",
}
"""DuckDB expressions of the derived columns (``dataset_id`` comes from the Hive partition)."""


def split_url(url: str) -> tuple[str, str, int | None, str]:
    """``"https://a.b:8080/x?y"`` -> ``("https", "a.b", 8080, "/x?y")``; inverse of :func:`join_url`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"expected an absolute URL with '://', found {url!r}")
    cut = len(rest)
    for ch in "/?#":
        i = rest.find(ch)
        if 0 <= i < cut:
            cut = i
    authority, path_query = rest[:cut], rest[cut:]
    host, colon, port_s = authority.rpartition(":")
    no_leading_zero = port_s == "0" or not port_s.startswith("0")
    is_port = port_s.isdigit() and port_s.isascii() and no_leading_zero and len(port_s) <= 5
    if colon and is_port and host and not host.endswith(":"):
        return scheme, host, int(port_s), path_query
    return scheme, authority, None, path_query


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets of each row into the data, the data bytes) of a string array, without copying."""
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return offsets, data


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The byte positions of every range ``[start, start + length)``, one after another."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total)


def _substrings(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    lengths = ends - starts
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    taken = data[_ranges(starts, lengths)]
    return pa.StringArray.from_buffers(len(starts), pa.py_buffer(offsets.tobytes()), pa.py_buffer(taken.tobytes()))


def _first_at_or_after(positions: np.ndarray, starts: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Per row, the first of the sorted ``positions`` in ``[start, limit)``, else ``limit``."""
    i = np.searchsorted(positions, starts)
    found = np.append(positions, np.iinfo(np.int64).max)[i]
    return np.where(found < limits, found, limits)


def split_urls(urls: pa.Array, domains: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """:func:`split_url` and :func:`host_prefix` of every row at once, over the UTF-8 bytes with
    numpy (ingest writes millions of rows; a Python call per row was half of building a lake
    file): the ``scheme``, ``host_prefix``, ``port`` and ``path_query`` columns. The cuts are
    split_url's: the scheme ends at the first ``://``, the authority at the next ``/``, ``?`` or
    ``#``; a port is 1-5 ASCII digits, 0 or not starting with 0, after the authority's last ``:``, with
    a host before it that is not empty and does not end with ``:``."""
    if urls.null_count or domains.null_count:
        raise ValueError("expected canonical URLs and their domains, found a null")
    off, data = _string_parts(urls)
    row_start, row_end = off[:-1], off[1:]
    colon = data == ord(":")
    slash = data == ord("/")
    seps = np.flatnonzero(colon[:-2] & slash[1:-1] & slash[2:]) if len(data) > 2 else np.zeros(0, np.int64)
    scheme_end = _first_at_or_after(seps, row_start, np.maximum(row_end - 2, row_start))
    missing = scheme_end >= np.maximum(row_end - 2, row_start)
    if missing.any():
        bad = urls[int(np.flatnonzero(missing)[0])].as_py()
        raise ValueError(f"expected an absolute URL with '://', found {bad!r}")
    auth_start = scheme_end + 3
    cut = np.flatnonzero(slash | (data == ord("?")) | (data == ord("#")))
    auth_end = _first_at_or_after(cut, auth_start, row_end)
    colons = np.flatnonzero(colon)
    last = np.searchsorted(colons, auth_end) - 1
    last_colon = np.where(last >= 0, np.append(colons, -1)[last], -1)
    port_start, port_len = last_colon + 1, auth_end - last_colon - 1
    # a port candidate: 1-5 bytes after a colon inside the authority, past a non-empty host
    maybe = np.flatnonzero((last_colon > auth_start) & (port_len >= 1) & (port_len <= 5))
    ends = np.concatenate([[0], np.cumsum(port_len[maybe])])
    body = data[_ranges(port_start[maybe], port_len[maybe])]
    non_digit = np.concatenate([[0], np.cumsum((body < ord("0")) | (body > ord("9")))])
    ok = non_digit[ends[1:]] == non_digit[ends[:-1]]
    ok &= ((data[port_start[maybe]] != ord("0")) | (port_len[maybe] == 1)) & (data[last_colon[maybe] - 1] != ord(":"))
    is_port = np.zeros(len(urls), bool)
    is_port[maybe[ok]] = True
    host_end = np.where(is_port, last_colon, auth_end)
    port_text = pc.if_else(pa.array(is_port), _substrings(data, np.where(is_port, port_start, 0),
                                                          np.where(is_port, auth_end, 0)), pa.scalar(None, pa.string()))
    return (_substrings(data, row_start, scheme_end), _host_prefixes(urls, data, auth_start, host_end, domains),
            pc.cast(port_text, pa.int32()), _substrings(data, auth_end, row_end))


def _host_prefixes(urls: pa.Array, data: np.ndarray, host_start: np.ndarray, host_end: np.ndarray,
                   domains: pa.Array) -> pa.Array:
    """Each host's bytes before its domain, which must be the host's suffix (ValueError naming
    the first row whose host does not end with its domain)."""
    d_off, d_data = _string_parts(domains)
    d_len = np.diff(d_off)
    p_len = host_end - host_start - d_len
    fits = p_len >= 0
    suffix = data[_ranges(host_start + np.where(fits, p_len, 0), np.where(fits, d_len, 0))]
    if not fits.all() or not np.array_equal(suffix, d_data[_ranges(d_off[:-1], d_len)]):
        for url, domain in zip(urls.to_pylist(), domains.to_pylist(), strict=True):
            host_prefix(split_url(url)[1], domain)  # raises for the first bad row
    return _substrings(data, host_start, host_start + p_len)


def join_url(scheme: str, host: str, port: int | None, path_query: str) -> str:
    if port is None:
        return f"{scheme}://{host}{path_query}"
    return f"{scheme}://{host}:{port}{path_query}"


def lake_urls(table: pa.Table) -> pa.Array:
    """The derived ``url`` of every row of a lake table, computed in Arrow (no Python loop)."""
    port = pc.binary_join_element_wise(":", pc.cast(table.column("port"), pa.string()), "")
    port = pc.fill_null(port, "")
    return pc.binary_join_element_wise(
        table.column("scheme"), "://", table.column("host_prefix"), table.column("domain"), port,
        table.column("path_query"), "",
    ).combine_chunks()


def host_prefix(host: str, domain: str) -> str:
    """``("www.example.com", "example.com")`` -> ``"www."``; the host must end with its domain."""
    if not host.endswith(domain):
        raise ValueError(f"expected host {host!r} to end with its registered domain {domain!r}")
    return host[: len(host) - len(domain)]


derive_url_key = canonical_url_key
"""The url_key of a canonical ``url`` whose registered domain is ``domain`` (no re-parse)."""


def derive_url_keys(domain: str, urls: list[str]) -> list[int]:
    """:func:`derive_url_key` of many URLs of one domain (a page): the checksum is taken once."""
    high = compose_key(domain_checksum(domain), 0)  # the key's checksum bits, the same for every URL
    return [high | (fnv1a_64(u.encode("utf-8")) & KEY_HASH_MASK) for u in urls]


def register_duckdb(con: Any) -> None:
    """Add ``url_key(domain, url)`` to a DuckDB connection (same value as :func:`derive_url_key`)."""
    con.create_function("url_key", derive_url_key, ["VARCHAR", "VARCHAR"], "BIGINT", side_effects=False)
