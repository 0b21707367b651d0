"""Writers on S3 under faults: a process killed -9 mid-upload or mid-version, the S3 server
stopped during a build. Never a partial object under a final key, never a half-flipped manifest;
the rerun completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import StorageUnavailable
from crawlstream.index import IndexBuilder, read_manifest
from crawlstream.lake import list_lake_files
from crawlstream.objectstore import ObjectStore
from crawlstream.settings import IndexSettings
from tests.index._s3 import mirror, s3_store
from tests.index.test_versions import _batch
from tests.index.test_writers_s3 import _served, _write

REDDIT = "urls/reddit-webtext/RS_v2_2008-05.urk.json-00.gz"

# Runs the CLI with ObjectStore.write hanging (after a marker file appears) on the object whose
# relative path ends with argv[2]: the test then kills the process at that exact point.
_HANG_AT = """
import sys, time, pathlib
from crawlstream.objectstore import _store
real = _store.ObjectStore.write
def write(self, rel, data):
    if rel.endswith(sys.argv[2]):
        time.sleep(2)  # the version's other files, sent in parallel, are up by then
        pathlib.Path(sys.argv[1]).write_text(rel)
        time.sleep(600)
    return real(self, rel, data)
_store.ObjectStore.write = write
from crawlstream.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _env(server: LocalS3, prefix: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **server.env, "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
            "CRAWLSTREAM_LAKE_URI": prefix, "TMPDIR": str(tmp_path), **extra}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawlstream", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _complete_parquet_only(store: ObjectStore) -> int:
    """Every object under urls/ is a whole Parquet file that list_lake_files shows; how many."""
    objects = store.list("urls")
    assert [o.rel for o in objects] == [lf.path for lf in list_lake_files(store)]
    for o in objects:
        with store.open_input(o.rel) as fh:
            assert pq.read_table(fh, page_checksum_verification=True).num_rows > 0, o.rel
    return len(objects)


def test_ingest_killed_mid_publication_leaves_only_whole_objects_and_the_rerun_completes(
    s3_server: LocalS3, s3_prefix: str, tmp_path: Path, shared_data: Path
) -> None:
    store = s3_store(s3_server, s3_prefix)
    env = _env(s3_server, s3_prefix, tmp_path)
    args = ["ingest", str(shared_data / REDDIT), "--dataset-id", "1", "--url-field", "u", "--no-publish",
            "--no-rejects"]
    proc = subprocess.Popen([sys.executable, "-m", "crawlstream", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # killed while files are being published: some are up, the next ones being written and sent
        _wait_for(lambda: len(store.list("urls")) >= 5 and any(tmp_path.glob("crawlstream-upload-*")),
                  "uploads in flight")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    published = _complete_parquet_only(store)
    assert published >= 5
    done = _cli(env, *args)
    assert done.returncode == 0, done.stderr
    assert _complete_parquet_only(store) > published
    built = _cli(env, "index", "build")
    assert built.returncode == 0, built.stderr
    local = tmp_path / "local"
    local_env = {**os.environ, "CRAWLSTREAM_DATA_DIR": str(local)}
    assert _cli(local_env, *args).returncode == 0 and _cli(local_env, "index", "build").returncode == 0
    manifest, local_manifest = read_manifest(store), read_manifest(local)
    assert manifest is not None and local_manifest is not None
    assert {k: manifest.current().stats[k] for k in ("domains", "pairs", "urls")} == \
        {k: local_manifest.current().stats[k] for k in ("domains", "pairs", "urls")}  # replayed rows deduped


def test_index_build_killed_mid_version_leaves_the_previous_version_current(
    s3_server: LocalS3, s3_prefix: str, tmp_path: Path
) -> None:
    store = s3_store(s3_server, s3_prefix)
    env = _env(s3_server, s3_prefix, tmp_path, CRAWLSTREAM_INDEX_POSTINGS_SHARDS="2")
    _write(store, _batch(40, 1))
    assert _cli(env, "index", "build").returncode == 0
    v1 = read_manifest(store).current_version  # type: ignore[union-attr]
    before = _served(mirror(store, tmp_path / "before"))
    _write(store, _batch(40, 2))
    marker = tmp_path / "hanging"
    proc = subprocess.Popen([sys.executable, "-c", _HANG_AT, str(marker), "postings.bin", "index", "build"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(marker.exists, "the build to reach its postings upload")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    manifest = read_manifest(store)
    assert manifest is not None and manifest.current_version == v1 and len(manifest.versions) == 1
    orphan = marker.read_text().split("/")[1]
    assert orphan != v1 and not store.exists(f"index/{orphan}/postings.bin")
    assert store.exists(f"index/{orphan}/domains.zst")  # a partial version, referenced by nothing
    assert _served(mirror(store, tmp_path / "after-kill")) == before  # v1 whole and still served
    assert _cli(env, "index", "build").returncode == 0
    manifest = read_manifest(store)
    assert manifest is not None and manifest.current_version not in (v1, orphan)
    assert len(_served(mirror(store, tmp_path / "rebuilt"))) > len(before)
    gc = _cli({**env, "CRAWLSTREAM_INDEX_GC_GRACE_S": "0.01"}, "index", "gc")
    assert gc.returncode == 0 and orphan in gc.stdout
    assert not store.list(f"index/{orphan}")


def test_s3_stopped_during_a_build_fails_within_the_deadline_and_the_rerun_completes(
    s3_server: LocalS3, s3_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = s3_store(s3_server, s3_prefix, CRAWLSTREAM_S3_DEADLINE_S="2")
    builder = IndexBuilder(store, index=IndexSettings(postings_shards=2))
    _write(store, _batch(40, 1))
    v1 = builder.build().version
    _write(store, _batch(40, 2))
    real = IndexBuilder._scan_new

    def outage_after_listing(self: IndexBuilder, *args: object) -> object:
        s3_server.stop(keep_data=True)  # the manifest was read and the lake listed; now S3 is gone
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(IndexBuilder, "_scan_new", outage_after_listing)
    started = time.monotonic()
    try:
        with pytest.raises(StorageUnavailable, match="unavailable after"):
            builder.build()
        elapsed = time.monotonic() - started
    finally:
        s3_server.restart()
    assert elapsed < 2 + 6, elapsed  # the deadline, plus one request's timeouts of each file in flight
    monkeypatch.setattr(IndexBuilder, "_scan_new", real)
    manifest = read_manifest(store)
    assert manifest is not None and manifest.current_version == v1 and len(manifest.versions) == 1
    v2 = builder.build()
    assert v2.version is not None and v2.files_scanned > 0
    assert read_manifest(store).current_version == v2.version  # type: ignore[union-attr]
