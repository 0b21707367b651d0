"""The index below the data dir's free-space floor (ADR 033), on a real disk: ``crawlstream index
build`` refuses with a clear message and exit 1, writing nothing; the compactor skips its ticks
(logged, counted) and builds once the space is back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from crawlstream.cli import main
from crawlstream.index import IndexBuilder, read_manifest
from crawlstream.index.service import from_settings
from crawlstream.lake import LakeWriter
from crawlstream.settings import LakeSettings, load
from crawlstream.urls import canonicalize
from tests.durable._ballast import Ballast, floor_mib

pytestmark = pytest.mark.timeout(60)


def _lake(root: Path) -> None:
    with LakeWriter(root, config=LakeSettings(row_group_rows=8)) as w:
        for i in range(40):
            w.add_canonical(1, canonicalize(f"https://site{i % 5}.example.com/page/{i}"))


def test_index_build_refuses_below_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _lake(tmp_path)
    monkeypatch.setenv("CRAWLSTREAM_DATA_DIR", str(tmp_path))
    floor = floor_mib(tmp_path)
    monkeypatch.setenv("CRAWLSTREAM_DATA_DIR_MIN_FREE_MB", str(floor))
    ballast = Ballast(tmp_path, floor)
    ballast.lay()
    try:
        for action in ("build", "compact"):
            assert main(["index", action]) == 1
            err = capsys.readouterr().err
            assert f"crawlstream index {action} refused" in err and "MB free under" in err
            assert "CRAWLSTREAM_DATA_DIR_MIN_FREE_MB" in err and "free some space" in err
        assert read_manifest(IndexBuilder(tmp_path).index_store) is None
        assert not (tmp_path / "index").exists(), "refused before anything was written"
    finally:
        ballast.lift()
    assert main(["index", "build"]) == 0
    assert read_manifest(IndexBuilder(tmp_path).index_store) is not None


def test_the_compactor_skips_builds_below_the_floor_then_builds(tmp_path: Path) -> None:
    _lake(tmp_path)
    settings = load({
        "CRAWLSTREAM_DATA_DIR": str(tmp_path),
        "CRAWLSTREAM_DATA_DIR_MIN_FREE_MB": str(floor_mib(tmp_path)),
        "CRAWLSTREAM_INDEX_BUILD_INTERVAL_S": "0.1",
    })
    registry = CollectorRegistry()
    ballast = Ballast(tmp_path, settings.data_dir_min_free_mb)
    ballast.lay()
    stop = threading.Event()
    compactor = from_settings(settings, stop, registry=registry)
    thread = threading.Thread(target=compactor.run)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while compactor.skipped_below_floor < 3:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.05)
        assert compactor.ticks == 0 and compactor.versions_flipped == 0
        assert read_manifest(IndexBuilder(tmp_path).index_store) is None
        assert (registry.get_sample_value("crawlstream_index_builds_skipped_disk_floor_total") or 0) >= 3
        ballast.lift()
        while compactor.versions_flipped < 1:
            assert time.monotonic() < deadline and thread.is_alive(), "the compactor did not build again"
            time.sleep(0.05)
    finally:
        ballast.lift()
        stop.set()
        thread.join(10)
        compactor.close()
    assert read_manifest(IndexBuilder(tmp_path).index_store) is not None
