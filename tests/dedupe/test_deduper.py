"""The Deduper: no false negatives, the configured FPR, and state that survives restarts and moves."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from crawlstream.dedupe import Deduper, bloom_size
from crawlstream.settings import Settings


def _items(n: int, seed: int, prefix: str = "https://site.example/") -> list[tuple[int, str]]:
    rnd = random.Random(seed)
    return [(rnd.getrandbits(63), f"{prefix}{seed}/{i}?q={rnd.random()}") for i in range(n)]


@pytest.fixture
def deduper(tmp_path: Path) -> Deduper:
    d = Deduper(tmp_path / "dedupe", expected_urls_per_partition=20_000, false_positive_rate=0.001)
    assert d.load_partition(3) is None
    return d


def test_first_sighting_is_new_and_second_is_seen(deduper: Deduper) -> None:
    items = _items(1000, seed=1)
    assert deduper.check_and_add(3, items) == [True] * 1000
    assert deduper.check_and_add(3, items) == [False] * 1000


def test_duplicate_inside_one_batch_is_new_only_once(deduper: Deduper) -> None:
    item = (7, "https://a.example/")
    assert deduper.check_and_add(3, [item, item, (8, "https://a.example/")]) == [True, False, True]


def test_same_url_key_with_another_url_is_a_new_url(deduper: Deduper) -> None:
    """The URL string disambiguates 56-bit key collisions."""
    assert deduper.check_and_add(3, [(99, "https://a.example/1")]) == [True]
    assert deduper.check_and_add(3, [(99, "https://a.example/2")]) == [True]


def test_observed_fpr_at_the_configured_count_is_below_twice_the_target(tmp_path: Path) -> None:
    n = 200_000
    d = Deduper(tmp_path, expected_urls_per_partition=n, false_positive_rate=0.001)
    d.load_partition(0)
    members = _items(n, seed=11)
    new = d.check_and_add(0, members)
    assert sum(new) >= n * (1 - 0.002)  # inserting members already sees some false positives
    assert not any(d.check_and_add(0, members[::7]))  # no false negatives, ever
    probes = _items(n, seed=12, prefix="https://other.example/")
    bloom = d.filter(0)
    false_positives = sum(bloom.contains(key, url) for key, url in probes)
    assert false_positives / n < 2 * 0.001
    # One slice at half the rate (ADR 023: room for the slices of growth): 15.82 bits per URL.
    assert len(d.filter(0).slices) == 1
    assert d.filter(0).size_bytes * 8 / n == pytest.approx(15.82, abs=0.05)


def test_snapshot_and_reload_keep_members_and_offset(tmp_path: Path) -> None:
    root = tmp_path / "dedupe"
    first = Deduper(root, 10_000, 0.001)
    first.load_partition(5)
    items = _items(5000, seed=2)
    first.check_and_add(5, items)
    path = first.flush_partition(5, offset=1234)
    assert path == root / "5.bloom"

    restarted = Deduper(root, 10_000, 0.001)
    assert restarted.load_partition(5) == 1234
    assert restarted.check_and_add(5, items) == [False] * len(items)
    assert restarted.filter(5).count == first.filter(5).count


def test_partition_move_to_a_new_owner_keeps_state(tmp_path: Path) -> None:
    """Revoke (flush + drop) on one instance, assign on another sharing the volume."""
    root = tmp_path / "dedupe"
    old_owner = Deduper(root, 10_000, 0.001)
    old_owner.load_partition(1)
    items = _items(3000, seed=3)
    old_owner.check_and_add(1, items)
    old_owner.flush_partition(1, offset=77)
    old_owner.drop_partition(1)
    assert old_owner.owned_partitions == []
    with pytest.raises(KeyError, match="load_partition"):
        old_owner.check_and_add(1, items[:1])

    new_owner = Deduper(root, 10_000, 0.001)
    assert new_owner.load_partition(1) == 77
    assert not any(new_owner.check_and_add(1, items))
    assert new_owner.check_and_add(1, [(1, "https://never.example/")]) == [True]


def test_snapshot_without_offset_round_trips_as_none(tmp_path: Path) -> None:
    d = Deduper(tmp_path, 100, 0.01)
    d.load_partition(0)
    d.flush_partition(0, offset=None)
    assert Deduper(tmp_path, 100, 0.01).load_partition(0) is None


def test_unfinished_snapshot_write_leaves_the_previous_snapshot_in_force(tmp_path: Path) -> None:
    d = Deduper(tmp_path, 1000, 0.001)
    d.load_partition(0)
    d.check_and_add(0, [(1, "https://a.example/")])
    d.flush_partition(0, offset=10)
    (tmp_path / "0.bloom.tmp").write_bytes(b"half a snapshot")  # a crash mid-write
    fresh = Deduper(tmp_path, 1000, 0.001)
    assert fresh.load_partition(0) == 10
    assert fresh.check_and_add(0, [(1, "https://a.example/")]) == [False]


def test_corrupt_snapshot_is_quarantined_and_partition_replays_from_start(tmp_path: Path) -> None:
    d = Deduper(tmp_path, 1000, 0.001)
    d.load_partition(2)
    d.check_and_add(2, [(1, "https://a.example/")])
    path = d.flush_partition(2, offset=10)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))

    fresh = Deduper(tmp_path, 1000, 0.001)
    assert fresh.load_partition(2) is None
    assert (tmp_path / "2.bloom.invalid").exists()
    assert not path.exists()
    assert fresh.check_and_add(2, [(1, "https://a.example/")]) == [True]


def test_snapshot_keeps_its_own_geometry_when_settings_change(tmp_path: Path) -> None:
    small = Deduper(tmp_path, 1000, 0.01)
    small.load_partition(0)
    items = _items(500, seed=4)
    small.check_and_add(0, items)
    small.flush_partition(0, offset=1)
    bigger = Deduper(tmp_path, 100_000, 0.001)
    bigger.load_partition(0)
    assert bigger.filter(0).slices[0].size == small.size == bloom_size(1000, 0.005)
    assert not any(bigger.check_and_add(0, items))


def test_from_settings_sizes_each_partition_for_its_share(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    d = Deduper.from_settings(settings)
    share = -(-settings.dedupe.expected_urls // settings.bus.partitions)
    assert d.size == bloom_size(share, settings.dedupe.false_positive_rate / 2)
    assert d.root == tmp_path / "dedupe"
