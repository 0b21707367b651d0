"""Incremental builds, compaction, collisions, manifest flips, pins and crashes."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from crawlstream.index import IndexBuilder, IndexReader, PinnedIndex, read_manifest
from crawlstream.index import _builder as builder_module
from crawlstream.lake import LakeWriter, build_table, partition_dir, write_lake_file
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.urls import canonicalize, domain_prefix, url_key


def _write(root: Path, rows: list[tuple[int, str]], *, row_group_rows: int = 8) -> None:
    with LakeWriter(root, config=LakeSettings(row_group_rows=row_group_rows)) as w:
        for ds, url in rows:
            w.add_canonical(ds, canonicalize(url))


def _batch(n: int, ds: int, start: int = 0) -> list[tuple[int, str]]:
    hosts = ["a.example.com", "b.example.com", "www.example.org", "news.site.net", "x.y.z.co.uk"]
    return [(ds, f"http://{hosts[i % len(hosts)]}/page/{i}?v={i % 3}") for i in range(start, start + n)]


def _snapshot(idx: PinnedIndex) -> dict[tuple[str, int], list[tuple[int, str, int | None]]]:
    out = {}
    for did in range(idx.domain_count()):
        domain = idx.domain_at(did)
        for dc in idx.datasets_for_domain(domain) or []:
            page = idx.urls(domain, dc.dataset_id, 0, 10**6)
            assert page is not None and page.total == dc.url_count == len(page.items)
            out[(domain, dc.dataset_id)] = [(i.url_key, i.url, i.ts_ms) for i in page.items]
    return out


def test_incremental_and_compacted_builds_answer_like_a_full_rebuild(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=3))
    _write(tmp_path, _batch(40, 1) + _batch(30, 2))
    first = builder.build()
    _write(tmp_path, _batch(40, 1, start=20) + _batch(10, 3))  # overlaps: a replay of 20 rows
    second = builder.build()
    assert first.version and second.version and second.files_scanned > 0
    assert second.rows_scanned < first.rows_scanned + 50  # only the new files were scanned
    assert second.fragmented_pairs > 0
    reader = IndexReader(tmp_path)
    with reader.pin() as idx:
        incremental = _snapshot(idx)
    builder.build(full=True)
    with reader.pin() as idx:
        full = _snapshot(idx)
    compacted = builder.compact()
    assert compacted.compacted_partitions > 0 and compacted.fragmented_pairs == 0
    with reader.pin() as idx:
        after_compaction = _snapshot(idx)
    assert incremental == full == after_compaction
    assert len(after_compaction[("example.com", 1)]) == 24  # 60 distinct URLs, 2 of 5 hosts
    reader.close()


def test_a_version_in_an_older_postings_format_is_rebuilt_in_full(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=3))
    _write(tmp_path, _batch(40, 1))
    first = builder.build()
    manifest = read_manifest(tmp_path)
    assert first.version and manifest is not None
    postings = tmp_path / manifest.current().files["postings"]
    postings.write_bytes(b"PST3\x03\x00\x00\x00" + postings.read_bytes()[8:])  # as an older build wrote it
    _write(tmp_path, _batch(10, 2))
    second = builder.build()
    assert second.rows_scanned == 50  # every file scanned again, not only the new ones


def test_build_without_new_files_writes_no_version(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(10, 1))
    assert builder.build().version is not None
    assert builder.build().version is None


def test_forced_url_key_collision_is_answered_by_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two different URLs under one url_key: each lookup and page returns its own URL."""
    import crawlstream.lake._schema

    a, b = canonicalize("http://www.collide.com/a"), canonicalize("http://www.collide.com/b")
    key = url_key(a)
    real = crawlstream.lake._schema.derive_url_keys
    # Force the collision where readers derive keys, as 56 bits will at scale.
    monkeypatch.setattr(crawlstream.lake._schema, "derive_url_keys",
                        lambda d, urls: [key] * len(urls) if d == "collide.com" else real(d, urls))
    table, _ = build_table([a.url, b.url], [a.domain, b.domain], [1, 2], [None, None])
    write_lake_file(table, tmp_path, partition_dir(7, domain_prefix(a.domain)), row_group_rows=8, zstd_level=3)
    only_b, _ = build_table([b.url], [b.domain], [3], [None])
    write_lake_file(only_b, tmp_path, partition_dir(8, domain_prefix(b.domain)), row_group_rows=8, zstd_level=3)
    IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2)).build()
    with IndexReader(tmp_path).pin() as idx:
        assert idx.lookup_url(a.url) == [7]
        assert idx.lookup_url(b.url) == [7, 8]
        page = idx.urls("collide.com", 7, 0, 10)
        assert page is not None
        assert [(i.url_key, i.url) for i in page.items] == [(key, a.url), (key, b.url)]


