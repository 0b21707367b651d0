"""Politeness with a manual clock, the real Redis and real frontier files."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from crawlstream.frontier import FileState, FrontierEntry
from crawlstream.politeness import FetchOutcome, FetchTicket, Scheduler
from crawlstream.settings import Settings

if TYPE_CHECKING:
    from tests.politeness.conftest import ManualClock

OK = FetchOutcome(status=200, elapsed_ms=100)
MakeScheduler = Callable[..., Scheduler]


def _entries(domain: str, n: int, depth: int = 0, start: int = 0) -> list[FrontierEntry]:
    return [FrontierEntry(domain, f"https://{domain}/{i}", i, depth=depth) for i in range(start, start + n)]


def _delay_ms(scheduler: Scheduler, domain: str, clock: ManualClock) -> int:
    return scheduler.domain_state(0, domain).next_fetch_at_ms - clock.now_ms


def test_a_new_domain_is_due_at_once_and_hands_out_urls_in_order(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler()
    assert s.enqueue(0, _entries("a.example", 3)) == 3
    (ticket,) = s.due(0)
    assert ticket.url == "https://a.example/0" and ticket.entry.attempt == 0


def test_only_one_request_in_flight_per_domain(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 3))
    assert len(s.due(0)) == 1
    clock.advance(200)  # long after the delay, within the 300 s lease
    assert s.due(0) == []
    assert s.domain_state(0, "a.example").in_flight == 1


def test_max_in_flight_two_allows_two_distinct_urls(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(max_in_flight_per_domain=2, min_delay_s=0)
    s.enqueue(0, _entries("a.example", 3))
    tickets = s.due(0) + s.due(0) + s.due(0)
    assert [t.url for t in tickets] == ["https://a.example/0", "https://a.example/1"]


@pytest.mark.parametrize(
    ("outcome", "expected_delay_ms"),
    [
        (FetchOutcome(200, elapsed_ms=100), 1000),  # the configured minimum
        (FetchOutcome(200, elapsed_ms=900), 1800),  # 2 x the response time
        (FetchOutcome(200, elapsed_ms=100, crawl_delay_s=5), 5000),  # robots Crawl-delay
    ],
)
def test_next_fetch_waits_the_largest_of_the_three_delays(
    make_scheduler: MakeScheduler, clock: ManualClock, outcome: FetchOutcome, expected_delay_ms: int
) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 2))
    (ticket,) = s.due(0)
    clock.advance(0.5)
    s.complete(0, "a.example", ticket.url, outcome)
    assert _delay_ms(s, "a.example", clock) == expected_delay_ms
    assert s.due(0, clock.now_ms + expected_delay_ms - 1) == []
    assert len(s.due(0, clock.now_ms + expected_delay_ms)) == 1


def test_crawl_delay_is_remembered_until_robots_says_otherwise(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 3))
    (t,) = s.due(0)
    s.complete(0, "a.example", t.url, FetchOutcome(200, 10, crawl_delay_s=4))
    clock.advance(4)
    (t,) = s.due(0)
    s.complete(0, "a.example", t.url, OK)  # no robots information this time
    assert _delay_ms(s, "a.example", clock) == 4000
    assert "crawl_delay=4s" in str(s.domain_state(0, "a.example"))


def test_request_spacing_never_below_the_required_delay_over_a_random_crawl(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    """Simulated crawl of 30 domains with random response times and crawl delays."""
    s = make_scheduler(min_delay_s=0.5, response_time_factor=1.5, max_retries=0)
    rnd = random.Random(5)
    domains = [f"d{i}.example" for i in range(30)]
    crawl_delay = {d: rnd.choice([None, 0.2, 2.0]) for d in domains}
    for d in domains:
        s.enqueue(0, _entries(d, 6))
    starts: dict[str, list[tuple[int, int, int]]] = {d: [] for d in domains}  # (start, end, required gap)
    in_flight: list[tuple[int, FetchTicket, int]] = []
    for _ in range(2000):
        for ticket in s.due(0, limit=7):
            elapsed = rnd.randrange(10, 1500)
            in_flight.append((clock.now_ms + elapsed, ticket, elapsed))
        clock.advance(0.05)
        for done in [f for f in in_flight if f[0] <= clock.now_ms]:
            in_flight.remove(done)
            _, ticket, elapsed = done
            cd = crawl_delay[ticket.domain]
            s.complete(0, ticket.domain, ticket.url, FetchOutcome(200, elapsed, crawl_delay_s=cd))
            required = max(500, int(1.5 * elapsed), int((cd or 0) * 1000))
            starts[ticket.domain].append((ticket.dispatched_at_ms, clock.now_ms, required))
    assert sum(len(v) for v in starts.values()) == 30 * 6
    for d, seq in starts.items():
        for (_, end, required), (next_start, _, _) in itertools.pairwise(seq):
            assert next_start - end >= required, d


def test_backoff_doubles_on_503_and_429_and_is_capped(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(max_backoff_s=10, max_retries=10)
    s.enqueue(0, _entries("a.example", 1))
    delays = []
    for status in [503, 429, 503, 503, 503]:
        clock.advance(3600)
        (t,) = s.due(0)
        s.complete(0, "a.example", t.url, FetchOutcome(status, elapsed_ms=10))
        delays.append(_delay_ms(s, "a.example", clock))
    assert delays == [2000, 4000, 8000, 10_000, 10_000]
    clock.advance(3600)
    (t,) = s.due(0)
    s.complete(0, "a.example", t.url, OK)
    assert _delay_ms(s, "a.example", clock) == 1000
    assert s.domain_state(0, "a.example").backoff_level == 0


def test_timeouts_back_off_too(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 1))
    (t,) = s.due(0)
    s.complete(0, "a.example", t.url, FetchOutcome(0, elapsed_ms=1500, error="timeout"))
    assert _delay_ms(s, "a.example", clock) == 6000  # 2 x 1.5 s response time, doubled by the back-off


@pytest.mark.parametrize(("retry_after_s", "expected_ms"), [(30, 30_000), (86_400, 60_000)])
def test_retry_after_is_honoured_up_to_the_backoff_cap(
    make_scheduler: MakeScheduler, clock: ManualClock, retry_after_s: float, expected_ms: int
) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 1))
    (t,) = s.due(0)
    s.complete(0, "a.example", t.url, FetchOutcome(429, elapsed_ms=10, retry_after_s=retry_after_s))
    assert _delay_ms(s, "a.example", clock) == expected_ms


def test_retries_are_bounded_and_come_back_with_a_higher_attempt(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler(max_retries=2)
    s.enqueue(0, _entries("a.example", 1))
    attempts = []
    for _ in range(5):
        clock.advance(3600)
        tickets = s.due(0)
        if not tickets:
            break
        attempts.append(tickets[0].entry.attempt)
        retried = s.complete(0, "a.example", tickets[0].url, FetchOutcome(500, elapsed_ms=5))
        assert [e.attempt for e in retried] == ([tickets[0].entry.attempt + 1] if len(attempts) <= 2 else [])
    assert attempts == [0, 1, 2]
    assert s.stats["gave_up"] == 1
    assert s.pending(0) == (0, 0)


def test_not_found_is_not_retried(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 1))
    (t,) = s.due(0)
    assert s.complete(0, "a.example", t.url, FetchOutcome(404, elapsed_ms=5)) == []


def test_pages_beyond_the_domain_budget_are_never_scheduled(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(max_pages_per_domain=3)
    s.enqueue(0, _entries("a.example", 5))
    urls = []
    for _ in range(10):
        clock.advance(10)
        for t in s.due(0):
            urls.append(t.url)
            s.complete(0, "a.example", t.url, OK)
    assert urls == [f"https://a.example/{i}" for i in range(3)]
    assert s.enqueue(0, _entries("a.example", 2, start=5)) == 0  # the budget is spent
    assert s.stats["skipped_budget"] == 2


def test_a_retry_does_not_spend_a_second_page_of_the_budget(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(max_pages_per_domain=1)
    s.enqueue(0, _entries("a.example", 1))
    (t,) = s.due(0)
    s.complete(0, "a.example", t.url, FetchOutcome(503, elapsed_ms=5))
    clock.advance(3600)
    (again,) = s.due(0)
    assert again.url == t.url and again.entry.attempt == 1


def test_urls_deeper_than_max_depth_are_never_scheduled(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(max_depth=2)
    accepted = s.enqueue(0, _entries("a.example", 2, depth=3) + _entries("a.example", 1, depth=2, start=9))
    assert accepted == 1
    (t,) = s.due(0)
    assert t.entry.depth == 2
    assert s.stats["skipped_depth"] == 2


def test_invalid_domains_are_counted_and_skipped_without_failing_the_batch(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler()
    bad = FrontierEntry("../../etc", "https://x/", 1)
    assert s.enqueue(0, [bad, *_entries("a.example", 1)]) == 1
    assert s.stats["skipped_invalid_domain"] == 1


def test_two_concurrent_due_callers_never_get_the_same_domain(
    redis_client: redis.Redis, tmp_path: Path, clock: ManualClock
) -> None:
    """Two scheduler instances on the same Redis and files race through 300 domains."""
    first = Scheduler(redis_client, tmp_path / "frontier", clock, min_delay_s=0)
    second = Scheduler(redis_client, tmp_path / "frontier", clock, min_delay_s=0)
    domains = [f"d{i}.example" for i in range(300)]
    first.enqueue(0, [e for d in domains for e in _entries(d, 2)])
    got: list[list[FetchTicket]] = [[], []]
    barrier = threading.Barrier(2)

    def drain(index: int, scheduler: Scheduler) -> None:
        barrier.wait()
        for _ in range(200):
            got[index].extend(scheduler.due(0, limit=5))

    threads = [threading.Thread(target=drain, args=(i, s)) for i, s in enumerate([first, second])]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    tickets = got[0] + got[1]
    assert got[0] and got[1]
    assert sorted(t.domain for t in tickets) == sorted(domains)  # each domain exactly once (1 in flight)
    assert all(t.url.endswith("/0") for t in tickets)


def test_state_survives_a_restart_of_the_scheduler_object(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 3) + _entries("b.example", 1))
    tickets = {t.domain: t for t in s.due(0)}
    s.complete(0, "b.example", tickets["b.example"].url, FetchOutcome(200, 100, crawl_delay_s=7))
    del s

    restarted = make_scheduler()  # a new instance on the same Redis and files (load_partition runs)
    assert restarted.due(0, clock.now_ms + 10_000) == []  # a.example still has its request in flight
    restarted.complete(0, "a.example", tickets["a.example"].url, OK)
    clock.advance(1)
    assert [t.url for t in restarted.due(0)] == ["https://a.example/1"]
    assert restarted.domain_state(0, "b.example").crawl_delay_ms == 7000


def test_a_claim_left_by_a_crashed_caller_is_cleared_on_load(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 2))
    # What a crash right after the claim script leaves behind: out of the queue, claimed, a slot taken.
    redis_client.zrem("cs:sched:0:ready", "a.example")
    redis_client.hset("cs:sched:0:d:a.example", mapping={"rd": 1, "infl": 1})
    assert s.due(0) == []
    restarted = make_scheduler()
    assert [t.url for t in restarted.due(0)] == ["https://a.example/0"]


def test_an_expired_lease_is_retried_as_a_timeout(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    """The ticket's request was lost (e.g. a crash before it was produced)."""
    s = make_scheduler(lease_s=60)
    s.enqueue(0, _entries("a.example", 1))
    (lost,) = s.due(0)
    clock.advance(61)
    assert s.due(0) == []  # reclaimed now; back-off applies before the retry
    clock.advance(3600)
    (again,) = s.due(0)
    assert again.url == lost.url and again.entry.attempt == 1
    assert s.stats["leases_expired"] == 1


