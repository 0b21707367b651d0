"""kill -9 during append and during recompression (into group records) never loses an acknowledged record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawlstream.store import KIND_GROUP, KIND_GROUP_BZIP2, ContentStore

CHILD = Path(__file__).with_name("_crash_child.py")
sys.path.insert(0, str(CHILD.parent))
from _crash_child import body_for  # noqa: E402
from store_support import group_headers  # noqa: E402


def _run_and_kill(args: list[str], side: Path, ready: str | None, min_lines: int, delay_s: float) -> None:
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, str(CHILD), *args], env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = side.read_text() if side.exists() else ""
            if (ready is None or ready in text) and text.count("\n") >= min_lines:
                break
            if proc.poll() is not None:
                pytest.fail(f"child exited early with {proc.returncode}")
            time.sleep(0.01)
        else:
            pytest.fail("child did not reach the kill point in 30 s")
        time.sleep(delay_s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _check_acknowledged(root: Path, side: Path) -> int:
    lines = side.read_text().splitlines()
    deleted = {line[1:] for line in lines if line.startswith("-")}
    # a delete was under way when the kill came: either outcome is right (the store acknowledged
    # it or not), but a body still served must be the right one (checked below)
    in_doubt = {line[1:] for line in lines if line.startswith("?")} - deleted
    acked = [line for line in lines if line.startswith("https://") and line not in deleted | in_doubt]
    with ContentStore(root) as store:
        for url in acked:
            assert store.get(url) == body_for(url), url
        for url in deleted:  # an acknowledged delete stays deleted, whatever compaction did
            assert store.entry(url) is None, url
        for entry in store.search():  # nothing torn or foreign is ever served
            assert store.get(entry.url) == body_for(entry.url)
        report = store.verify()
        assert report.ok, report.problems
    return len(acked)


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.2])
def test_kill_during_append_loses_no_acknowledged_record(tmp_path: Path, delay_s: float) -> None:
    side = tmp_path / "acked.txt"
    _run_and_kill(["append", str(tmp_path / "store"), str(side)], side, None, 50, delay_s)
    assert _check_acknowledged(tmp_path / "store", side) >= 50


@pytest.mark.parametrize("delay_s", [0.0, 0.03, 0.1, 0.3, 0.6])
def test_kill_during_recompression_loses_no_acknowledged_record(tmp_path: Path, delay_s: float) -> None:
    side = tmp_path / "acked.txt"
    _run_and_kill(["recompress", str(tmp_path / "store"), str(side), "150"], side, "RECOMPRESS", 150, delay_s)
    assert _check_acknowledged(tmp_path / "store", side) >= 150
    with ContentStore(tmp_path / "store") as store:  # a second reopen finds a clean store
        assert store.recovered_records == 0
        assert store.verify().ok
        store.recompress(older_than_s=0, tier="archive", now_ms=10**12)  # and goes on grouping pages
        locations = [entry.location for entry in store.search()]
        assert {loc.tier for loc in locations} == {"archive"} and max(loc.member for loc in locations) > 0
        assert all(store.get(entry.url) == body_for(entry.url) for entry in store.search())


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.15, 0.4, 0.8])
def test_kill_during_a_maintenance_pass_loses_nothing_and_leaves_nothing_half_moved(
    tmp_path: Path, delay_s: float
) -> None:
    """Bounded steps (tiering with dictionaries, compaction of deleted pages), killed at random moments."""
    side = tmp_path / "acked.txt"
    root = tmp_path / "store"
    _run_and_kill(["maintain", str(root), str(side), "120"], side, "MAINTAIN", 120, delay_s)
    assert _check_acknowledged(root, side) >= 120
    with ContentStore(root) as store:  # a second reopen finds a clean store
        assert store.recovered_records == 0
        assert store.verify().ok
        store.maintain(ages_zero=True)
        assert {e.location.tier for e in store.search()} == {"archive"}
        assert all(store.get(entry.url) == body_for(entry.url) for entry in store.search())
        assert store.stats().quarantined_urls == []
        kinds = {h.kind for h in group_headers(root, store).values()}
        assert KIND_GROUP_BZIP2 in kinds and kinds <= {KIND_GROUP, KIND_GROUP_BZIP2}  # bzip2 groups were moved too
