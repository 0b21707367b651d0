"""The block-by-block build (ADR 031): its output does not depend on the memory budget or the
workers, equals what the format's whole-version encoders write, extends a previous version one
block at a time, survives a kill -9, and works on S3."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard
from pyroaring import BitMap

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexBuilder, IndexReader, read_manifest
from crawlstream.index import _builder as builder_module
from crawlstream.index._formats import (
    decode_block,
    encode_block,
    encode_dtdr,
    encode_dtdr_pairs,
    encode_postings,
    postings_block,
    postings_block_of,
)
from crawlstream.settings import IndexSettings
from crawlstream.urls import domain_prefix
from tests.index._s3 import mirror, s3_store
from tests.index.test_versions import _batch, _write
from tests.index.test_writers_s3 import _served
from tests.index.test_writers_s3 import _write as _write_store

_NAMES = {"domains": "domains.zst", "d2d_roar": "domain_to_datasets.roar", "postings": "postings.bin",
          "files_tsv": "files.tsv.zst"}


def _linked(lake: Path, dest: Path) -> Path:
    """A directory whose ``urls/`` is ``lake``'s: an index built there reads that lake."""
    dest.mkdir(parents=True)
    (dest / "urls").symlink_to(lake / "urls")
    return dest


def _files(root: Path) -> dict[str, bytes]:
    manifest = read_manifest(root)
    assert manifest is not None
    return {name: (root / manifest.current().files[key]).read_bytes() for key, name in _NAMES.items()}


def test_the_memory_budget_and_the_workers_change_no_byte(lake_root: Path, tmp_path: Path) -> None:
    tiny, big = _linked(lake_root, tmp_path / "tiny"), _linked(lake_root, tmp_path / "big")
    IndexBuilder(tiny, index=IndexSettings(postings_shards=8, build_memory_mb=1, build_workers=1)).build()
    IndexBuilder(big, index=IndexSettings(postings_shards=8, build_memory_mb=4096, build_workers=4)).build()
    assert _files(tiny) == _files(big)
    assert _files(tiny) == _files(lake_root)  # the conftest's build, default settings
    answers = _served(tiny)
    assert answers == _served(big) and len(answers) > 500


def test_the_streamed_files_are_what_the_whole_version_encoders_write(lake_root: Path, tmp_path: Path) -> None:
    """The builder before ADR 031 wrote each file with one call of the format's encoder over the
    whole version; the streamed files are byte for byte what those calls write for the same answers."""
    root = _linked(lake_root, tmp_path / "v")
    IndexBuilder(root, index=IndexSettings(postings_shards=8, build_memory_mb=1, build_workers=2)).build()
    files = _files(root)
    reader = IndexReader(root)
    with reader.pin() as idx:
        names = [idx.domain_at(d) for d in range(idx.domain_count())]
        pairs = [(d, c.dataset_id) for d, name in enumerate(names) for c in idx.datasets_for_domain(name) or []]
    reader.close()
    assert names == sorted(names)
    assert files["domains.zst"] == zstandard.ZstdCompressor(level=6).compress("\n".join(names).encode())
    pd, pds = np.array(pairs, np.int64).T
    assert files["domain_to_datasets.roar"] == encode_dtdr_pairs(pd, pds, len(names))
    blocks = [decode_block(postings_block(files["postings.bin"], b)) for b in range(8)]
    assert files["postings.bin"] == encode_postings([encode_block(r, level=3) for r in blocks])
    for b, runs in enumerate(blocks):  # every domain's runs in the block of its prefix, global ids
        assert all(postings_block_of(domain_prefix(names[d]), 8) == b for d in set(runs.domain_id.tolist()))


def test_a_dataset_id_above_16_bits_stores_every_set_as_a_roaring_bitmap(tmp_path: Path) -> None:
    _write(tmp_path, _batch(30, 1) + _batch(20, 70_000) + _batch(7, 3, start=40))
    IndexBuilder(tmp_path, index=IndexSettings(postings_shards=3, build_memory_mb=1, build_workers=2)).build()
    reader = IndexReader(tmp_path)
    with reader.pin() as idx:
        sets = [sorted(c.dataset_id for c in idx.datasets_for_domain(idx.domain_at(d)) or [])
                for d in range(idx.domain_count())]
    reader.close()
    assert any(70_000 in s for s in sets)
    assert _files(tmp_path)["domain_to_datasets.roar"] == encode_dtdr([BitMap(s).serialize() for s in sets])


