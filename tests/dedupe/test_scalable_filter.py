"""The deduper's filter grows (ADR 023): past ``expected_urls`` it keeps its false-positive
rate, never forgets a member, and its slices survive snapshots; old snapshots still load."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from crawlstream.dedupe import BloomFilter, Deduper, ScalableBloomFilter, bloom_size, decode_snapshot, encode_snapshot
from crawlstream.errors import ChecksumMismatch

FPR = 0.001


def _items(n: int, seed: int, prefix: str) -> list[tuple[int, str]]:
    rnd = random.Random(seed)
    return [(rnd.getrandbits(63), f"{prefix}{seed}/{i}?q={rnd.random()}") for i in range(n)]


def _tail_bound(p: float, n: int) -> float:
    """Most false positives among ``n`` probes at rate ``p`` short of a ~1e-6 fluke (Chernoff:
    P[X >= mu + t] <= exp(-t^2 / (2 mu + 2t/3)) with t chosen for 1e-6)."""
    mu, ln = p * n, math.log(1e6)
    t = (ln / 3) + math.sqrt((ln / 3) ** 2 + 2 * mu * ln)
    return mu + t


def test_ten_times_the_expected_count_keeps_the_configured_rate(tmp_path: Path) -> None:
    expected = 20_000
    deduper = Deduper(tmp_path, expected_urls_per_partition=expected, false_positive_rate=FPR)
    deduper.load_partition(0)
    members = _items(10 * expected, seed=21, prefix="https://member.example/")
    for start in range(0, len(members), 5000):  # batches as the service sees them
        deduper.check_and_add(0, members[start : start + 5000])
    bloom = deduper.filter(0)
    assert len(bloom.slices) == 4  # 20k + 40k + 80k + 160k members of room
    assert bloom.count >= len(members) * (1 - FPR)
    assert bloom.fpr_bound == pytest.approx(FPR)
    assert not any(deduper.check_and_add(0, members[::3]))  # no false negatives, ever

    probes = _items(200_000, seed=22, prefix="https://probe.example/")
    false_positives = sum(bloom.contains(key, url) for key, url in probes)
    assert false_positives <= _tail_bound(FPR, len(probes))

    # What the fixed filter of the same first size does at 10x: it stops filtering.
    fixed = BloomFilter(bloom_size(expected, FPR))
    fixed.check_and_add(members)
    assert sum(fixed.contains(key, url) for key, url in probes[:5000]) > 5000 * 0.2


def test_a_batch_across_a_slice_boundary_answers_as_one_filter_would() -> None:
    bloom = ScalableBloomFilter.new(100, FPR)
    items = _items(350, seed=5, prefix="https://a.example/")
    batch = [*items[:120], items[3], *items[120:], items[200], items[0]]
    answers = bloom.check_and_add(batch)
    assert answers[:120] == [True] * 120
    assert answers[120] is False  # a member of slice 0 seen again inside slice 1's span
    assert answers[-2:] == [False, False]
    assert sum(answers) == 350 - sum(1 for a in answers[121:-2] if not a)  # only false positives differ
    assert len(bloom.slices) == 3 and bloom.capacities == [100, 200, 400]
    assert [s.count for s in bloom.slices[:2]] == [100, 200]


def test_slices_round_trip_through_a_snapshot_file(tmp_path: Path) -> None:
    first = Deduper(tmp_path, 1000, FPR)
    first.load_partition(4)
    items = _items(5000, seed=6, prefix="https://b.example/")
    first.check_and_add(4, items)
    grown = first.filter(4)
    assert len(grown.slices) == 3
    first.flush_partition(4, offset=4242)

    again = Deduper(tmp_path, 1000, FPR)
    assert again.load_partition(4) == 4242
    loaded = again.filter(4)
    assert [(s.size, s.count, bytes(s.bits)) for s in loaded.slices] == [
        (s.size, s.count, bytes(s.bits)) for s in grown.slices
    ]
    assert (loaded.capacities, loaded.fprs) == (grown.capacities, grown.fprs)
    assert not any(again.check_and_add(4, items))
    snap = decode_snapshot(encode_snapshot(loaded, None))
    assert snap.offset is None and isinstance(snap.filter, ScalableBloomFilter)


def test_a_version_two_snapshot_loads_as_the_first_slice_and_grows_from_it(tmp_path: Path) -> None:
    """A data dir from before the scalable filter: its fixed filter keeps every member and grows."""
    old = BloomFilter(bloom_size(1000, FPR))  # what Deduper(…, 1000, FPR) wrote until now
    members = _items(1000, seed=7, prefix="https://c.example/")
    old.check_and_add(members)
    (tmp_path / "0.bloom").write_bytes(encode_snapshot(old, 99))
    assert (tmp_path / "0.bloom").read_bytes()[8] == 2  # version 2 on disk

    deduper = Deduper(tmp_path, 1000, FPR)
    assert deduper.load_partition(0) == 99
    bloom = deduper.filter(0)
    assert bloom.slices[0].size == old.size and bloom.capacities == [1000] and bloom.fprs == [FPR]
    assert not any(deduper.check_and_add(0, members))
    more = _items(3000, seed=8, prefix="https://d.example/")
    assert sum(deduper.check_and_add(0, more)) >= 3000 - 10
    assert len(bloom.slices) == 3
    deduper.flush_partition(0, 100)
    assert (tmp_path / "0.bloom").read_bytes()[8] == 3
    reloaded = Deduper(tmp_path, 1000, FPR)
    assert reloaded.load_partition(0) == 100
    assert not any(reloaded.check_and_add(0, members + more))


def test_a_damaged_scalable_snapshot_is_refused_and_the_partition_replays(tmp_path: Path) -> None:
    deduper = Deduper(tmp_path, 200, FPR)
    deduper.load_partition(1)
    deduper.check_and_add(1, _items(700, seed=9, prefix="https://e.example/"))
    path = deduper.flush_partition(1, 7)
    blob = path.read_bytes()
    rnd = random.Random(3)
    for position in [0, 9, 12, 20, 30, 40, 50, len(blob) // 2, len(blob) - 5, len(blob) - 1]:
        damaged = bytearray(blob)
        damaged[position] ^= 1 << rnd.randrange(8)
        with pytest.raises(ChecksumMismatch):
            decode_snapshot(bytes(damaged))
    for cut in (1, 4, 100, len(blob) - 40):
        with pytest.raises(ChecksumMismatch):
            decode_snapshot(blob[:-cut])
    path.write_bytes(blob[:-3])
    fresh = Deduper(tmp_path, 200, FPR)
    assert fresh.load_partition(1) is None
    assert (tmp_path / "1.bloom.invalid").exists()
