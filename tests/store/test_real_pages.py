"""Every real page of ../shared/data/html comes back byte-identical from every tier."""

from __future__ import annotations

from pathlib import Path

from crawlstream.store import ContentStore


def test_every_real_page_round_trips_hot_then_cold_with_dictionaries(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    # Levels are kept low so the test stays fast; the code path (dictionaries, tiers,
    # segment rolls) is the one the production levels use.
    opts = dict(
        cold_level=3, dict_size_bytes=64 * 1024, global_dict_size_bytes=64 * 1024, segment_bytes=8 * 1024 * 1024
    )
    with ContentStore(tmp_path, **opts) as store:  # type: ignore[arg-type]
        for url, body in real_pages:
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        assert all(store.get(url) == body for url, body in real_pages)
        report = store.recompress(older_than_s=0, now_ms=1)
        assert report.dictionaries_trained >= 2  # booksamillion.com and the global one
        assert report.segments_removed  # the hot segments became garbage
    with ContentStore(tmp_path, **opts) as store:  # type: ignore[arg-type]
        tiers = {store.entry(url).location.tier for url, _ in real_pages}  # type: ignore[union-attr]
        assert tiers == {"cold"}
        assert sum(1 for url, _ in real_pages if store.entry(url).location.dict_id) > len(real_pages) // 2  # type: ignore[union-attr]
        assert all(store.get(url) == body for url, body in real_pages)
        assert store.verify().ok