@pytest.mark.parametrize("workers", [1, 3])
def test_incremental_builds_over_spilled_blocks_equal_a_full_build(tmp_path: Path, workers: int) -> None:
    """New files, a replay (fragmented pairs), a compaction (dropped files) and a change of the
    postings' block count between versions: the incremental versions answer like full ones."""
    lake, full = tmp_path / "lake", tmp_path / "full"
    settings = {"build_memory_mb": 1, "build_workers": workers}
    builder = IndexBuilder(lake, index=IndexSettings(postings_shards=3, **settings))
    _write(lake, _batch(40, 1) + _batch(30, 2))
    builder.build()
    _write(lake, _batch(40, 1, start=20) + _batch(10, 3))  # overlaps: a replay of 20 rows
    assert builder.build().fragmented_pairs > 0
    _linked(lake, full)

    def same_as_full(shards: int) -> None:
        IndexBuilder(full, index=IndexSettings(postings_shards=shards, **settings)).build(full=True)
        assert _served(lake) == _served(full)
        mine, theirs = _files(lake), _files(full)
        for name in ("domains.zst", "domain_to_datasets.roar"):  # file ids differ, domain ids do not
            assert mine[name] == theirs[name]

    same_as_full(3)
    resharded = IndexBuilder(lake, index=IndexSettings(postings_shards=5, **settings))
    _write(lake, _batch(15, 4) + _batch(10, 2, start=25))
    assert resharded.build().files_scanned > 0  # extends a 3-block version into a 5-block one
    same_as_full(5)
    compacted = resharded.compact()
    assert compacted.compacted_partitions > 0 and compacted.files_dropped > 0 and compacted.fragmented_pairs == 0
    same_as_full(5)


_HANG_IN_MERGE = """
import sys, time, pathlib
from crawlstream.index import IndexBuilder, _builder
from crawlstream.settings import IndexSettings
real = _builder.merge_domains
def merge(*args, **kw):
    pathlib.Path(sys.argv[2]).write_text("merging")
    time.sleep(600)
_builder.merge_domains = merge
IndexBuilder(pathlib.Path(sys.argv[1]), index=IndexSettings(postings_shards=3, build_memory_mb=1)).build()
"""


def test_a_build_killed_mid_merge_leaves_the_old_version_and_gc_removes_its_spill(tmp_path: Path) -> None:
    builder = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=3))
    _write(tmp_path, _batch(40, 1))
    v1 = builder.build().version
    before = _served(tmp_path)
    _write(tmp_path, _batch(30, 2))
    marker = tmp_path / "merging"
    proc = subprocess.Popen([sys.executable, "-c", _HANG_IN_MERGE, str(tmp_path), str(marker)])
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the build never reached its merge"
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait(30)
    idir = tmp_path / "index"
    assert [p.name.split("-")[0] for p in idir.glob(".spill-*")] == [".spill"]
    assert read_manifest(tmp_path).current_version == v1  # type: ignore[union-attr]
    assert _served(tmp_path) == before
    gc = builder.gc()
    assert any(name.startswith(".spill-") for name in gc.removed_tmp_dirs)
    assert not list(idir.glob(".spill-*")) and not list(idir.glob(".tmp-*"))
    assert builder.build().version not in (None, v1)
    assert len(_served(tmp_path)) > len(before)


def test_a_bounded_build_on_s3_serves_what_the_local_one_serves(
    s3_server: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lake and index on S3, a tiny budget, two workers, every version file streamed from disk to
    S3: full then incremental versions hold what the same builds hold locally."""
    monkeypatch.setattr(builder_module, "_UPLOAD_WHOLE", 0)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where an S3 build spills
    store, local = s3_store(s3_server), tmp_path / "local"
    settings = IndexSettings(postings_shards=4, build_memory_mb=1, build_workers=2)
    for rows in (_batch(50, 1) + _batch(30, 2), _batch(40, 1, start=30) + _batch(20, 5)):
        for target in (store, local):
            _write_store(target, rows)
            IndexBuilder(target, index=settings).build()
        served = _served(mirror(store, tmp_path / f"mirror-{len(rows)}"))
        assert served == _served(local)
        assert _files(tmp_path / f"mirror-{len(rows)}")["domains.zst"] == _files(local)["domains.zst"]
    assert not list(scratch.iterdir())  # the spill is gone
