"""Canonicalize a column of raw URLs at once: the batch form of :func:`canonicalize`.

Batch ingest (``crawlstream ingest``, ``crawlstream spark-ingest``'s Arrow batches) hands a whole
column over in one call; each answer is exactly what :func:`canonicalize` gives for that row.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from crawlstream.errors import InvalidUrl
from crawlstream.urls._canonical import canonicalize

__all__ = ["CanonicalColumn", "canonicalize_column"]


@dataclass(frozen=True)
class CanonicalColumn:
    """Row ``i`` is valid when ``reason[i]`` is null: then ``url[i]`` and ``domain[i]`` are its
    canonical URL and registered domain; else both are null and ``reason[i]`` / ``error[i]``
    say why (``blank``, ``missing``, or an ``InvalidUrl.reason``)."""

    url: pa.StringArray
    domain: pa.StringArray
    reason: pa.StringArray
    error: pa.StringArray

    def __len__(self) -> int:
        return len(self.url)

    @property
    def valid(self) -> pa.BooleanArray:
        return self.reason.is_null()


def canonicalize_column(raw: pa.Array | pa.ChunkedArray) -> CanonicalColumn:
    """``canonicalize`` of every row of a string column; a null row is ``missing``, an empty one
    ``blank``."""
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks() if raw.num_chunks else pa.array([], pa.string())
    n = len(raw)
    urls: list[str | None] = [None] * n
    domains: list[str | None] = [None] * n
    reasons: list[str | None] = [None] * n
    errors: list[str | None] = [None] * n
    for i, value in enumerate(raw.to_pylist()):
        if value is None:
            reasons[i], errors[i] = "missing", "no value (null)"
        elif not value:
            reasons[i], errors[i] = "blank", "empty line or value"
        else:
            try:
                canon = canonicalize(value)
            except InvalidUrl as exc:
                reasons[i], errors[i] = exc.reason, str(exc)
            else:
                urls[i], domains[i] = canon.url, canon.domain
    return CanonicalColumn(pa.array(urls, pa.string()), pa.array(domains, pa.string()),
                           pa.array(reasons, pa.string()), pa.array(errors, pa.string()))
