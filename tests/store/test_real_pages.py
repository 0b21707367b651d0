"""Every real page of ../shared/data/html comes back byte-identical from every tier."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from crawlstream.store import ContentStore, GroupHeader, StoreConfig, decode_record_header


@pytest.mark.parametrize("archive_bzip2", [False, True], ids=["zstd-archive", "bzip2-where-smaller"])
def test_every_real_page_round_trips_from_every_tier_with_dictionaries_and_groups(
    tmp_path: Path, real_pages: list[tuple[str, bytes]], archive_bzip2: bool
) -> None:
    # Levels are kept low so the test stays fast; the code path (dictionaries, tiers, group
    # records, segment rolls) is the one the production levels use. The bzip2 variant takes a
    # third of the pages (bzip2 compresses every group twice over: ~1 min for all of them).
    if archive_bzip2:
        real_pages = random.Random(4).sample(real_pages, len(real_pages) // 3)
    config = StoreConfig(
        warm_level=3,
        cold_level=3,
        archive_level=3,
        dict_size_bytes=64 * 1024,
        global_dict_size_bytes=64 * 1024,
        segment_bytes=8 * 1024 * 1024,
        archive_bzip2=archive_bzip2,
    )
    with ContentStore(tmp_path, config=config) as store:
        for url, body in real_pages:
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        assert all(store.get(url) == body for url, body in real_pages)
        trained = 0
        for tier in ("warm", "cold", "archive"):
            report = store.recompress(older_than_s=0, tier=tier, now_ms=1)
            trained += report.dictionaries_trained
            assert report.segments_removed  # the previous tier's segments became garbage
            assert {store.entry(url).location.tier for url, _ in real_pages} == {tier}  # type: ignore[union-attr]
            assert all(store.get(url) == body for url, body in real_pages), tier
        assert trained >= 2  # booksamillion.com and the global one
    with ContentStore(tmp_path, config=config) as store:
        locations = [store.entry(url).location for url, _ in real_pages]  # type: ignore[union-attr]
        assert {loc.tier for loc in locations} == {"archive"}
        groups = {(loc.segment, loc.offset) for loc in locations}
        kinds = set()
        for segment, offset in groups:
            header = decode_record_header((tmp_path / "segments" / segment).read_bytes(), offset)
            assert isinstance(header, GroupHeader)
            kinds.add(header.kind)
        if archive_bzip2:  # at level 3, bzip2 is smaller for most groups: both kinds are read here
            assert kinds == {3, 4}
        else:
            assert kinds == {3}
            assert sum(1 for loc in locations if loc.dict_id) > len(real_pages) // 2
        assert len(groups) < len(real_pages) // 4  # several pages share each zstd frame
        assert all(store.get(url) == body for url, body in real_pages)
        assert store.verify().ok
