"""Helpers shared by the content store tests."""

from __future__ import annotations

from pathlib import Path

from crawlstream.store import ContentStore, GroupHeader, decode_record_header


def group_headers(root: Path, store: ContentStore) -> dict[tuple[str, int], GroupHeader]:
    """The group record header of every live page's record, by (segment, offset)."""
    headers = {}
    for e in store.search():
        loc = e.location
        header = decode_record_header((root / "segments" / loc.segment).read_bytes(), loc.offset)
        assert isinstance(header, GroupHeader), loc
        headers[(loc.segment, loc.offset)] = header
    return headers
