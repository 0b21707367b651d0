"""The soak's chaos plan (``bench.soak.chaos``): a seed names a run, every kind comes in turn."""

from __future__ import annotations

import itertools

import pytest

from bench.soak.chaos import KINDS, ChaosPlan

MEMBERS = ["fetcher-0", "fetcher-1", "scheduler-0", "index-compactor-0"]


def plan(seed: int, minutes: float = 120.0) -> ChaosPlan:
    return ChaosPlan(seed, minutes * 60, MEMBERS, [1, 2, 3], quiet_tail_s=120.0)


def test_one_seed_draws_one_plan_and_another_seed_another() -> None:
    assert plan(1).faults == plan(1).faults
    assert plan(1).faults != plan(2).faults


def test_two_hours_bring_at_least_60_faults_each_kind_in_every_round_of_eight() -> None:
    faults = plan(1).faults
    assert len(faults) >= 60
    kinds = [f.kind for f in faults]
    for start in range(0, len(kinds) - len(KINDS) + 1, len(KINDS)):
        assert sorted(kinds[start : start + len(KINDS)]) == sorted(KINDS)
    assert min(plan(1).counts().values()) >= 3


def test_times_targets_and_durations_stay_within_their_bounds() -> None:
    p = plan(7)
    times = [f.at_s for f in p.faults]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(30.0 <= g <= 180.0 for g in gaps)
    assert times[-1] < p.duration_s - p.quiet_tail_s
    for f in p.faults:
        if f.kind in ("member-kill", "zombie"):
            assert f.target in MEMBERS
        if f.kind == "zombie":
            assert f.restore_s > 6.0, "stopped past the group session"
        if f.kind in ("broker-kill", "two-brokers"):
            assert 20.0 <= f.restore_s <= 90.0
        if f.kind == "two-brokers":
            assert f.second_target != f.target
            assert f.second_after_s < f.restore_s, "the second dies before the first is back"
        if f.kind == "disk-floor":
            assert f.restore_s == 60.0


def test_a_plan_needs_members_and_three_brokers() -> None:
    with pytest.raises(ValueError, match="three brokers"):
        ChaosPlan(1, 600, MEMBERS, [1, 2])