def test_a_lease_runs_out_by_how_far_the_results_were_read_not_by_the_wall_clock(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    """ADR 035: long past its deadline, a ticket whose result may still be unread stays."""
    s = make_scheduler(lease_s=60)
    s.enqueue(0, _entries("a.example", 1))
    (ticket,) = s.due(0)
    clock.advance(600)
    assert s.due_all([0], expire_through={}) == []  # nothing known of partition 0: nothing expires
    assert s.due_all([0], expire_through={0: ticket.lease_deadline_ms - 1}) == []
    assert s.stats["leases_expired"] == 0
    assert s.due_all([0], expire_through={0: ticket.lease_deadline_ms}) == []  # reclaimed; back-off first
    assert s.stats["leases_expired"] == 1
    clock.advance(3600)
    (again,) = s.due_all([0], expire_through={0: clock.now_ms})
    assert again.url == ticket.url and again.entry.attempt == 1


def test_a_completion_without_a_ticket_changes_nothing(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler()
    assert s.complete(0, "a.example", "https://a.example/never", OK) == []
    assert s.stats["stale_completions"] == 1


def test_consumed_prefix_is_compacted_and_order_kept(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    s = make_scheduler(compact_min_bytes=500, min_delay_s=0, response_time_factor=0)
    s.enqueue(0, _entries("a.example", 40))
    path = s.files.path_for(0, "a.example")
    size_before = path.stat().st_size
    urls = []
    for _ in range(25):
        (t,) = s.due(0)
        urls.append(t.url)
        s.complete(0, "a.example", t.url, OK)
    state = s.domain_state(0, "a.example")
    assert state.generation >= 1 and s.stats["compactions"] >= 1
    assert path.stat().st_size < size_before
    for _ in range(15):
        (t,) = s.due(0)
        urls.append(t.url)
        s.complete(0, "a.example", t.url, OK)
    assert urls == [f"https://a.example/{i}" for i in range(40)]


def test_crash_between_compaction_rename_and_redis_update_loses_and_repeats_nothing(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(min_delay_s=0, response_time_factor=0)
    s.enqueue(0, _entries("a.example", 10))
    for _ in range(4):
        (t,) = s.due(0)
        s.complete(0, "a.example", t.url, OK)
    row = redis_client.hmget("cs:sched:0:d:a.example", "gen", "off", "size")
    s.files.compact(0, "a.example", FileState(*(int(v) for v in row)))  # steps 1-3; the process dies
    restarted = make_scheduler(min_delay_s=0, response_time_factor=0)
    urls = []
    for _ in range(6):
        (t,) = restarted.due(0)
        urls.append(t.url)
        restarted.complete(0, "a.example", t.url, OK)
    assert urls == [f"https://a.example/{i}" for i in range(4, 10)]
    assert restarted.due(0) == []


def test_redis_memory_does_not_grow_with_urls_per_domain(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler()

    def used() -> int:
        return sum(int(redis_client.memory_usage(k) or 0) for k in redis_client.scan_iter("cs:sched:0:*"))

    s.enqueue(0, _entries("a.example", 10))
    small = used()
    s.enqueue(0, _entries("a.example", 3000, start=10))
    assert abs(used() - small) <= 8  # only the digits of the file size grew


def test_domain_state_prints_like_a_slot(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 2))
    s.due(0)
    text = str(s.domain_state(0, "a.example"))
    assert text.startswith("<DomainState a.example p=0 in_flight=1/1 next_in=1.000s")
    assert "pages=1/1000" in text


def test_pending_reports_a_drained_partition(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 1))
    assert s.pending(0) == (1, 0)
    (t,) = s.due(0)
    assert s.pending(0) == (0, 1)
    s.complete(0, "a.example", t.url, OK)
    assert s.pending(0) == (0, 0)


def test_from_settings_uses_the_scheduler_section(redis_client: redis.Redis, tmp_path: Path) -> None:
    s = Scheduler.from_settings(Settings(data_dir=tmp_path), redis_client)
    assert s.min_delay_ms == 1000 and s.max_in_flight == 1
    assert s.files.root == tmp_path / "frontier"


def test_complete_many_matches_one_by_one_and_ignores_a_repeated_result(
    make_scheduler: MakeScheduler, clock: ManualClock
) -> None:
    s = make_scheduler(max_retries=1)
    s.enqueue(0, _entries("a.example", 2) + _entries("b.example", 2))
    tickets = {t.domain: t for t in s.due(0)}
    retried = s.complete_many(
        0,
        [
            ("a.example", tickets["a.example"].url, FetchOutcome(503, elapsed_ms=10)),
            ("b.example", tickets["b.example"].url, FetchOutcome(200, elapsed_ms=900)),
            ("b.example", tickets["b.example"].url, FetchOutcome(200, elapsed_ms=900)),
        ],
    )
    assert [(e.domain, e.attempt) for e in retried] == [("a.example", 1)]
    assert _delay_ms(s, "a.example", clock) == 2000
    assert _delay_ms(s, "b.example", clock) == 1800
    assert s.stats["stale_completions"] == 1
    assert s.pending(0) == (2, 0)


@pytest.mark.parametrize(
    ("outcome", "expected_delay_ms"),
    [
        (FetchOutcome(200, elapsed_ms=100, crawl_delay_s=float("inf")), 86_400_000),  # held to a day
        (FetchOutcome(200, elapsed_ms=100, crawl_delay_s=float("nan")), 1000),  # none
        (FetchOutcome(200, elapsed_ms=100, crawl_delay_s=-5.0), 1000),
        (FetchOutcome(429, elapsed_ms=10, retry_after_s=float("inf")), None),  # up to the back-off cap
    ],
)
def test_delays_from_a_foreign_fetch_result_never_overflow(
    make_scheduler: MakeScheduler, clock: ManualClock, outcome: FetchOutcome, expected_delay_ms: int | None
) -> None:
    """Avro doubles allow inf and NaN: a result produced outside crawlstream must not crash
    the scheduler (``int(inf)`` raised OverflowError)."""
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 2))
    (ticket,) = s.due(0)
    s.complete(0, "a.example", ticket.url, outcome)
    delay = _delay_ms(s, "a.example", clock)
    if expected_delay_ms is not None:
        assert delay == expected_delay_ms
    else:
        assert 0 < delay <= s.max_backoff_ms
