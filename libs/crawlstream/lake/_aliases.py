"""The alias map: where a URL came from, kept as lake rows of two reserved datasets. Pure.

Two facts about a URL are not a page of any dataset, yet ``/v1/url`` must answer them
(issue 14, seed "URL keys": the requested vs the canonical form):

* **redirect hops**: the crawl fetched ``url`` and got a 3xx to ``location``. One row per
  redirecting URL in dataset :data:`REDIRECTS_DATASET`: the row's URL is the (canonical)
  redirecting URL, its ``extras`` hold the canonical target, the status and the Location
  header as the server wrote it (when that differs from the target). A chain of hops is
  several rows, followed at query time (:func:`follow_redirects`), so a hop recorded once
  serves every chain it is part of.
* **raw forms**: the text a URL was first seen as (a seed line, a migrated row) when it is
  not already canonical. One row per canonical URL in dataset :data:`RAW_FORMS_DATASET`,
  ``extras`` = the raw text and where it came from. A canonical raw form writes nothing, so
  a crawl of canonical URLs pays nothing (docs/decisions/024-url-provenance.md).

Both are ordinary lake rows (same schema, files, index, compaction and replay): the rows
reach the lake as ``urls.records`` events (:class:`~crawlstream.events.UrlRecord`, extras
as a string map) through the parquet sink, or directly (the PostgreSQL migration). The
lake keeps the first row of a (dataset, url), so the *first* recorded hop / raw form wins.
The reserved ids are hidden from dataset listings by the API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ALIAS_DATASETS",
    "MAX_REDIRECT_HOPS",
    "RAW_FORMS_DATASET",
    "REDIRECTS_DATASET",
    "RawForm",
    "RedirectChain",
    "RedirectHop",
    "extras_json",
    "follow_redirects",
    "is_alias_dataset",
    "parse_raw_form",
    "parse_redirect",
    "raw_form_extras",
    "redirect_extras",
]

REDIRECTS_DATASET = 2**31 - 1
"""Dataset id of redirect hops (the largest id the lake accepts)."""
RAW_FORMS_DATASET = 2**31 - 2
"""Dataset id of raw forms (first-seen text of a URL that is not canonical)."""
ALIAS_DATASETS = frozenset({REDIRECTS_DATASET, RAW_FORMS_DATASET})
MAX_REDIRECT_HOPS = 20
"""A chain is followed at most this far (browsers stop at 20 as well)."""


def is_alias_dataset(dataset_id: int) -> bool:
    return dataset_id in ALIAS_DATASETS


def extras_json(extras: dict[str, str]) -> str:
    """The ``extras`` text of a row, byte for byte what the parquet sink writes for a
    ``UrlRecord`` with these extras (sorted keys, compact, UTF-8 kept)."""
    return json.dumps(extras, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def redirect_extras(location: str, status: int | None, location_raw: str | None = None) -> dict[str, str]:
    """Extras of a redirect hop: ``location`` is the canonical target; ``status`` the 3xx (None:
    unknown, e.g. a migrated row); ``location_raw`` the Location as written (kept only when it
    differs from ``location``)."""
    out = {"location": location}
    if status is not None:
        if not 300 <= status <= 399:
            raise ValueError(f"expected a 3xx status for a redirect hop, found {status}")
        out["status"] = str(status)
    if location_raw is not None and location_raw != location:
        out["location_raw"] = location_raw
    return out


def raw_form_extras(raw: str, source: str) -> dict[str, str]:
    """Extras of a raw form: the text as given and where it was seen (``seed``, ``migrate``...)."""
    return {"raw": raw, "source": source}


@dataclass(frozen=True, slots=True)
class RedirectHop:
    url: str  # the redirecting URL (canonical)
    location: str  # the canonical target
    status: int | None  # None: not recorded (a migrated row whose status was not a 3xx)
    location_raw: str | None = None  # the Location header as written, when it differs

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"url": self.url, "location": self.location, "status": self.status}
        if self.location_raw is not None:
            doc["location_raw"] = self.location_raw
        return doc


@dataclass(frozen=True, slots=True)
class RawForm:
    raw: str
    source: str


def _object(text: str | None) -> dict[str, object] | None:
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def parse_redirect(url: str, extras: str | None) -> RedirectHop | None:
    """The hop a :data:`REDIRECTS_DATASET` row records; None when its extras are not one
    (an outside producer wrote something else there: not a hop, never an error)."""
    doc = _object(extras)
    if doc is None:
        return None
    location, status, raw = doc.get("location"), doc.get("status"), doc.get("location_raw")
    if not isinstance(location, str):
        return None
    code: int | None = None
    if isinstance(status, str) and status.isascii() and status.isdigit() and 300 <= int(status) <= 399:
        code = int(status)
    return RedirectHop(url, location, code, raw if isinstance(raw, str) else None)


def parse_raw_form(extras: str | None) -> RawForm | None:
    """The raw form a :data:`RAW_FORMS_DATASET` row records; None when it is not one."""
    doc = _object(extras)
    if doc is None or not isinstance(doc.get("raw"), str):
        return None
    source = doc.get("source")
    return RawForm(str(doc["raw"]), source if isinstance(source, str) else "")


@dataclass(frozen=True, slots=True)
class RedirectChain:
    hops: tuple[RedirectHop, ...]
    end: str  # "target" (the last location redirects no further), "loop" or "too_long"

    @property
    def target(self) -> str | None:
        """The canonical URL the chain ends at (None: no hop)."""
        return self.hops[-1].location if self.hops else None


def follow_redirects(
    url: str, hop_of: Callable[[str], RedirectHop | None], max_hops: int = MAX_REDIRECT_HOPS
) -> RedirectChain:
    """The recorded chain starting at canonical ``url``: ``hop_of(u)`` is u's recorded hop.

    Stops at the first URL without a hop (``end="target"``), at a URL already in the chain
    (``"loop"``: the loop's hops are all listed once) or after ``max_hops`` (``"too_long"``).
    """
    hops: list[RedirectHop] = []
    seen = {url}
    current = url
    while True:
        hop = hop_of(current)
        if hop is None:
            return RedirectChain(tuple(hops), "target")
        if len(hops) >= max_hops:
            return RedirectChain(tuple(hops), "too_long")
        hops.append(hop)
        if hop.location in seen:
            return RedirectChain(tuple(hops), "loop")
        seen.add(hop.location)
        current = hop.location
