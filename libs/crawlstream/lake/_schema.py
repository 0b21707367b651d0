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
    is_port = port_s.isdigit() and port_s.isascii() and not port_s.startswith("0") and len(port_s) <= 5
    if colon and is_port and host and not host.endswith(":"):
        return scheme, host, int(port_s), path_query
    return scheme, authority, None, path_query


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
