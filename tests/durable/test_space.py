"""DiskFloor on the real file system: statvfs's f_bavail, a cached reading, a floor of 0 is off."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from crawlstream.durable import MIB, DiskFloor
from crawlstream.errors import DiskBelowFloor, StorageUnavailable
from tests.durable._ballast import MARGIN, Ballast, floor_mib


def test_free_bytes_is_what_an_unprivileged_writer_may_use(tmp_path: Path) -> None:
    floor = DiskFloor(tmp_path, MIB)
    assert abs(floor.free_bytes() - shutil.disk_usage(tmp_path).free) < MARGIN // 4


def test_a_ballast_takes_the_disk_below_the_floor_and_lifting_it_brings_it_back(tmp_path: Path) -> None:
    floor = DiskFloor(tmp_path, floor_mib(tmp_path) * MIB, interval_s=0.0)
    ballast = Ballast(tmp_path, floor.min_free_bytes // MIB)
    assert not floor.below()
    ballast.lay()
    try:
        assert floor.below()
        with pytest.raises(DiskBelowFloor, match=r"index build refused: \d+ MB free under .*, the floor is"):
            floor.check("index build")
    finally:
        ballast.lift()
    assert not floor.below()
    floor.check("index build")


def test_a_ballast_laid_after_space_was_freed_still_takes_the_disk_below_the_floor(tmp_path: Path) -> None:
    """Another test of a parallel run deleting more than MARGIN between the floor and the ballast
    (CI, session 28: a sink below the floor consumed everything)."""
    freed = tmp_path / "freed.bin"
    with open(freed, "wb") as held:
        os.posix_fallocate(held.fileno(), 0, 5 * MARGIN // 2)
    floor = DiskFloor(tmp_path, floor_mib(tmp_path) * MIB, interval_s=0.0)
    ballast = Ballast(tmp_path, floor.min_free_bytes // MIB)
    freed.unlink()
    ballast.lay()
    try:
        assert floor.below(), floor.describe()
    finally:
        ballast.lift()
    assert not floor.below()


def test_the_reading_is_cached_for_the_interval(tmp_path: Path) -> None:
    now = [0.0]
    floor = DiskFloor(tmp_path, floor_mib(tmp_path) * MIB, interval_s=1.0, clock=lambda: now[0])
    ballast = Ballast(tmp_path, floor.min_free_bytes // MIB)
    assert not floor.below()
    ballast.lay()
    try:
        now[0] = 0.5
        assert not floor.below(), "read again before the interval passed"
        now[0] = 1.0
        assert floor.below()
    finally:
        ballast.lift()


def test_a_floor_of_zero_is_off_and_a_missing_path_is_judged_by_its_parent(tmp_path: Path) -> None:
    assert DiskFloor.mib(tmp_path, 0) is None
    off = DiskFloor(tmp_path, 0)
    assert not off.enabled and not off.below()
    huge = DiskFloor(tmp_path / "not" / "yet", 2**62)
    assert huge.free_bytes() > 0 and huge.below()
    assert issubclass(DiskBelowFloor, StorageUnavailable)
    with pytest.raises(ValueError):
        DiskFloor(tmp_path, -1)
