"""The raw form a URL was first seen in, as the alias map's row (ADR 024). Pure.

The deduper is the one place that knows a URL is new: when it forwards one whose event
carries a ``raw_url`` (a link's href resolved against its page but not canonicalized, a
redirect's Location, a sitemap entry, an outside producer's non-canonical URL), it publishes
this row to ``urls.records`` with the same producer, so the row is flushed before the input
offset is committed and before the Bloom snapshot covering it is written (ADR 005/009). A URL
thus costs at most one raw-forms row, the first form it was seen in; a URL first seen
canonical costs nothing.
"""

from __future__ import annotations

from crawlstream.events import DiscoveredUrl, UrlRecord
from crawlstream.urls import MAX_URL_LENGTH

__all__ = ["RECORDED_AT_INTAKE", "raw_form_record"]

RECORDED_AT_INTAKE = frozenset({"seed"})
"""Sources whose raw forms their intake publishes already (``send_seeds``, ``SeedIntake``):
a second row would only cost bytes (the lake keeps the first)."""


def raw_form_record(event: DiscoveredUrl) -> UrlRecord | None:
    """The raw-forms row of a URL forwarded for the first time; None when it was seen
    canonical, when its source's intake records it, or when the raw text is longer than any
    URL may be (an outside producer's; nothing could look it up)."""
    raw = event.raw_url
    if raw is None or raw == event.url or event.source in RECORDED_AT_INTAKE or len(raw) > MAX_URL_LENGTH:
        return None
    # Imported here as crawl/_seeds.py does: crawlstream.lake imports pyarrow (~0.1 s, tens of
    # MB), which the deduper needs only once a raw form shows up.
    from crawlstream.lake._aliases import RAW_FORMS_DATASET, raw_form_extras

    return UrlRecord(
        RAW_FORMS_DATASET,
        event.url,
        event.discovered_at_ms,
        raw_form_extras(raw, event.source),
        event.domain,
    )
