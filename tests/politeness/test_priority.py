"""Priority (issue 14): a domain's priority lane goes before its FIFO file, and domains with lane
URLs are claimed before the others; politeness unchanged. Real Redis, real files, a manual clock;
the kill -9 test runs a scheduler in its own process against the same Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from crawlstream.frontier import FileState, FrontierEntry
from crawlstream.politeness import EXCLUDED_ERROR, Controls, FetchOutcome, FetchTicket, Scheduler

if TYPE_CHECKING:
    from tests.politeness.conftest import ManualClock

OK = FetchOutcome(status=200, elapsed_ms=10)
MakeScheduler = Callable[..., Scheduler]


def _normal(domain: str, n: int, start: int = 0) -> list[FrontierEntry]:
    return [FrontierEntry(domain, f"https://{domain}/n{i}", i) for i in range(start, start + n)]


def _prio(domain: str, priorities: list[int], start: int = 100) -> list[FrontierEntry]:
    return [
        FrontierEntry(domain, f"https://{domain}/p{start + i}", start + i, priority=p) for i, p in enumerate(priorities)
    ]


def _drain(s: Scheduler, clock: ManualClock, steps: int = 60, step_s: float = 1.0) -> list[FetchTicket]:
    """Run the scheduler like the service: due, then complete every ticket OK; tickets in order."""
    out: list[FetchTicket] = []
    for _ in range(steps):
        for t in s.due(0):
            out.append(t)
            s.complete(0, t.domain, t.url, OK)
        clock.advance(step_s)
    return out


def _paths(tickets: list[FetchTicket]) -> list[str]:
    return [t.url.rsplit("/", 1)[1] for t in tickets]


def test_a_domains_priority_urls_leave_before_its_fifo_ones_highest_first_then_by_arrival(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler()
    s.enqueue(0, _normal("a.example", 3))
    s.enqueue(0, _prio("a.example", [2, 9, 2]))  # p100 (2), p101 (9), p102 (2)
    s.enqueue(0, _normal("a.example", 2, start=3) + _prio("a.example", [5], start=103))
    tickets = _drain(s, clock)
    assert _paths(tickets) == ["p101", "p103", "p100", "p102", "n0", "n1", "n2", "n3", "n4"]
    assert [t.entry.priority for t in tickets[:4]] == [9, 5, 2, 2]
    assert s.pending(0) == (0, 0)


def test_politeness_is_unchanged_one_in_flight_and_the_delay_between_any_two(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler(min_delay_s=2.0)
    s.enqueue(0, _normal("a.example", 2) + _prio("a.example", [7, 7]))
    (first,) = s.due(0)
    assert first.entry.priority == 7
    clock.advance(10)
    assert s.due(0) == []  # one in flight, whatever its lane
    s.complete(0, "a.example", first.url, OK)
    assert s.due(0) == [] and s.due(0, clock.now_ms + 1999) == []
    (second,) = s.due(0, clock.now_ms + 2000)
    assert second.entry.priority == 7 and s.domain_state(0, "a.example").pages == 2


def test_due_domains_with_priority_urls_are_released_first_highest_first(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler()
    normal = [f"n{i}.example" for i in range(6)]
    for d in normal:  # due first (the earliest next-fetch time)
        s.enqueue(0, _normal(d, 2))
    clock.advance(1)
    s.enqueue(0, _normal("low.example", 1) + _prio("low.example", [3]))
    s.enqueue(0, _prio("high.example", [8]))
    tickets = s.due(0, limit=3)  # more domains are due than the caller can take
    assert [(t.domain, t.entry.priority) for t in tickets] == [
        ("high.example", 8),
        ("low.example", 3),
        ("n0.example", 0),
    ]
    assert s.pending(0) == (5, 3)  # the five others wait in the ready queue
    # once low.example's lane is empty it queues with the others again, by its due time
    for t in tickets:
        s.complete(0, t.domain, t.url, OK)
    clock.advance(5)
    assert [t.domain for t in s.due(0, limit=10)] == [*normal[1:], "low.example", "n0.example"]


def test_appends_in_priority_order_never_rewrite_and_a_higher_priority_rewrites_once(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler()
    for i, p in enumerate((9, 7, 7, 3)):  # a migration's order: priority descending
        s.enqueue(0, _prio("a.example", [p], start=100 + i))
    assert s.stats["lane_rewrites"] == 0 and _lane_state(s, "a.example").generation == 0
    s.enqueue(0, _prio("a.example", [8, 1], start=200))
    assert s.stats["lane_rewrites"] == 1 and _lane_state(s, "a.example").generation == 1
    state = s.domain_state(0, "a.example")
    assert state.lane_priority == 9 and "lane=" in str(state)
    assert [t.entry.priority for t in _drain(s, clock)] == [9, 8, 7, 7, 3, 1]


def _lane_state(s: Scheduler, domain: str) -> FileState:
    row = s.redis.hmget(f"cs:sched:0:d:{domain}", "lg", "lo", "ls")
    return FileState(int(row[0]), int(row[1]), int(row[2]))


def test_a_retried_priority_url_goes_back_to_the_lane(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(max_retries=2)
    s.enqueue(0, _normal("a.example", 2) + _prio("a.example", [4]))
    (t,) = s.due(0)
    assert t.entry.priority == 4
    (retry,) = s.complete(0, t.domain, t.url, FetchOutcome(503, elapsed_ms=5))
    assert (retry.priority, retry.attempt) == (4, 1)
    tickets = _drain(s, clock, step_s=5)
    assert [(p, t.entry.attempt, t.entry.priority) for p, t in zip(_paths(tickets), tickets, strict=True)] == [
        ("p100", 1, 4),
        ("n0", 0, 0),
        ("n1", 0, 0),
    ]


def test_an_expired_lease_on_a_priority_url_comes_back_in_the_lane(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler(lease_s=10, max_retries=2)
    s.enqueue(0, _normal("a.example", 1) + _prio("a.example", [6]))
    (lost,) = s.due(0)  # its request never reached the bus
    clock.advance(11)
    assert s.due(0) == []  # the lease expired: reclaimed as a timeout, back in the lane after a back-off
    clock.advance(20)
    (again,) = s.due(0)
    assert s.stats["leases_expired"] == 1
    assert again.url == lost.url and again.entry.priority == 6 and again.entry.attempt == 1


def test_a_priority_url_the_fetcher_skipped_as_excluded_is_parked_in_the_lane(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler()
    ctl = Controls(redis_client, clock)
    s.enqueue(0, _normal("a.example", 1) + _prio("a.example", [5]))
    (t,) = s.due(0)
    ctl.exclude(["a.example"])
    s.complete(0, t.domain, t.url, FetchOutcome(status=0, error=EXCLUDED_ERROR))
    assert _drain(s, clock, steps=5) == []
    assert redis_client.zcard("cs:sched:0:pready") == 0 and redis_client.zcard("cs:sched:0:ready") == 0
    ctl.include(["a.example"])
    assert redis_client.zcard("cs:sched:0:pready") == 1  # woken into the priority queue
    tickets = _drain(s, clock)
    assert [(p, t.entry.attempt) for p, t in zip(_paths(tickets), tickets, strict=True)] == [("p100", 0), ("n0", 0)]


def test_state_and_order_survive_a_restart_and_hold_until_moves_the_priority_queue(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler()
    s.enqueue(0, _normal("a.example", 2) + _prio("a.example", [3, 6]))
    redis_client.delete("cs:sched:0:pready", "cs:sched:0:ready")  # lost with a Redis failover, say
    s2 = make_scheduler()  # load_partition rebuilds both queues from the domain hashes
    assert redis_client.zcard("cs:sched:0:pready") == 1 and s2.pending(0) == (1, 0)
    assert s2.hold_until(0, {"a.example": clock.now_ms + 30_000}) == 1
    assert s2.next_due_ms(0) == clock.now_ms + 30_000 and s2.due(0) == []
    clock.advance(30)
    assert _paths(_drain(s2, clock)) == ["p101", "p100", "n0", "n1"]


def test_a_crash_after_a_lane_rewrite_before_redis_was_updated_loses_and_repeats_nothing(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler()
    s.enqueue(0, _prio("a.example", [2, 2, 2]))
    (t,) = s.due(0)
    s.complete(0, t.domain, t.url, OK)
    saved = redis_client.hgetall("cs:sched:0:d:a.example")
    s.enqueue(0, _prio("a.example", [9], start=200))  # rewrites the lane as the next generation
    assert s.stats["lane_rewrites"] == 1
    redis_client.delete("cs:sched:0:d:a.example")
    redis_client.hset("cs:sched:0:d:a.example", mapping=saved)  # the write after the rename never happened
    s2 = make_scheduler()  # a new process: reconciles the lane against Redis on first touch
    clock.advance(5)
    assert _paths(_drain(s2, clock)) == ["p200", "p101", "p102"]


_WRITER = """
import random, sys, time
from pathlib import Path
import redis
from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import FetchOutcome, Scheduler
client = redis.Redis(unix_socket_path=sys.argv[1])
s = Scheduler(client, Path(sys.argv[2]), time.time, min_delay_s=0, lease_s=3600, compact_min_bytes=512)
s.load_partition(0)
rnd = random.Random(7)
key = 0
while True:
    batch = []
    for _ in range(rnd.randrange(0, 3)):  # about as many as one dispatch per round takes
        priority = 1 if rnd.random() < 0.85 else rnd.randrange(2, 9)  # now and then one that jumps the queue
        batch.append(FrontierEntry("kill.example", f"https://kill.example/{key}", key, priority=priority))
        key += 1
    s.enqueue(0, batch)
    s.flush_partition(0)
    print("enq", " ".join(str(e.url_key) for e in batch), flush=True)
    for t in s.due(0):
        print("tick", t.entry.url_key, flush=True)
        s.complete(0, t.domain, t.url, FetchOutcome(200, elapsed_ms=0))
        print("done", t.entry.url_key, flush=True)
    if key > 200:
        print("ready", s.stats["lane_rewrites"], s.stats["compactions"], flush=True)
