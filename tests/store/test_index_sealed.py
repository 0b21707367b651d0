"""Sealed blocks (ADR 036, session 21): archive-tier index entries folded into zstd blocks, on real files.

Every behaviour of the store must read the same whether an entry is a row or sealed: reads,
searches, deletes, tags, re-puts, dedupe, compaction, stats, a reopen, a rebuild."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import pytest

from crawlstream.errors import ChecksumMismatch
from crawlstream.store import ContentStore, StoreConfig
from crawlstream.store._index_sealed import BLOCK_ENTRIES

DOMAINS = 5
CONFIG = StoreConfig(dict_min_samples=8, archive_level=19)  # level 22 takes ten times longer here


def _body(i: int) -> bytes:
    head = f"<html><head><title>page {i}</title></head><body>"
    return (head + f"<p>item {i} of the list</p>" * (5 + i % 30)).encode()


def _pages(n: int) -> dict[str, bytes]:
    return {f"https://site{i % DOMAINS}.example/a/{i}": _body(i) for i in range(n)}


def _archived(root: Path, pages: dict[str, bytes]) -> None:
    with ContentStore(root, config=CONFIG) as store:
        for url, body in pages.items():
            store.put(url, body, content_type="text/html", title=url[-4:], fetched_at_ms=0)
        store.maintain(ages_zero=True)


def _counts(root: Path) -> tuple[int, int, int]:
    """(rows, sealed blocks, live sealed entries) as the database holds them."""
    with sqlite3.connect(root / "index.sqlite") as db:
        rows = db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        blocks, live = db.execute("SELECT COUNT(*), COALESCE(SUM(live), 0) FROM sealed_blocks").fetchone()
    return rows, blocks, live


def test_a_maintenance_pass_seals_the_archive_and_every_read_is_unchanged(tmp_path: Path) -> None:
    pages = _pages(2 * BLOCK_ENTRIES + 100)
    _archived(tmp_path, pages)
    rows, blocks, live = _counts(tmp_path)
    assert (rows, live) == (0, len(pages)) and blocks >= 3  # blocks hold BLOCK_ENTRIES at most
    with ContentStore(tmp_path, config=CONFIG) as store:
        assert len(store) == len(pages)
        assert all(store.get(url) == body for url, body in pages.items())
        entry = store.entry("https://site3.example/a/8")
        assert entry is not None
        assert (entry.title, entry.content_type, entry.location.tier) == ("/a/8", "text/html", "archive")
        listed = [e.url for e in store.search()]
        assert listed == sorted(pages)
        assert [e.url for e in store.search(domain="site2.example")] == sorted(u for u in pages if "site2." in u)
        st = store.stats()
        assert (st.urls, st.by_tier["archive"]["urls"], st.by_tier["archive"]["raw_bytes"]) == (
            len(pages),
            len(pages),
            sum(map(len, pages.values())),
        )
        assert store.verify().ok
    # the rows' pages went back to the file system: the index is the blocks and two keys a page
    assert (tmp_path / "index.sqlite").stat().st_size / len(pages) < 120


def test_deletes_tags_and_reputs_of_sealed_pages_take_them_back_to_rows(tmp_path: Path) -> None:
    pages = _pages(300)
    _archived(tmp_path, pages)
    gone, tagged, changed = "https://site0.example/a/10", "https://site1.example/a/11", "https://site2.example/a/12"
    with ContentStore(tmp_path, config=CONFIG) as store:
        store.delete(gone)
        store.tag(tagged, "keep")
        store.put(changed, b"<html>a newer body</html>", content_type="text/html", fetched_at_ms=5)
    rows, _, live = _counts(tmp_path)
    assert (rows, live) == (2, len(pages) - 3)  # the tagged and the re-put pages are rows again, the deleted gone
    with ContentStore(tmp_path, config=CONFIG) as store:
        assert len(store) == len(pages) - 1
        with pytest.raises(KeyError):
            store.get(gone)
        assert gone not in {e.url for e in store.search(domain="site0.example")}
        assert [e.url for e in store.search(tag="keep")] == [tagged]
        assert store.get(tagged) == pages[tagged]
        assert store.get(changed) == b"<html>a newer body</html>"
        assert store.entry(changed).location.tier == "hot"  # type: ignore[union-attr]


def test_a_body_already_sealed_is_not_stored_twice(tmp_path: Path) -> None:
    pages = _pages(200)
    _archived(tmp_path, pages)
    copy_of = "https://site4.example/a/19"
    with ContentStore(tmp_path, config=CONFIG) as store:
        bodies = store.stats().bodies
        store.put("https://mirror.example/copy", pages[copy_of], content_type="text/html", fetched_at_ms=9)
        assert store.stats().bodies == bodies  # the new URL refers to the archived body
        assert store.entry("https://mirror.example/copy").location == store.entry(copy_of).location  # type: ignore[union-attr]
        assert store.get("https://mirror.example/copy") == pages[copy_of]


def test_compaction_after_deleting_half_drops_the_blocks_nobody_lives_in(tmp_path: Path) -> None:
    pages = _pages(BLOCK_ENTRIES + 50)
    _archived(tmp_path, pages)
    _, blocks_before, _ = _counts(tmp_path)
    doomed = sorted(pages)[::2]
    with ContentStore(tmp_path, config=CONFIG) as store:
        for url in doomed:
            store.delete(url)
        store.maintain(ages_zero=True)
        kept = {u: b for u, b in pages.items() if u not in set(doomed)}
        assert len(store) == len(kept)
        assert all(store.get(url) == body for url, body in kept.items())
        assert store.verify().ok
    rows, blocks, live = _counts(tmp_path)
    assert rows + live == len(kept) and blocks <= blocks_before
    with sqlite3.connect(tmp_path / "index.sqlite") as db:  # no block is left with nothing live in it
        assert db.execute("SELECT COUNT(*) FROM sealed_blocks WHERE live <= 0").fetchone()[0] == 0


def test_rebuild_index_from_the_segments_seals_again_at_the_next_pass(tmp_path: Path) -> None:
    pages = _pages(400)
    _archived(tmp_path, pages)
    with ContentStore(tmp_path, config=CONFIG) as store:
        store.rebuild_index()
        assert len(store) == len(pages)
    assert _counts(tmp_path) == (len(pages), 0, 0)  # rebuilt as rows
    with ContentStore(tmp_path, config=CONFIG) as store:
        store.maintain(ages_zero=True)
    rows, _, live = _counts(tmp_path)
    assert (rows, live) == (0, len(pages))
    with ContentStore(tmp_path, config=CONFIG) as store:
        assert all(store.get(url) == body for url, body in pages.items())


def test_a_damaged_block_is_reported_and_the_next_open_rebuilds_the_index(tmp_path: Path) -> None:
    pages = _pages(300)
    _archived(tmp_path, pages)
    with sqlite3.connect(tmp_path / "index.sqlite") as db:
        block, data = db.execute("SELECT block, data FROM sealed_blocks ORDER BY block LIMIT 1").fetchone()
        db.execute("UPDATE sealed_blocks SET data = ? WHERE block = ?", (data[:20] + b"\x00" * 8 + data[28:], block))
    with ContentStore(tmp_path, config=CONFIG) as store, pytest.raises(ChecksumMismatch, match="rebuild-index"):
        for url in pages:
            store.get(url)
    assert (tmp_path / "index.sqlite.damaged").exists()
    with ContentStore(tmp_path, config=CONFIG) as store:  # set aside, every segment re-indexed
        assert store.recovered_records == len(pages)
        assert all(store.get(url) == body for url, body in pages.items())


def test_urls_that_share_a_key_slot_are_all_kept_one_sealed_and_the_others_rows(tmp_path: Path) -> None:
    pages = _pages(60)

    def key_fn(url: str) -> int:  # four groups of URLs, each group on one key slot (full keys differ)
        return (sorted(pages).index(url) % 4) | (zlib.crc32(url.encode()) & 0xFFFF) << 40

    with ContentStore(tmp_path, config=CONFIG, key_fn=key_fn) as store:
        for url, body in pages.items():
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        store.maintain(ages_zero=True)
    rows, _, live = _counts(tmp_path)
    assert (rows, live) == (len(pages) - 4, 4)
    with ContentStore(tmp_path, config=CONFIG, key_fn=key_fn) as store:
        assert all(store.get(url) == body for url, body in pages.items())
        victim = next(iter(pages))
        store.delete(victim)
        assert len(store) == len(pages) - 1
        with pytest.raises(KeyError):
            store.get(victim)
