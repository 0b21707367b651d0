"""ContentStore behaviour on real files under tmp_path."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawlstream.errors import ChecksumMismatch
from crawlstream.store import ContentStore, StoreConfig
from crawlstream.urls import url_key

PAGE = b"<html><head><title>t</title></head><body>" + b"<p>hello world</p>" * 200 + b"</body></html>"


def _open(root: Path, key_fn: Callable[[str], int] | None = None, **config: Any) -> ContentStore:
    return ContentStore(root, config=StoreConfig(**config), key_fn=key_fn)


def test_put_then_get_returns_identical_bytes_after_reopen(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://Example.com/a", PAGE, content_type="text/html", title="t")
    with _open(tmp_path) as store:
        assert store.get("https://example.com/a") == PAGE
        entry = store.entry("https://example.com/a")
        assert entry is not None and (entry.content_type, entry.title, entry.domain) == (
            "text/html",
            "t",
            "example.com",
        )


def test_reput_of_same_url_and_body_is_a_no_op(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        first = store.put("https://example.com/a", PAGE)
        size = store.stats().segment_bytes
        assert store.put("https://example.com/a", PAGE) == first
        assert store.stats().segment_bytes == size


def test_reput_with_new_body_replaces_old_one(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", PAGE)
        store.put("https://example.com/a", b"new body")
    with _open(tmp_path) as store:
        assert store.get("https://example.com/a") == b"new body" and len(store) == 1


def test_identical_bodies_under_two_urls_are_stored_once(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        a = store.put("https://example.com/a", PAGE)
        size = store.stats().segment_bytes
        b = store.put("https://other.org/b", PAGE)
        assert a == b
        assert store.stats().segment_bytes - size < 200  # a small reference record, not a second body
        assert store.stats().bodies == 1
    with _open(tmp_path) as store:
        assert store.get("https://other.org/b") == PAGE


def test_delete_takes_effect_at_once_and_survives_reopen(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", PAGE)
        store.put("https://example.com/b", b"b")
        assert store.delete("https://example.com/a")
        with pytest.raises(KeyError):
            store.get("https://example.com/a")
        assert not store.delete("https://example.com/a")
    with _open(tmp_path) as store:
        with pytest.raises(KeyError):
            store.get("https://example.com/a")
        assert [e.url for e in store.search()] == ["https://example.com/b"]


def test_put_after_delete_resurrects_the_url(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", PAGE, tags=["x"])
        store.delete("https://example.com/a")
        store.put("https://example.com/a", PAGE)
    with _open(tmp_path) as store:
        assert store.get("https://example.com/a") == PAGE
        entry = store.entry("https://example.com/a")
        assert entry is not None and entry.tags == set()


def test_deleting_one_of_two_deduped_urls_keeps_the_other(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", PAGE)
        store.put("https://example.com/b", PAGE)
        store.delete("https://example.com/a")
        store.recompress(0)
    with _open(tmp_path) as store:
        assert store.get("https://example.com/b") == PAGE


def test_a_body_no_live_url_has_any_more_is_stored_whole_again(tmp_path: Path) -> None:
    """Deleted or replaced, the last URL with a body takes the body's lookup by hash with it: the
    next URL with that body gets the body, not a reference to a record maintenance may drop."""
    body = random.Random(1).randbytes(3000)  # incompressible: stored whole it is > 3,000 bytes
    with _open(tmp_path) as store:
        store.put("https://example.com/a", body)
        store.put("https://example.com/b", body)
        store.delete("https://example.com/a")
        size = store.stats().segment_bytes
        store.put("https://example.com/c", body)  # b still has it: a reference
        assert store.stats().segment_bytes - size < 200
        store.delete("https://example.com/b")
        store.put("https://example.com/c", b"another body")  # the last URL with it moves on
        size = store.stats().segment_bytes
        store.put("https://example.com/d", body)
        assert store.stats().segment_bytes - size > 3000  # stored whole
    with _open(tmp_path) as store:
        assert store.get("https://example.com/d") == body
        assert store.get("https://example.com/c") == b"another body"


def test_tags_and_search_by_domain_path_prefix_and_tag(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://www.example.com/news/1", b"1", tags=["news"])
        store.put("https://example.com/news/2", b"2")
        store.put("https://example.com/shop/3", b"3")
        store.put("https://other.org/news/4", b"4", tags=["news"])
        store.tag("https://example.com/news/2", "news", "keep")
        store.untag("https://example.com/news/2", "keep")
    with _open(tmp_path) as store:
        assert [e.url for e in store.search(domain="example.com")] == [
            "https://example.com/news/2",
            "https://example.com/shop/3",
            "https://www.example.com/news/1",
        ]
        assert [e.url for e in store.search(domain="example.com", path_prefix="/news/")] == [
            "https://example.com/news/2",
            "https://www.example.com/news/1",
        ]
        assert [e.url for e in store.search(tag="news")] == [
            "https://example.com/news/2",
            "https://other.org/news/4",
            "https://www.example.com/news/1",
        ]
        assert list(store.search(tag="keep")) == []
        assert [e.url for e in store.search(domain="other.org", tag="news")] == ["https://other.org/news/4"]


def test_tagging_an_unknown_url_raises_key_error(tmp_path: Path) -> None:
    with _open(tmp_path) as store, pytest.raises(KeyError):
        store.tag("https://example.com/none", "x")


def test_colliding_url_keys_return_their_own_urls(tmp_path: Path) -> None:
    """Every URL gets the same key: the stored URL must pick the right entry."""
    with _open(tmp_path, key_fn=lambda url: 42) as store:
        store.put("https://example.com/a", b"body a")
        store.put("https://example.com/b", b"body b")
        store.put("https://other.org/c", b"body c")
        store.delete("https://example.com/b")
    with _open(tmp_path, key_fn=lambda url: 42) as store:
        assert store.get("https://example.com/a") == b"body a"
        assert store.get_by_key(42, "https://other.org/c") == b"body c"
        with pytest.raises(KeyError):
            store.get("https://example.com/b")
        assert store.rebuild_index() == 3
        assert store.get("https://example.com/a") == b"body a" and len(store) == 2


def test_get_by_key_uses_the_url_library_key(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", b"x")
        assert store.get_by_key(url_key("https://example.com/a"), "https://example.com/a") == b"x"


def test_recompress_moves_old_records_to_cold_with_dictionaries(tmp_path: Path) -> None:
    pages = {f"https://shop.example.com/p/{i}": PAGE.replace(b"hello", f"item {i} ".encode()) for i in range(40)}
    with _open(tmp_path, dict_min_samples=8, global_dict_min_samples=1000) as store:
        for i, (url, body) in enumerate(pages.items()):
            store.put(url, body, fetched_at_ms=1_000 + i)
        store.put("https://new.example.org/", PAGE, fetched_at_ms=10_000_000)
        report = store.recompress(older_than_s=60, now_ms=5_000_000)
        assert report.moved_urls == 40 and report.dictionaries_trained == 1
        assert report.segments_removed == []  # the hot segment still holds the new page
    with _open(tmp_path) as store:
        for url, body in pages.items():
            entry = store.entry(url)
            assert entry is not None and entry.location.tier == "cold" and entry.location.dict_id >= 32768
            assert store.get(url) == body
        assert store.entry("https://new.example.org/").location.tier == "hot"  # type: ignore[union-attr]


def test_hot_puts_use_a_domain_dictionary_once_trained(tmp_path: Path) -> None:
    with _open(tmp_path, dict_min_samples=8) as store:
        for i in range(20):
            store.put(f"https://shop.example.com/p/{i}", PAGE + str(i).encode(), fetched_at_ms=0)
        store.recompress(0)
        loc = store.put("https://shop.example.com/p/new", PAGE + b"new")
        assert loc.tier == "hot" and loc.dict_id >= 32768
        assert store.get("https://shop.example.com/p/new") == PAGE + b"new"


def test_maintain_walks_records_down_the_tiers_by_age(tmp_path: Path) -> None:
    day_ms = 86_400_000
    with _open(tmp_path, warm_after_s=1 * 86400, cold_after_s=10 * 86400, archive_after_s=100 * 86400) as store:
        now = 1000 * day_ms
        for age_days, name in ((0, "new"), (5, "warm"), (50, "cold"), (500, "archive")):
            store.put(f"https://example.com/{name}", PAGE + name.encode(), fetched_at_ms=now - age_days * day_ms)
        store.maintain(now_ms=now)
        tiers = {e.path: e.location.tier for e in store.search()}
        assert tiers == {"/new": "hot", "/warm": "warm", "/cold": "cold", "/archive": "archive"}
        assert all(store.get(f"https://example.com{p}") == PAGE + p[1:].encode() for p in tiers)


def test_flipped_bytes_are_reported_quarantined_and_never_served(tmp_path: Path) -> None:
    urls = [f"https://example.com/{i}" for i in range(5)]
    with _open(tmp_path) as store:
        for i, url in enumerate(urls):
            store.put(url, PAGE + bytes([i]))
        victim = store.entry(urls[2])
        assert victim is not None
    seg = tmp_path / "segments" / victim.location.segment
    data = bytearray(seg.read_bytes())
    data[victim.location.offset + victim.location.length - 10] ^= 0x55
    seg.write_bytes(bytes(data))
    with _open(tmp_path) as store:
        report = store.verify()
        assert [(p.offset, p.kind) for p in report.problems] == [(victim.location.offset, "corrupt")]
        with pytest.raises(ChecksumMismatch):
            store.get(urls[2])
        for i in (0, 1, 3, 4):
            assert store.get(urls[i]) == PAGE + bytes([i])
    invalid = seg.with_name(seg.name + ".invalid")
    assert invalid.read_bytes() == bytes(data[victim.location.offset : victim.location.offset + victim.location.length])
    with _open(tmp_path) as store, pytest.raises(ChecksumMismatch):  # quarantine survives a restart
        store.get(urls[2])


def test_corrupt_record_found_on_read_is_quarantined(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", PAGE)
        loc = store.put("https://example.com/b", PAGE + b"b")
        seg = tmp_path / "segments" / loc.segment
        data = bytearray(seg.read_bytes())
        data[loc.offset + loc.length - 1] ^= 0xFF
        seg.write_bytes(bytes(data))
        with pytest.raises(ChecksumMismatch):
            store.get("https://example.com/b")
        assert store.quarantined() == [(loc.segment, loc.offset)]
        assert store.get("https://example.com/a") == PAGE


def test_rebuild_index_restores_every_url_from_segment_headers(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        for i in range(10):
            store.put(f"https://example.com/{i}", PAGE + bytes([i]), content_type="text/html", title=f"t{i}")
        store.put("https://copy.example.org/", PAGE + bytes([3]))
        store.tag("https://example.com/1", "x")
        store.delete("https://example.com/2")
        store.recompress(0)
        store.put("https://example.com/late", b"late")
    for index_file in tmp_path.glob("index.sqlite*"):  # the index lost: start-up re-indexes every record
        index_file.unlink()
    with _open(tmp_path) as store:
        assert store.rebuild_index() == 11  # the deleted page's segment was garbage-collected
        assert len(store) == 11
        assert store.get("https://copy.example.org/") == PAGE + bytes([3])
        assert store.get("https://example.com/late") == b"late"
        assert [e.url for e in store.search(tag="x")] == ["https://example.com/1"]
        entry = store.entry("https://example.com/5")
        assert entry is not None and entry.title == "t5"
        with pytest.raises(KeyError):
            store.get("https://example.com/2")


def test_stats_count_urls_bodies_and_stored_bytes(tmp_path: Path) -> None:
    with _open(tmp_path) as store:
        store.put("https://example.com/a", PAGE)
        store.put("https://example.com/b", PAGE)
        st = store.stats()
        assert (st.urls, st.bodies, st.raw_bytes) == (2, 1, 2 * len(PAGE))
        assert st.stored_bytes == st.segment_bytes + st.dict_bytes + st.index_bytes + st.other_bytes
        # the pages compress; the index database starts at ~48 KB (a page of 4 KiB per table and index),
        # more than two pages' worth: a store this small keeps more bytes than it holds (ADR 036)
        assert st.segment_bytes < st.raw_bytes and 0 < st.index_bytes <= 64 * 1024
