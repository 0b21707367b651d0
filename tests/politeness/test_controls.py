"""Operator controls (exclusion, per-domain overrides, the run's page budget) and DNS back-off,
with the real Redis and real frontier files; a manual clock unless the test measures real time."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import (
    EXCLUDED_ERROR,
    Controls,
    DomainOverride,
    ExcludedDomains,
    FetchOutcome,
    Scheduler,
)
from crawlstream.politeness.service import to_outcome

if TYPE_CHECKING:
    from tests.politeness.conftest import ManualClock

OK = FetchOutcome(status=200, elapsed_ms=10)
EXCLUDED = FetchOutcome(status=0, error=EXCLUDED_ERROR)
MakeScheduler = Callable[..., Scheduler]


def _entries(domain: str, n: int, start: int = 0) -> list[FrontierEntry]:
    return [FrontierEntry(domain, f"https://{domain}/{i}", i) for i in range(start, start + n)]


def _drain(s: Scheduler, clock: ManualClock, steps: int = 50, step_s: float = 1.0) -> list[str]:
    """Run the scheduler like the service (due, then complete each ticket OK); URLs in order."""
    urls: list[str] = []
    for _ in range(steps):
        for t in s.due(0):
            urls.append(t.url)
            s.complete(0, t.domain, t.url, OK)
        clock.advance(step_s)
    return urls


# -- exclusion ---------------------------------------------------------------------------------


def test_an_excluded_domain_is_not_released_and_its_urls_wait_parked(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler()
    ctl = Controls(redis_client, clock)
    s.enqueue(0, _entries("a.example", 3) + _entries("b.example", 3))
    assert ctl.exclude(["a.example"]) == 1 and ctl.exclude(["a.example"]) == 0
    assert {u.split("/")[2] for u in _drain(s, clock, steps=10)} == {"b.example"}
    s.enqueue(0, _entries("a.example", 2, start=3))  # arrives while excluded: parked too
    assert s.stats["parked_excluded"] == 2
    assert _drain(s, clock, steps=5) == []
    assert s.pending(0) == (0, 0)  # nothing releasable: a run with --exit-when-done may end
    assert "EXCLUDED" in str(s.domain_state(0, "a.example"))

    assert ctl.include(["a.example"]) == 1
    assert _drain(s, clock) == [f"https://a.example/{i}" for i in range(5)]  # resumed, in order


def test_a_request_the_fetcher_skipped_as_excluded_is_parked_not_retried(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler(max_pages_per_domain=2)
    ctl = Controls(redis_client, clock)
    s.enqueue(0, _entries("a.example", 2))
    (ticket,) = s.due(0)  # released before the exclusion
    ctl.exclude(["a.example"])
    assert ctl.in_flight(["a.example"]) == 1
    assert s.complete(0, ticket.domain, ticket.url, EXCLUDED) == []  # not a retry
    assert ctl.in_flight(["a.example"]) == 0
    state = s.domain_state(0, "a.example")
    assert state.pages == 0 and state.backoff_level == 0  # the page is refunded, no back-off
    clock.advance(5)
    assert s.due(0) == []
    ctl.include(["a.example"])
    tickets = _drain_tickets(s, clock)
    assert [(t.url, t.entry.attempt) for t in tickets] == [("https://a.example/1", 0), ("https://a.example/0", 0)]


def _drain_tickets(s: Scheduler, clock: ManualClock) -> list:  # type: ignore[type-arg]
    out = []
    for _ in range(10):
        for t in s.due(0):
            out.append(t)
            s.complete(0, t.domain, t.url, OK)
        clock.advance(2)
    return out


def test_a_scheduler_loaded_after_the_exclusion_does_not_release_the_domain(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler()
    s.enqueue(0, _entries("a.example", 2))
    Controls(redis_client, clock).exclude(["a.example"])
    s2 = make_scheduler()  # load_partition requeues every domain: not this one
    assert s2.due(0) == [] and s.pending(0) == (0, 0)


def test_the_fetchers_view_reads_the_set_only_when_it_changed(redis_client: redis.Redis) -> None:
    calls: list[str] = []

    class Spy(redis.Redis):
        def smembers(self, name: str) -> set:  # type: ignore[override,type-arg]
            calls.append(name)
            return super().smembers(name)  # type: ignore[return-value]

    spy = Spy(connection_pool=redis_client.connection_pool)
    view = ExcludedDomains(lambda: spy)
    ctl = Controls(redis_client)
    assert view.current() == frozenset()
    ctl.exclude(["a.example", "b.example"])
    assert view.current() == {"a.example", "b.example"}
    for _ in range(5):
        assert view.current() == {"a.example", "b.example"}
    ctl.include(["a.example"])
    assert view.current() == {"b.example"}
    assert len(calls) == 3  # first read, and once after each change


def test_the_fetchers_view_keeps_the_last_set_when_redis_fails(redis_client: redis.Redis) -> None:
    Controls(redis_client).exclude(["a.example"])
    clients: list[redis.Redis] = [redis_client]
    view = ExcludedDomains(lambda: clients[0])
    assert view.current() == {"a.example"}
    clients[0] = redis.Redis(unix_socket_path="/nonexistent/redis.sock")
    assert view.current() == {"a.example"} and view.failed_reads == 1


# -- overrides -----------------------------------------------------------------------------------


def test_a_page_budget_override_stops_and_a_raised_one_resumes_the_domain(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler()
    ctl = Controls(redis_client, clock)
    s.enqueue(0, _entries("a.example", 6))
    ctl.set_override("a.example", DomainOverride(page_budget=2))
    assert len(_drain(s, clock)) == 2
    assert s.domain_state(0, "a.example").max_pages == 2
    ctl.set_override("a.example", DomainOverride(page_budget=4))  # wakes the domain up
    assert len(_drain(s, clock)) == 2
    assert ctl.clear_override("a.example") and ctl.override("a.example") is None
    assert len(_drain(s, clock)) == 2 and s.domain_state(0, "a.example").max_pages == 1000


def test_a_max_in_flight_override_lets_more_requests_run_at_once(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler(min_delay_s=0)
    ctl = Controls(redis_client, clock)
    s.enqueue(0, _entries("a.example", 5))
    assert len(s.due(0) + s.due(0)) == 1
    ctl.set_override("a.example", DomainOverride(max_in_flight=3))
    assert len(s.due(0) + s.due(0) + s.due(0)) == 2
    assert s.domain_state(0, "a.example").in_flight == 3


def test_a_longer_delay_holds_the_domain_from_its_last_request_at_once(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler(min_delay_s=1.0, response_time_factor=0)
    ctl = Controls(redis_client, clock)
    s.enqueue(0, _entries("a.example", 5))
    (t,) = s.due(0)
    s.complete(0, t.domain, t.url, OK)  # next at +1 s under the settings
    ctl.set_override("a.example", DomainOverride(delay_s=10))
    clock.advance(1.5)
    assert s.due(0) == []  # the next fetch time was computed before; the claim holds it
    clock.advance(8.4)
    assert s.due(0) == []
    clock.advance(0.2)
    (t,) = s.due(0)
    s.complete(0, t.domain, t.url, OK)
    assert s.domain_state(0, "a.example").next_fetch_at_ms - clock.now_ms == 10_000
    assert "delay_override=10s" in str(s.domain_state(0, "a.example"))


def test_a_shorter_delay_applies_from_the_next_request(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler(min_delay_s=5.0, response_time_factor=0)
    Controls(redis_client, clock).set_override("a.example", DomainOverride(delay_s=0.5))
    s.enqueue(0, _entries("a.example", 3))
    got = _drain(s, clock, steps=6, step_s=0.5)
    assert len(got) == 3  # 0.5 s apart, not 5 s


def test_a_delay_override_takes_effect_within_a_second_on_two_schedulers_sharing_redis(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Two scheduler instances (as two processes would: one Redis, one partition each) run on
    the wall clock; 0.5 s into the crawl the operator sets a 0.4 s delay on every domain. Every
    dispatch after the command returned must keep it; the measured propagation is the time
    from the command's return to the last dispatch that did not."""
    domains = [f"d{i}.example" for i in range(4)]
    schedulers = []
    for partition in (0, 1):
        s = Scheduler(redis_client, tmp_path / "frontier", min_delay_s=0.02, response_time_factor=0)
        s.load_partition(partition)
        mine = domains[partition::2]
        s.enqueue(partition, [e for d in mine for e in _entries(d, 200)])
        schedulers.append((partition, s))
    # (before the due() call that handed it out, after it, domain): the scheduler stamped the
    # dispatch between the two, whatever a loaded machine does to this thread
    dispatched: list[tuple[float, float, str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def loop(partition: int, s: Scheduler) -> None:
        while not stop.is_set():
            asked = time.monotonic()
            tickets = s.due(partition)
            got = time.monotonic()
            for t in tickets:
                with lock:
                    dispatched.append((asked, got, t.domain))
                s.complete(partition, t.domain, t.url, OK)
            time.sleep(0.005)

    threads = [threading.Thread(target=loop, args=pair) for pair in schedulers]
    for th in threads:
        th.start()
    try:
        time.sleep(0.5)
        ctl = Controls(redis_client)
        for d in domains:
            ctl.set_override(d, DomainOverride(delay_s=0.4))
        returned = time.monotonic()
        time.sleep(2.0)
    finally:
        stop.set()
        for th in threads:
            th.join()
    late_violations: list[float] = []
    for d in domains:
        spans = [(asked, got) for asked, got, dom in dispatched if dom == d]
        before = [got for _, got in spans if got < returned]
        assert len(before) >= 5  # it ran fast under the settings
        for (a_asked, _), (b_asked, b_got) in itertools.pairwise(spans):
            if b_asked >= returned and b_got - a_asked < 0.4:  # closer than the delay for certain
                late_violations.append(b_asked - returned)
        after = [asked for asked, _ in spans if asked >= returned]
        assert 3 <= len(after) <= 6  # about 2 s / 0.4 s
    assert late_violations == [], f"dispatches closer than the new delay, s after the command: {late_violations}"


# -- the run's page budget -------------------------------------------------------------------------


def test_the_crawl_budget_caps_pages_plus_in_flight_and_refunds_failures(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, clock: ManualClock
) -> None:
    s = make_scheduler(max_in_flight_per_domain=5, min_delay_s=0, response_time_factor=0)
    ctl = Controls(redis_client, clock)
    s.enqueue(0, [e for d in ("a.example", "b.example", "c.example") for e in _entries(d, 5)])
    assert ctl.set_crawl_budget(4, used=1) == 1  # one page fetched before
    tickets = s.due(0) + s.due(0) + s.due(0) + s.due(0)
    assert len(tickets) == 3 and ctl.crawl_budget() == (4, 4)
    s.complete(0, tickets[0].domain, tickets[0].url, FetchOutcome(status=0, error="connect"))  # no page: refunded
    s.complete(0, tickets[1].domain, tickets[1].url, OK)
    assert ctl.crawl_budget() == (4, 3)
    assert len(s.due(0) + s.due(0)) == 1
    assert ctl.crawl_budget() == (4, 4)
    ctl.clear_crawl_budget()
    assert len(s.due(0)) == 3


# -- DNS failures ---------------------------------------------------------------------------------


def _failed(outcome: str, **fields: Any) -> FetchOutcome:
    """What the scheduler makes of a fetch result of ``a.example/0`` that received no response."""
    from crawlstream.events import FetchResult

    return to_outcome(
        FetchResult(
            url="https://a.example/0",
            url_key=0,
            domain="a.example",
            depth=0,
            status=0,
            outcome=outcome,
            fetched_at_ms=0,
            elapsed_ms=3,
            attempt=0,
            **fields,
        )
    )


def test_a_dns_failure_is_retried_with_back_off_like_a_503(make_scheduler: MakeScheduler, clock: ManualClock) -> None:
    dns = _failed("dns_error")
    assert dns.backs_off and dns.retryable
    s = make_scheduler(min_delay_s=1.0, response_time_factor=0, max_retries=2)
    s.enqueue(0, _entries("a.example", 1))
    waits = []
    attempts = []
    for _ in range(3):
        (t,) = [t for _ in range(200) for t in _due_after(s, clock)][:1]
        attempts.append(t.entry.attempt)
        s.complete(0, t.domain, t.url, dns)
        waits.append(s.domain_state(0, "a.example").next_fetch_at_ms - clock.now_ms)
    assert attempts == [0, 1, 2]  # retried up to max_retries, then given up
    assert waits == [2000, 4000, 8000]  # doubling, as after a 503
    assert s.stats["gave_up"] == 1


@pytest.mark.parametrize(
    ("retry_after_s", "attempts"),
    [(None, [0]), (0.3, [0, 1, 2])],
    ids=["a-rule-disallows-it-final", "robots-txt-unreadable-retried"],
)
def test_a_url_robots_txt_could_not_be_read_for_is_retried_and_one_a_rule_disallows_is_not(
    make_scheduler: MakeScheduler, clock: ManualClock, retry_after_s: float | None, attempts: list[int]
) -> None:
    """RFC 9309's "complete disallow" after a 5xx or unreachable robots.txt lasts until it can be
    read: the fetcher says so with a back-off, and the URL waits for it (a seed dropped on one
    robots.txt timeout took its whole domain with it)."""
    outcome = _failed(
        "robots_disallowed",
        error="robots.txt unreachable (network error)" if retry_after_s else "disallowed by robots.txt",
        retry_after_s=retry_after_s,
    )
    assert outcome.retryable is (retry_after_s is not None)
    s = make_scheduler(min_delay_s=1.0, response_time_factor=0, max_retries=2)
    s.enqueue(0, _entries("a.example", 1))
    seen = []
    for _ in range(3):
        tickets = [t for _ in range(200) for t in _due_after(s, clock)][:1]
        if not tickets:
            break
        seen.append(tickets[0].entry.attempt)
        s.complete(0, tickets[0].domain, tickets[0].url, outcome)
    assert seen == attempts
    assert s.stats["gave_up"] == (1 if retry_after_s else 0)
    assert s.pending(0) == (0, 0)


def _due_after(s: Scheduler, clock: ManualClock) -> list:  # type: ignore[type-arg]
    clock.advance(0.5)
    return s.due(0)
