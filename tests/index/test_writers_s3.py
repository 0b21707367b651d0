"""The writers on S3 (versitygw on loopback): the lake and the index versions built there hold
what a local build holds; page checksums; compare-and-swap flips; gc's grace; the compactor lease."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import InvalidUrl
from crawlstream.index import IndexBuilder, IndexReader, ManifestConflict, read_manifest
from crawlstream.index import _builder as builder_module
from crawlstream.index.service import LEASE_REL, IndexCompactor, Lease
from crawlstream.lake import LakeWriter, list_lake_files
from crawlstream.objectstore import ObjectStore
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.urls import canonicalize
from tests.index._s3 import mirror, s3_store
from tests.index.conftest import _reddit
from tests.index.test_versions import _batch, _snapshot


def _write(store: ObjectStore | Path, rows: list[tuple[int, str]], *, skip_invalid: bool = False) -> None:
    with LakeWriter(store, config=LakeSettings(row_group_rows=8)) as w:
        for ds, url in rows:
            try:
                w.add_canonical(ds, canonicalize(url))
            except InvalidUrl:
                if not skip_invalid:
                    raise


def _served(root: Path) -> dict[tuple[str, int], list[tuple[int, str, int | None]]]:
    reader = IndexReader(root)
    try:
        with reader.pin() as idx:
            return _snapshot(idx)
    finally:
        reader.close()


@pytest.fixture
def s3(s3_server: LocalS3, s3_prefix: str) -> ObjectStore:
    return s3_store(s3_server, s3_prefix)


def test_builds_on_s3_serve_what_local_builds_serve(s3: ObjectStore, tmp_path: Path, shared_data: Path) -> None:
    """The same lake written locally and to S3; full, incremental and compacted versions built on
    each hold the same domains, datasets, counts and URLs (the S3 tree served from a mirror)."""
    local = tmp_path / "local"
    settings = IndexSettings(postings_shards=4)
    builders = {"local": IndexBuilder(local, index=settings), "s3": IndexBuilder(s3, index=settings)}
    reddit = [(1 + i % 2, u) for i, u in enumerate(_reddit(shared_data, 400))]  # real URLs, ~150 domain prefixes
    for target in (local, s3):
        _write(target, reddit + _batch(60, 1) + _batch(60, 3, start=30), skip_invalid=True)
    assert [lf.path.rsplit("/", 1)[0] for lf in list_lake_files(s3)] == \
        [lf.path.rsplit("/", 1)[0] for lf in list_lake_files(local)]
    n = 0

    def served_both() -> tuple[object, object]:
        nonlocal n
        n += 1
        return _served(local), _served(mirror(s3, tmp_path / f"mirror-{n}"))

    for b in builders.values():
        assert b.build().version is not None
    first = served_both()
    assert first[0] == first[1] and len(first[0]) > 100  # type: ignore[arg-type]
    assert len(list(list_lake_files(s3))) > 100
    for target in (local, s3):
        _write(target, _batch(40, 1) + _batch(10, 21))
    results = {k: b.build() for k, b in builders.items()}
    assert results["s3"].files_scanned == results["local"].files_scanned > 0
    assert results["s3"].fragmented_pairs == results["local"].fragmented_pairs
    incremental = served_both()
    assert incremental[0] == incremental[1]
    compacted = {k: b.compact() for k, b in builders.items()}
    assert compacted["s3"].compacted_partitions == compacted["local"].compacted_partitions > 0
    after = served_both()
    assert after[0] == after[1] == incremental[0]
    manifest = read_manifest(s3)
    assert manifest is not None and len(manifest.versions) == 3
    assert all(v.stats.get("flipped_at") for v in manifest.versions)


def test_lake_files_on_s3_carry_page_checksums_that_catch_a_flipped_byte(
    s3: ObjectStore, s3_server: LocalS3
) -> None:
    _write(s3, _batch(200, 1))
    files = list(list_lake_files(s3))
    assert files and all(o.rel.startswith("urls/") for o in s3.list())
    rel = files[0].path
    with s3.open_input(rel) as fh:
        assert pq.read_table(fh, page_checksum_verification=True).num_rows > 0
    path = s3_server.path_of(s3.location.bucket, s3.key(rel))
    data = bytearray(path.read_bytes())
    data[4 + 40] ^= 0xFF  # inside the first column chunk's first page
    path.write_bytes(bytes(data))
    with s3.open_input(rel) as fh, pytest.raises(OSError, match=r"(?i)crc|checksum|corrupt"):
        pq.read_table(fh, page_checksum_verification=True)


def test_two_builders_racing_the_flip_on_s3_one_wins_the_other_fails_clearly(
    s3: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(s3, _batch(30, 1))
    IndexBuilder(s3, index=IndexSettings(postings_shards=2)).build()
    _write(s3, _batch(30, 2))
    both_built = threading.Barrier(2, timeout=30)
    real = builder_module.publish_manifest

    def at_the_same_time(*args: object, **kwargs: object) -> bool:
        both_built.wait()  # both versions are written, both builders hold the same manifest's ETag
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builder_module, "publish_manifest", at_the_same_time)
    outcomes: list[object] = []

    def build() -> None:
        try:
            outcomes.append(IndexBuilder(s3, index=IndexSettings(postings_shards=2)).build())
        except ManifestConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [o for o in outcomes if isinstance(o, builder_module.BuildResult)]
    lost = [o for o in outcomes if isinstance(o, ManifestConflict)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert "another builder flipped" in str(lost[0])
    manifest = read_manifest(s3)
    assert manifest is not None and manifest.current_version == won[0].version and len(manifest.versions) == 2
    version_dirs = {o.rel.split("/")[1] for o in s3.list("index") if o.rel.count("/") >= 2}
    assert len(version_dirs) == 3  # the loser's version: written, never referenced
    monkeypatch.setattr(builder_module, "publish_manifest", real)
    gc = IndexBuilder(s3, index=IndexSettings(gc_grace_s=0.01)).gc()
    assert len(gc.removed_tmp_dirs) == 1 and gc.removed_versions == []
    assert {o.rel.split("/")[1] for o in s3.list("index") if o.rel.count("/") >= 2} == \
        {v.version for v in manifest.versions}


def test_gc_on_s3_waits_the_grace_period_then_removes_old_versions_and_retired_lake_files(s3: ObjectStore) -> None:
    now = [time.time()]
    builder = IndexBuilder(s3, index=IndexSettings(postings_shards=2, keep_versions=1, gc_grace_s=600),
                           clock=lambda: now[0])
    _write(s3, _batch(20, 1))
    v1 = builder.build().version
    _write(s3, _batch(20, 1, start=10))
    v2 = builder.build().version
    lake_before = {lf.path for lf in list_lake_files(s3)}
    now[0] += 60
    v3 = builder.compact().version  # retires both lake files of dataset 1's partitions
    assert v1 and v2 and v3
    now[0] += 300  # v2 retired 300 s ago, v1 360 s ago: both within the grace
    early = builder.gc()
    assert early.removed_versions == [] and early.pinned_versions == [v2, v1] and early.removed_lake_files == []
    assert s3.exists(f"index/{v1}/postings.bin")
    now[0] += 301  # v2 retired 601 s ago
    late = builder.gc()
    assert late.removed_versions == [v2, v1] and late.pinned_versions == []
    assert not s3.list(f"index/{v1}") and not s3.list(f"index/{v2}")
    assert late.removed_lake_files and set(late.removed_lake_files) <= lake_before
    assert not any(s3.exists(rel) for rel in late.removed_lake_files)
    manifest = read_manifest(s3)
    assert manifest is not None and [v.version for v in manifest.versions] == [v3]


def test_the_compactor_lease_on_s3_has_one_holder_and_passes_on_after_expiry(s3: ObjectStore) -> None:
    now = [1000.0]
    a = Lease(s3, 30, holder="a", clock=lambda: now[0])
    b = Lease(s3, 30, holder="b", clock=lambda: now[0])
    assert a.acquire() and not b.acquire()
    now[0] += 20
    assert a.acquire() and not b.acquire()  # renewed: lasts until 1050
    now[0] += 29
    assert not b.acquire()
    now[0] += 2  # a paused holder's lease ran out
    assert b.acquire() and not a.acquire()
    b.release()
    assert a.acquire()
    compactors = [IndexCompactor(IndexBuilder(s3), interval_s=60, compact_min_files=8, lease_ttl_s=30)
                  for _ in range(2)]
    s3.delete(LEASE_REL)
    assert compactors[0].try_activate() and not compactors[1].try_activate()
    compactors[0].close()  # gives the lease up: the standby takes it at its next poll
    assert compactors[1].try_activate() and compactors[1].active
    compactors[1].close()


def test_the_index_compactor_ticks_on_s3(s3: ObjectStore) -> None:
    """Build, compaction of a fragmented partition and gc (in grace: nothing deleted) on S3."""
    compactor = IndexCompactor(IndexBuilder(s3, index=IndexSettings(postings_shards=2, keep_versions=1)),
                               interval_s=60, compact_min_files=3)
    for start in (0, 10, 20):
        _write(s3, [(1, f"https://shop.example.com/p/{i}") for i in range(start, start + 10)])
    assert compactor.try_activate()
    tick = compactor.run_once()
    assert tick.build.version and tick.compaction is not None and tick.compaction.compacted_partitions == 1
    assert tick.build is tick.compaction  # merged first: its build is the tick's only one
    assert tick.gc_removed_versions == 0
    manifest = read_manifest(s3)
    assert manifest is not None and len(manifest.versions) == 1
    assert manifest.current().stats["urls"] == 30 and manifest.current().stats["fragmented_pairs"] == 0
    compactor.close()


def test_gc_on_s3_aborts_uploads_a_killed_writer_left(s3: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from crawlstream.index import _gc_s3

    _write(s3, _batch(10, 1))
    IndexBuilder(s3).build()
    client, bucket = s3._client, s3.location.bucket
    key = s3.key("urls/dataset_id=1/domain_prefix=00/part-killed.parquet")
    client.create_multipart_upload(Bucket=bucket, Key=key)  # begun, never completed: nothing at the key

    def uploads() -> list[str]:
        return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket, Prefix=s3.location.prefix)
                .get("Uploads", [])]

    assert uploads() == [key] and not s3.exists("urls/dataset_id=1/domain_prefix=00/part-killed.parquet")
    IndexBuilder(s3).gc()
    assert uploads() == [key]  # younger than an hour: maybe a live writer's
    monkeypatch.setattr(_gc_s3, "STALE_UPLOAD_S", 0.0)
    IndexBuilder(s3).gc()
    assert uploads() == []
