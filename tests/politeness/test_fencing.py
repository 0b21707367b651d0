"""Two schedulers believe they own one partition (the first's group session expired and the
partition went to the second before the first noticed): the first is fenced, on real Redis
and real frontier files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import redis

from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import FetchOutcome, Scheduler
from tests.politeness.conftest import ManualClock

OK = FetchOutcome(status=200, elapsed_ms=100)


def _entries(domain: str, n: int, start: int = 0) -> list[FrontierEntry]:
    return [FrontierEntry(domain, f"https://{domain}/{i}", i) for i in range(start, start + n)]


def _frontier_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "frontier").rglob("*") if p.is_file())


def test_a_stale_owner_stops_claiming_enqueueing_and_completing_until_it_loads_again(
    make_scheduler: Callable[..., Scheduler], tmp_path: Path, clock: ManualClock
) -> None:
    stale = make_scheduler(min_delay_s=0)  # loads partition 0
    stale.enqueue(0, _entries("a.example", 3) + _entries("b.example", 3))
    ticket, other = stale.due(0)  # one per domain
    new = make_scheduler(min_delay_s=0)  # the partition's next owner loads it (the group moved it)

    assert stale.due(0) == [] and stale.fenced == {0}  # nothing claimed: the new owner's domains
    before = _frontier_bytes(tmp_path)
    assert stale.enqueue(0, _entries("c.example", 2)) == 0
    assert _frontier_bytes(tmp_path) == before  # no byte appended to the new owner's files
    stale.complete(0, ticket.domain, ticket.url, OK)  # refused: the new owner completes it
    assert stale.stats["fenced_skipped"] == 3

    assert new.due(0) == []  # both still in flight under the new owner (it recounted them)
    for t in (ticket, other):
        new.complete(0, t.domain, t.url, OK)
    clock.advance(1)
    urls: set[str] = set()
    for _ in range(10):
        for t in new.due(0):
            urls.add(t.url)
            new.complete(0, t.domain, t.url, OK)
        clock.advance(1)
    assert urls | {ticket.url, other.url} == {f"https://{d}/{i}" for d in ("a.example", "b.example") for i in range(3)}

    stale.load_partition(0)  # assigned back: it owns the partition again, the other is fenced
    assert stale.fenced == set() and new.due(0) == [] and new.fenced == {0}
    assert stale.enqueue(0, _entries("c.example", 2)) == 2


def test_a_lost_owner_key_fences_nobody(
    make_scheduler: Callable[..., Scheduler], redis_client: redis.Redis, clock: ManualClock
) -> None:
    """A Redis that lost its data must not stop every scheduler for good."""
    s = make_scheduler(min_delay_s=0)
    s.enqueue(0, _entries("a.example", 1))
    redis_client.delete("cs:sched:0:owner")
    assert [t.url for t in s.due(0)] == ["https://a.example/0"] and s.fenced == set()


def test_schedulers_that_never_loaded_a_partition_are_not_fenced(
    redis_client: redis.Redis, tmp_path: Path, clock: ManualClock
) -> None:
    """Tools and the drain check read and act without owning (no token of their own)."""
    owner = Scheduler(redis_client, tmp_path / "frontier", clock, min_delay_s=0)
    owner.load_partition(0)
    tool = Scheduler(redis_client, tmp_path / "frontier", clock, min_delay_s=0)
    assert tool.enqueue(0, _entries("a.example", 1)) == 1
    assert [t.url for t in tool.due(0)] == ["https://a.example/0"] and tool.fenced == set()