"""


def test_kill_9_amid_lane_appends_rewrites_and_dispatches_loses_nothing_and_repeats_nothing_done(
    redis_client: redis.Redis, tmp_path: Path, clock: ManualClock
) -> None:
    socket = redis_client.connection_pool.connection_kwargs["path"]
    root = tmp_path / "frontier"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, socket, str(root)], stdout=subprocess.PIPE, text=True)
    lines: list[list[str]] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "the writer died"
            lines.append(line.split())
            if line.startswith("ready"):
                assert min(int(n) for n in line.split()[1:]) > 0  # it rewrote and compacted its lane
                break
        time.sleep(0.05)  # kill it somewhere in the next batch
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.stdout is not None
    lines.extend(line.split() for line in proc.stdout.read().splitlines() if line.strip())
    acknowledged = {int(k) for words in lines if words[0] == "enq" for k in words[1:]}
    done = Counter(int(words[1]) for words in lines if words[0] == "done")
    unsure = {int(words[1]) for words in lines if words[0] == "tick"} - set(done)  # killed while completing
    assert len(acknowledged) > 200 and set(done.values()) == {1} and len(unsure) <= 1

    clock.now_s = time.time() + 7200  # past every lease: a request lost with the writer comes back
    s = Scheduler(redis_client, root, clock, min_delay_s=0, lease_s=3600, compact_min_bytes=512)
    s.load_partition(0)
    after: list[FetchTicket] = []
    for _ in range(len(acknowledged) + 10):
        tickets = s.due(0)
        after.extend(tickets)
        for t in tickets:
            s.complete(0, t.domain, t.url, OK)
        clock.advance(1)
    keys = [t.entry.url_key for t in after]
    assert acknowledged <= set(done) | set(keys) | unsure  # nothing acknowledged is lost
    assert not set(done) & set(keys)  # nothing completed is fetched again
    assert len(keys) == len(set(keys))
    # beyond those, at most the batch being appended at the kill (the bus would replay it)
    assert set(keys) - acknowledged <= set(range(max(acknowledged) + 1, max(acknowledged) + 6))
    fresh = [t.entry.priority for t in after if t.entry.attempt == 0]
    assert fresh == sorted(fresh, reverse=True)  # the lane is still in priority order
    assert s.pending(0) == (0, 0)
