"""The index reader on a real S3 server (versitygw): requests per query, the manifest poll,
checksums (a flipped byte in an object is an error, never a wrong answer), an outage, and
versions pinned across a flip."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.index import IndexBuilder, IndexReader, NotCached, VersionGone, read_manifest
from crawlstream.objectstore import ObjectStore, RetryPolicy
from crawlstream.settings import IndexSettings, LakeSettings
from tests.api._lake import expected_urls, write_lake
from tests.index._s3 import s3_store, upload_tree

LAKE = {
    1: [f"https://flip.com/a/{i:03d}" for i in range(90)] + [f"https://other.org/{i}" for i in range(20)],
    2: [f"https://flip.com/b/{i:03d}" for i in range(10)],
}
MORE = {1: [f"https://flip.com/a/{i:03d}x" for i in range(30)], 3: ["https://flip.com/c"]}


def _build(root: Path, lake: dict[int, list[str]]) -> str:
    write_lake(root, lake)
    version = IndexBuilder(root, index=IndexSettings(postings_shards=4), lake=LakeSettings(row_group_rows=16)).build()
    assert version.version is not None
    return version.version


def _flip(server: LocalS3, store: ObjectStore, rel: str, at: int | None = None) -> None:
    """Flip one byte of the object ``rel`` in the server's backing file (same size)."""
    path = server.path_of(store.location.bucket, store.key(rel))
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0x5A
    path.write_bytes(bytes(data))


def _gets(store: ObjectStore) -> int:
    return store.requests["GET"]


def test_cold_domain_is_one_get_once_open_warm_none_and_pages_read_row_groups_in_one_get(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str
) -> None:
    _build(tmp_path, LAKE)
    store = s3_store(s3_server, s3_prefix)
    upload_tree(tmp_path, store)
    for whole_max in (16 << 20, 0):  # the d2d file in memory, then read by verified ranges
        reader = IndexReader(index_store=store, lake_store=store, whole_file_max_bytes=whole_max)
        with reader.pin() as idx:  # opens the version: manifest, small files, postings head
            before = _gets(store)
            counts = idx.datasets_for_domain("flip.com")
            cold = _gets(store) - before
            assert counts is not None and [(d.dataset_id, d.url_count) for d in counts] == [(1, 90), (2, 10)]
            assert cold == 1, cold  # the postings block (a small d2d file is one chunk, read at open)
            before = _gets(store)
            assert idx.datasets_for_domain("flip.com") == counts
            assert _gets(store) == before  # warm: from memory
            before = _gets(store)
            page = idx.urls("flip.com", 1, 0, 20)  # 2 row groups of 16 rows, one lake file
            assert page is not None and [i.url for i in page.items] == expected_urls("flip.com", 1, LAKE)[:20]
            assert _gets(store) - before <= 3  # footer + one coalesced GET per row group
        reader.close()


def test_manifest_is_polled_at_most_every_interval_and_a_flip_is_served_after_it(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str
) -> None:
    first = _build(tmp_path, LAKE)
    store = s3_store(s3_server, s3_prefix)
    upload_tree(tmp_path, store)
    # the interval outlasts a build and upload of this lake on a loaded machine (~0.5-1 s)
    reader = IndexReader(index_store=store, lake_store=store, manifest_poll_s=4.0)
    reader.pin().release()
    before = _gets(store)
    for _ in range(50):
        with reader.pin() as idx:
            assert idx.version == first
    assert _gets(store) - before <= 1  # 50 pins inside one interval: at most one poll
    second = _build(tmp_path, MORE)
    upload_tree(tmp_path, store)
    with reader.pin() as idx:
        assert idx.version == first  # not polled yet (or polled just before the flip)
        old = idx
        time.sleep(4.1)
        with reader.pin() as new:
            assert new.version == second
            assert [d.dataset_id for d in new.datasets_for_domain("flip.com") or []] == [1, 2, 3]
        assert [d.dataset_id for d in old.datasets_for_domain("flip.com") or []] == [1, 2]  # still pinned
    reader.close()


