"""The ``/v1/url`` answer: a URL's datasets, where its recorded redirects lead, its raw form.

The alias map lives in the lake as two reserved datasets (``crawlstream.lake._aliases``,
ADR 024), so one pinned index answers everything: the datasets holding a URL tell whether
it has a recorded hop or raw form at all, and only then is that row's ``extras`` read. A URL
without aliases costs what it cost before (one ``lookup_url``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawlstream.errors import InvalidUrl
from crawlstream.lake import (
    RAW_FORMS_DATASET,
    REDIRECTS_DATASET,
    RedirectHop,
    follow_redirects,
    is_alias_dataset,
    parse_raw_form,
    parse_redirect,
)
from crawlstream.urls import canonicalize

if TYPE_CHECKING:
    from crawlstream.api._acl import Grant
    from crawlstream.index import PinnedIndex
    from crawlstream.urls import CanonicalUrl

__all__ = ["url_answer"]


def url_answer(idx: PinnedIndex, canon: CanonicalUrl, key: int, requested: str, grant: Grant) -> dict[str, Any]:
    """The body of ``/v1/url`` for ``canon`` (the canonical form of ``requested``)."""
    found = sorted(idx.lookup_url(canon.url))
    datasets = [d for d in grant.filter(found) if not is_alias_dataset(d)]
    doc: dict[str, Any] = {
        "url": canon.url,
        "url_key": key,
        "domain": canon.domain,
        "datasets": datasets,
        "requested_url": requested,
        "canonical_url": canon.url,
        "canonical_datasets": datasets,
        "redirects": [],
        "redirect_end": "none",
        "raw_form": None,
    }
    if RAW_FORMS_DATASET in found and grant.allows(RAW_FORMS_DATASET):
        raw = parse_raw_form(idx.url_extras(canon.url, RAW_FORMS_DATASET))
        if raw is not None:
            doc["raw_form"] = {"raw": raw.raw, "source": raw.source}
    if REDIRECTS_DATASET not in found or not grant.allows(REDIRECTS_DATASET):
        return doc

    def hop_of(url: str) -> RedirectHop | None:
        hop = parse_redirect(url, idx.url_extras(url, REDIRECTS_DATASET))
        if hop is not None:
            try:
                canonicalize(hop.location)
            except InvalidUrl:  # a location that is no URL (an outside producer's row): no hop
                return None
        return hop

    chain = follow_redirects(canon.url, hop_of)
    if chain.target is not None:
        target = chain.target
        doc["canonical_url"] = target
        doc["canonical_datasets"] = [d for d in grant.filter(sorted(idx.lookup_url(target))) if not is_alias_dataset(d)]
        doc["redirects"] = [hop.to_json() for hop in chain.hops]
        doc["redirect_end"] = chain.end
    return doc