def test_manifest_flip_during_concurrent_reads_never_mixes_versions(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(50, 1))
    builder.build()
    reader = IndexReader(tmp_path)
    errors: list[BaseException] = []
    seen: set[str] = set()
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                with reader.pin() as idx:
                    first = idx.datasets_for_domain("example.com")
                    page = idx.urls("example.com", 1, 0, 1000)
                    again = idx.datasets_for_domain("example.com")
                    assert first == again and page is not None
                    counts = {d.dataset_id: d.url_count for d in first or []}
                    assert page.total == counts[1] == len(page.items)
                    seen.add(idx.version)
        except BaseException as exc:  # report any failure of the thread to the test
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for round_ in range(4):
        _write(tmp_path, _batch(10, 1, start=100 + 10 * round_))
        builder.build()
        builder.gc(keep_versions=2)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(seen) >= 2


def test_gc_keeps_a_pinned_version_and_removes_it_once_released(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(10, 1))
    v1 = builder.build().version
    reader = IndexReader(tmp_path)
    pinned = reader.pin()
    assert pinned.version == v1
    for i in range(3):
        _write(tmp_path, _batch(5, 2, start=10 * i))
        builder.build()
    result = builder.gc(keep_versions=1)
    assert result.pinned_versions == [v1]
    assert (tmp_path / "index" / str(v1)).is_dir()
    assert pinned.datasets_for_domain("example.com") is not None  # still serving
    pinned.release()
    with reader.pin() as idx:
        assert idx.version != v1  # the reader moved on and closed v1
    result = builder.gc(keep_versions=1)
    assert v1 in result.removed_versions
    assert not (tmp_path / "index" / str(v1)).exists()


def test_crash_before_the_flip_leaves_the_previous_version_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(10, 1))
    v1 = builder.build().version
    _write(tmp_path, _batch(10, 2))

    def crash(*_args: object) -> None:
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(builder_module, "write_manifest", crash)
    with pytest.raises(KeyboardInterrupt):
        builder.build()
    monkeypatch.undo()
    manifest = read_manifest(tmp_path)
    assert manifest is not None and manifest.current_version == v1
    assert [v.version for v in manifest.versions] == [v1]
    with IndexReader(tmp_path).pin() as idx:
        assert idx.version == v1 and idx.dataset_ids() == [1]
    orphan = [p.name for p in (tmp_path / "index").iterdir() if p.is_dir() and p.name != v1]
    assert orphan
    assert set(orphan) <= set(builder.gc().removed_versions)
    assert builder.build().files_scanned > 0  # the next build picks the files up


def test_a_half_written_temp_version_is_never_referenced(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(10, 1))
    v1 = builder.build().version
    (tmp_path / "index" / ".tmp-000009-x").mkdir()
    assert ".tmp-000009-x" in builder.gc().removed_tmp_dirs
    assert read_manifest(tmp_path).current_version == v1  # type: ignore[union-attr]


def test_gc_deletes_lake_files_retired_by_compaction_only_after_their_versions(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(20, 1))
    builder.build()
    _write(tmp_path, _batch(20, 1, start=10))
    builder.build()
    before = sorted(p for p in (tmp_path / "urls").rglob("part-*.parquet"))
    builder.compact()
    assert builder.gc(keep_versions=3).removed_lake_files == []
    removed = builder.gc(keep_versions=1).removed_lake_files
    assert removed and all((tmp_path / r) in before for r in removed)
    with IndexReader(tmp_path).pin() as idx:
        page = idx.urls("example.com", 1, 0, 100)
        assert page is not None and page.total == 12


def test_reader_without_an_index_says_how_to_build_one(tmp_path: Path) -> None:
    from crawlstream.errors import StorageUnavailable

    with pytest.raises(StorageUnavailable, match="crawlstream index build"):
        IndexReader(tmp_path).pin()
    shutil.rmtree(tmp_path)


def test_a_corrupt_postings_block_is_refused_on_first_use(tmp_path: Path) -> None:
    from crawlstream.errors import ChecksumMismatch

    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=1))
    _write(tmp_path, _batch(10, 1))
    version = builder.build().version
    shard = tmp_path / "index" / str(version) / "postings.bin"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x40
    shard.write_bytes(bytes(data))
    with IndexReader(tmp_path).pin() as idx, pytest.raises(ChecksumMismatch, match="index build --full"):
        idx.datasets_for_domain("example.com")


def test_a_pin_held_by_another_process_blocks_gc_until_that_process_dies(tmp_path: Path) -> None:
    import subprocess
    import sys

    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2))
    _write(tmp_path, _batch(10, 1))
    v1 = builder.build().version
    script = (
        "import sys, time; from pathlib import Path; from crawlstream.index import IndexReader\n"
        "p = IndexReader(Path(sys.argv[1])).pin(); print(p.version, flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == v1
        _write(tmp_path, _batch(5, 2))
        builder.build()
        assert builder.gc(keep_versions=1).pinned_versions == [v1]
    finally:
        proc.kill()  # the kernel drops the dead reader's flock: no stale pin to clean up
        proc.wait(timeout=10)
    assert v1 in builder.gc(keep_versions=1).removed_versions