def test_flipped_bytes_in_index_objects_raise_checksum_mismatch_never_a_wrong_answer(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str
) -> None:
    _build(tmp_path, LAKE)
    store = s3_store(s3_server, s3_prefix)
    upload_tree(tmp_path, store)
    manifest = read_manifest(tmp_path)
    assert manifest is not None
    files = manifest.current().files
    # a postings block: the block's CRC (read twice: a torn read is retried once)
    reader = IndexReader(index_store=store, lake_store=store, whole_file_max_bytes=0)
    with reader.pin() as idx:
        _flip(s3_server, store, files["postings"], at=-20)
        before = _gets(store)
        with pytest.raises(ChecksumMismatch, match="CRC"):
            idx.datasets_for_domain("flip.com")
        assert _gets(store) - before >= 2
    reader.close()
    # the domain-to-datasets file, read whole or by ranges (each chunk's CRC32 is in the manifest)
    _flip(s3_server, store, files["d2d_roar"], at=-5)
    for whole_max in (16 << 20, 0):
        with pytest.raises(ChecksumMismatch, match=r"domain_to_datasets\.roar"):
            IndexReader(index_store=store, lake_store=store, whole_file_max_bytes=whole_max).pin()
    # a small file read whole at open
    _flip(s3_server, store, files["domains"])
    with pytest.raises(ChecksumMismatch, match=r"domains\.zst"):
        IndexReader(index_store=store, lake_store=store).pin()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_flipped_byte_in_a_lake_file_is_an_error_not_wrong_rows(
    where: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locally the Parquet page checksum catches it (other row groups are still served); on S3
    the SDK's checksum of a whole-object GET (small files: the footer read fetches it all) or
    the page checksum does."""
    import crawlstream.lake._writer as writer

    real = writer.parquet_options
    monkeypatch.setattr(writer, "parquet_options", lambda level: {**real(level), "write_page_checksum": True})
    _build(tmp_path, LAKE)
    lake_files = sorted((tmp_path / "urls" / "dataset_id=1").rglob("*.parquet"))
    rel = next(p.relative_to(tmp_path).as_posix() for p in lake_files
               if pq.read_table(p, columns=["domain"]).column(0)[0].as_py() == "flip.com")
    rg0 = pq.ParquetFile(tmp_path / rel).metadata.row_group(0)
    col = next(rg0.column(i) for i in range(rg0.num_columns) if rg0.column(i).path_in_schema == "path_query")
    at = col.data_page_offset + col.total_compressed_size - 8  # inside a data page of row group 0
    if where == "s3":
        server: LocalS3 = request.getfixturevalue("s3_server")
        store = s3_store(server, request.getfixturevalue("s3_prefix"))
        upload_tree(tmp_path, store)
        _flip(server, store, rel, at=at)
        reader = IndexReader(index_store=store, lake_store=store)
    else:
        data = bytearray((tmp_path / rel).read_bytes())
        data[at] ^= 0x5A
        (tmp_path / rel).write_bytes(bytes(data))
        reader = IndexReader(tmp_path)
    with reader.pin() as idx, pytest.raises(ChecksumMismatch, match="corrupt"):
        idx.urls("flip.com", 1, 0, 10)
    if where == "local":
        with reader.pin() as idx:  # row groups the damage does not touch are still served
            page = idx.urls("flip.com", 1, 32, 10)
            assert page is not None and [i.url for i in page.items] == expected_urls("flip.com", 1, LAKE)[32:42]
    reader.close()


def test_a_local_small_file_is_verified_at_open(tmp_path: Path) -> None:
    _build(tmp_path, LAKE)
    manifest = read_manifest(tmp_path)
    assert manifest is not None
    path = tmp_path / manifest.current().files["files_tsv"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch, match=r"files\.tsv\.zst"):
        IndexReader(tmp_path).pin()


def test_an_outage_fails_fast_serves_what_is_cached_and_recovers_by_itself(tmp_path: Path) -> None:
    _build(tmp_path, LAKE)
    with LocalS3() as server:
        store = s3_store(server, "s3://crawlstream/outage")
        upload_tree(tmp_path, store)
        store.retry = RetryPolicy(deadline_s=1.0)
        reader = IndexReader(index_store=store, lake_store=store, manifest_poll_s=0.2)
        with reader.pin() as idx:
            warm = idx.datasets_for_domain("flip.com")
        server.stop(keep_data=True)
        try:
            time.sleep(0.3)  # a manifest poll is due: it fails, the current version stays
            with reader.pin() as idx:
                assert idx.datasets_for_domain("flip.com") == warm  # cached: answered
                started = time.monotonic()
                with pytest.raises(StorageUnavailable):
                    idx.datasets_for_domain("other.org")  # its block is not cached
                assert time.monotonic() - started < 2.0
                started = time.monotonic()
                with pytest.raises(StorageUnavailable):
                    idx.urls("flip.com", 1, 0, 10)
                assert time.monotonic() - started < 0.1  # the breaker: no second wait
        finally:
            server.restart()
        deadline = time.monotonic() + 10
        while True:
            try:
                with reader.pin() as idx:
                    assert [d.dataset_id for d in idx.datasets_for_domain("other.org") or []] == [1]
                    break
            except StorageUnavailable:
                assert time.monotonic() < deadline, "the reader did not recover"
                time.sleep(0.2)
        reader.close()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_listed_old_version_is_served_by_name_and_a_removed_one_is_version_gone(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=4, keep_versions=1),
                           lake=LakeSettings(row_group_rows=16))
    write_lake(tmp_path, LAKE)
    first = builder.build().version
    store = None
    if where == "s3":
        store = s3_store(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_prefix"))
        upload_tree(tmp_path, store)
        reader = IndexReader(index_store=store, lake_store=store, manifest_poll_s=0.05)
    else:
        reader = IndexReader(tmp_path)
    reader.pin().release()
    write_lake(tmp_path, MORE)
    second = builder.build().version
    if store is not None:
        upload_tree(tmp_path, store)
        time.sleep(0.1)
    assert reader.pin().version == second
    with reader.pin(version=first) as idx:
        assert idx.version == first
        assert [d.dataset_id for d in idx.datasets_for_domain("flip.com") or []] == [1, 2]
    assert first is not None and first in builder.gc().removed_versions
    if store is not None:
        store.delete_prefix(f"index/{first}")
        upload_tree(tmp_path, store)
        time.sleep(0.1)
    with pytest.raises(VersionGone, match="start over"):
        reader.pin(version=first)
    with pytest.raises(VersionGone):
        reader.pin(version="000999-20990101T000000Z")
    reader.close()


def test_a_cached_only_pin_never_reads_s3_and_the_block_cache_is_bounded_by_bytes(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str
) -> None:
    _build(tmp_path, LAKE)
    store = s3_store(s3_server, s3_prefix)
    upload_tree(tmp_path, store)
    reader = IndexReader(index_store=store, lake_store=store, postings_cache_bytes=1)
    with pytest.raises(NotCached):
        reader.pin(cached_only=True)  # nothing open yet: the manifest poll would read S3
    reader.pin().release()
    before = dict(store.requests)
    with reader.pin(cached_only=True) as idx, pytest.raises(NotCached):
        idx.datasets_for_domain("flip.com")  # its block is not in memory
    assert dict(store.requests) == before
    with reader.pin() as idx:
        idx.datasets_for_domain("flip.com")
        idx.datasets_for_domain("flip.com")  # a 1-byte budget keeps no block: fetched again
    assert store.requests["GET"] - before.get("GET", 0) == 2
    reader.close()
