"""The compacted index snapshot, the metadata-in-frame layout and the format marker, on real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlstream.store import ContentStore, StoreConfig, UnsupportedFormat, decode_log_records

PAGE = b"<html><head><title>t</title></head><body>" + b"<p>hello world</p>" * 200 + b"</body></html>"


def _fill(root: Path) -> dict[str, bytes]:
    pages = {f"https://example.com/p/{i}": PAGE + str(i).encode() * 20 for i in range(40)}
    with ContentStore(root, config=StoreConfig(dict_min_samples=8)) as store:
        for url, body in pages.items():
            store.put(url, body, content_type="text/html", title=url[-2:], fetched_at_ms=0)
        store.tag("https://example.com/p/1", "keep")
        store.delete("https://example.com/p/2")
        store.recompress(0, now_ms=1)
    del pages["https://example.com/p/2"]
    return pages


def _assert_all_readable(root: Path, pages: dict[str, bytes]) -> None:
    with ContentStore(root) as store:
        assert len(store) == len(pages)
        for url, body in pages.items():
            assert store.get(url) == body
        entry = store.entry("https://example.com/p/7")
        assert entry is not None and (entry.title, entry.content_type, entry.location.tier) == (
            "/7",
            "text/html",
            "cold",
        )
        assert [e.url for e in store.search(tag="keep")] == ["https://example.com/p/1"]
        with pytest.raises(KeyError):
            store.get("https://example.com/p/2")


def test_recompress_compacts_index_log_into_a_snapshot_named_by_the_log(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    records, _, _ = decode_log_records((tmp_path / "index.log").read_bytes())
    assert records == [{"snap": 1}]
    assert [p.name for p in tmp_path.glob("index-*.snap")] == ["index-1.snap"]
    # 39 live URLs: hot and superseded entries dropped, columns compressed
    assert (tmp_path / "index-1.snap").stat().st_size < 39 * 60
    _assert_all_readable(tmp_path, pages)


def test_puts_after_a_snapshot_are_replayed_from_the_log_on_top_of_it(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    with ContentStore(tmp_path) as store:
        store.put("https://example.com/p/3", b"replaced")
        store.put("https://example.com/new", b"new")
    with ContentStore(tmp_path) as store:
        assert store.get("https://example.com/p/3") == b"replaced"
        assert store.get("https://example.com/new") == b"new"
        assert len(store) == len(pages) + 1


def test_snapshot_written_but_never_named_by_the_log_is_ignored_and_removed(tmp_path: Path) -> None:
    """A kill between writing index-<gen+1>.snap and swapping index.log: the old log stays authoritative."""
    pages = _fill(tmp_path)
    stray = tmp_path / "index-2.snap"
    stray.write_bytes(b"half-written garbage")
    (tmp_path / "index-2.snap.tmp").write_bytes(b"torn")
    _assert_all_readable(tmp_path, pages)
    assert not stray.exists() and not (tmp_path / "index-2.snap.tmp").exists()


def test_old_snapshot_left_after_the_log_swap_is_removed(tmp_path: Path) -> None:
    """A kill after the log swap but before the previous snapshot was deleted."""
    pages = _fill(tmp_path)
    (tmp_path / "index-0.snap").write_bytes(b"previous generation")
    _assert_all_readable(tmp_path, pages)
    assert [p.name for p in tmp_path.glob("index-*.snap")] == ["index-1.snap"]


def test_damaged_snapshot_rebuilds_the_index_from_segments_keeping_tombstones_and_tags(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    snap = tmp_path / "index-1.snap"
    data = bytearray(snap.read_bytes())
    data[len(data) // 2] ^= 0xFF
    snap.write_bytes(bytes(data))
    _assert_all_readable(tmp_path, pages)


def test_rebuild_index_reads_urls_and_titles_from_inside_the_frames(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    for p in tmp_path.glob("index*"):
        p.unlink()
    with ContentStore(tmp_path) as store:  # no index at all: every record re-indexed from its frame
        assert store.recovered_records == 39  # the deleted page was never recompressed
        assert store.rebuild_index() == 39
    _assert_all_readable(tmp_path, pages)


def test_store_of_another_format_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    _fill(tmp_path)
    (tmp_path / "FORMAT").write_text(json.dumps({"store_format": 1}))
    with pytest.raises(UnsupportedFormat, match=r"format 1.*re-ingest"):
        ContentStore(tmp_path)
    (tmp_path / "FORMAT").write_text(json.dumps({"store_format": 2}))  # before group records
    with pytest.raises(UnsupportedFormat, match=r"format 2.*reads format 3"):
        ContentStore(tmp_path)
    (tmp_path / "FORMAT").unlink()
    with pytest.raises(UnsupportedFormat, match="no FORMAT marker"):
        ContentStore(tmp_path)
