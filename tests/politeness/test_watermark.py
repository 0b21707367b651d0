"""ResultsWatermark: the scheduler's lease clock, from what it has read (ADR 035)."""

from __future__ import annotations

from crawlstream.politeness import ResultsWatermark


def test_it_only_moves_forward_per_partition_and_forgets_a_partition_that_left() -> None:
    read = ResultsWatermark()
    assert read.bounds() == {}
    read.read(0, 1_000)
    read.read(0, 900)  # an earlier result behind a later one (two fetchers' clocks): no step back
    read.caught_up(1, 5_000)
    assert read.bounds() == {0: 1_000, 1: 5_000}
    read.caught_up(0, 2_000)
    read.forget(1)
    assert read.bounds() == {0: 2_000}
