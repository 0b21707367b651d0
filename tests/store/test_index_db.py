"""The url index database (ADR 036), the metadata-in-frame layout and the format marker, on real files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from crawlstream.errors import BadDataError
from crawlstream.store import ContentStore, StoreConfig, UnsupportedFormat
from crawlstream.store._index_legacy import entry_record, write_legacy_index
from crawlstream.store._urls import describe_url

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


def test_the_index_is_one_sqlite_database_beside_the_segments(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("index*")) == ["index.sqlite"]  # closed: the WAL folded in
    with sqlite3.connect(tmp_path / "index.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == len(pages)
        assert db.execute("SELECT tag, url FROM tags").fetchall() == [("keep", "https://example.com/p/1")]
    _assert_all_readable(tmp_path, pages)


def test_puts_after_a_reopen_are_kept_with_the_rest(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    with ContentStore(tmp_path) as store:
        store.put("https://example.com/p/3", b"replaced")
        store.put("https://example.com/new", b"new")
    with ContentStore(tmp_path) as store:
        assert store.recovered_records == 0
        assert store.get("https://example.com/p/3") == b"replaced"
        assert store.get("https://example.com/new") == b"new"
        assert len(store) == len(pages) + 1


KILLED_CHILD = """
import os, signal, sys
from pathlib import Path
from crawlstream.store import ContentStore, StoreConfig
store = ContentStore(Path(sys.argv[1]), config=StoreConfig(fsync="never"))
store.put("https://example.com/a", b"a1")
store.tag("https://example.com/a", "x")
store.sync()  # the index is committed up to here
store.put("https://example.com/b", b"b1")
store.delete("https://example.com/a")
store.put("https://example.com/a", b"a2")  # after its tombstone: live again, without the tag
store.tag("https://example.com/b", "y")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_uncommitted_tail_is_reindexed_from_the_segments_with_ops_applied_in_order(tmp_path: Path) -> None:
    """A kill loses the open transaction; the records and ops.log it left bring the index back."""
    root = tmp_path / "s"
    proc = subprocess.run([sys.executable, "-c", KILLED_CHILD, str(root)], check=False, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    with ContentStore(root) as store:
        assert store.recovered_records == 2
        assert store.get("https://example.com/a") == b"a2" and store.get("https://example.com/b") == b"b1"
        assert [e.url for e in store.search(tag="y")] == ["https://example.com/b"]
        assert list(store.search(tag="x")) == []
    with ContentStore(root) as store:
        assert store.recovered_records == 0 and len(store) == 2


def test_a_damaged_index_is_rebuilt_from_segments_keeping_tombstones_and_tags(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    db = tmp_path / "index.sqlite"
    data = bytearray(db.read_bytes())
    data[:100] = b"\xff" * 100  # the header: not a database any more
    db.write_bytes(bytes(data))
    _assert_all_readable(tmp_path, pages)


def test_an_index_whose_schema_was_damaged_is_rebuilt(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    db = tmp_path / "index.sqlite"
    db.write_bytes(db.read_bytes().replace(b"title TEXT", b"uitle TEXT"))  # a flipped byte in sqlite_master
    _assert_all_readable(tmp_path, pages)


def test_an_index_a_process_found_damaged_is_rebuilt_at_the_next_open(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    (tmp_path / "index.sqlite.damaged").touch()
    with ContentStore(tmp_path) as store:
        assert store.recovered_records == 39  # every record, from its frame
    assert not (tmp_path / "index.sqlite.damaged").exists()
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
    with pytest.raises(UnsupportedFormat, match=r"format 2.*reads format 4 \(and migrates format 3\)"):
        ContentStore(tmp_path)
    (tmp_path / "FORMAT").write_text(json.dumps({"store_format": 5}))  # a newer build's
    with pytest.raises(UnsupportedFormat, match=r"format 5.*reads format 4"):
        ContentStore(tmp_path)
    (tmp_path / "FORMAT").unlink()
    with pytest.raises(UnsupportedFormat, match="no FORMAT marker"):
        ContentStore(tmp_path)


# ------------------------------------------------------------------ migration from format 3


def _key_of(url: str) -> int:
    return describe_url(url).url_key


def _to_legacy_layout(root: Path, *, keep_database: bool = False) -> None:
    """Rewrite ``root``'s index as format 3 kept it: a snapshot named by index.log, puts after it
    (a stale put the tombstone in ops.log drops, an older put of a URL a later one replaces)."""
    with ContentStore(root) as store:
        records = sorted((entry_record(e) for e in store.search()), key=lambda r: r["q"])
    stale = dict(records[0], u="https://example.com/p/2", q=1)  # put before its tombstone
    older = dict(records[5], q=0, z=1)  # an earlier put of the same URL: the later one wins
    ends = {p.relative_to(root / "segments").as_posix(): p.stat().st_size for p in root.glob("segments/*/*.seg")}
    write_legacy_index(root, [older, *records[:20]], [stale, *records[20:]], ends, _key_of)
    if not keep_database:
        for p in root.glob("index.sqlite*"):
            p.unlink()
    (root / "FORMAT").write_text(json.dumps({"store_format": 3}))


def _assert_migrated(root: Path) -> None:
    assert json.loads((root / "FORMAT").read_text()) == {"store_format": 4}  # a format-3 build refuses it
    assert sorted(p.name for p in root.glob("index*")) == ["index.sqlite"]


def test_a_store_of_the_snapshot_layout_is_migrated_on_its_first_open(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    _to_legacy_layout(tmp_path)
    with ContentStore(tmp_path) as store:
        assert store.recovered_records == 0  # the snapshot's segment ends came along
    _assert_migrated(tmp_path)
    _assert_all_readable(tmp_path, pages)


def test_a_migration_killed_before_its_database_was_renamed_starts_again(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    _to_legacy_layout(tmp_path)
    (tmp_path / "index.sqlite.migrating").write_bytes(b"half a database")
    (tmp_path / "index.sqlite.migrating-wal").write_bytes(b"and its log")
    _assert_all_readable(tmp_path, pages)
    _assert_migrated(tmp_path)


def test_a_migration_killed_after_its_database_was_renamed_finishes_without_reading_the_old_files(
    tmp_path: Path,
) -> None:
    pages = _fill(tmp_path)
    _to_legacy_layout(tmp_path, keep_database=True)
    (tmp_path / "index-1.snap").write_bytes(b"not read again")
    _assert_all_readable(tmp_path, pages)
    _assert_migrated(tmp_path)


def test_a_snapshot_layout_with_an_unreadable_snapshot_is_migrated_from_the_segments(tmp_path: Path) -> None:
    pages = _fill(tmp_path)
    _to_legacy_layout(tmp_path)
    (tmp_path / "index-1.snap").write_bytes(b"damaged")
    with ContentStore(tmp_path) as store:
        assert store.recovered_records == 39  # as format 3 rebuilt it: every record from its frame
    _assert_migrated(tmp_path)
    _assert_all_readable(tmp_path, pages)


def test_filters_and_tags_that_are_not_text_are_refused_or_match_nothing(tmp_path: Path) -> None:
    """A lone surrogate (a file name decoded with surrogateescape) cannot be a TEXT value in SQLite."""
    with ContentStore(tmp_path) as store:
        store.put("https://example.com/a", PAGE, content_type="text/html")
        assert list(store.search(domain="\udcff.com")) == []
        assert list(store.search(tag="\udcff")) == []
        with pytest.raises(BadDataError, match="not valid text"):
            store.tag("https://example.com/a", "ok", "\udcff")
        assert store.entry("https://example.com/a").tags == set()  # type: ignore[union-attr]
