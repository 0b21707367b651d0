"""Issue 13's ratio goal on every real page: a default maintenance pass keeps the pages in no
more bytes than one zstd-19 stream of them (ADR 021). Minutes at level 22: ``make test-slow``."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard as zstd

from crawlstream.store import ContentStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_a_default_pass_over_every_real_page_beats_one_zstd19_stream(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    raw = sum(len(b) for _, b in real_pages)
    stream_ratio = raw / len(zstd.ZstdCompressor(level=19).compress(b"".join(b for _, b in real_pages)))
    with ContentStore(tmp_path / "s") as store:  # production levels, dictionary sizes and budgets
        for url, body in real_pages:
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        store.maintain(ages_zero=True)
        st = store.stats()
        assert {e.location.tier for e in store.search()} == {"archive"}
        assert all(store.get(url) == body for url, body in real_pages)
    assert st.stored_bytes == sum(p.stat().st_size for p in (tmp_path / "s").rglob("*") if p.is_file())
    print(f"store {st.ratio:.3f}x vs one zstd-19 stream {stream_ratio:.3f}x ({len(real_pages)} pages, {raw} B)")
    assert st.ratio >= stream_ratio
