"""The lake's row schema and the split of a canonical URL into its columns. Pure: no I/O.

A canonical URL is stored as ``scheme`` + ``host`` + ``port`` + ``path_query`` and rebuilt
with :func:`join_url`; :func:`split_url` is its exact inverse on any string containing
``://`` (property-tested), so the lake never needs a full ``url`` column.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["LAKE_COLUMNS", "LAKE_SCHEMA", "SORT_KEYS_DOC", "join_url", "split_url"]

LAKE_SCHEMA = pa.schema(
    [
        pa.field("dataset_id", pa.int32(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),  # registered domain (eTLD+1)
        pa.field("url_key", pa.int64(), nullable=False),
        pa.field("scheme", pa.string(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("port", pa.int32(), nullable=True),  # null = default port
        pa.field("path_query", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("ms"), nullable=True),
        pa.field("extras", pa.string(), nullable=True),  # JSON object text
    ]
)
LAKE_COLUMNS = tuple(LAKE_SCHEMA.names)
SORT_KEYS_DOC = "rows are sorted by (domain, url) with url = join_url(scheme, host, port, path_query)"


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
