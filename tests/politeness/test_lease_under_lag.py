"""Lease expiry judged by what the scheduler has read, not by the wall clock (issue 28, ADR 035).

The 2-hour soak (session 16) ran its scheduler ~20,000 events behind on ``fetch.results``: a
ticket's result waited in the topic longer than the lease, the ticket was reclaimed as a
timeout, the URL was fetched again (470,313 requests for 276,272 URLs) and retries ran out.
These tests reproduce it at small scale on the real embedded bus and a real Redis: a scheduler
that reads its results late in small batches.
"""

from __future__ import annotations

import time

LEASE_S = 1.0


def test_results_read_after_the_lease_time_out_no_ticket_and_fetch_nothing_twice(service_rig) -> None:
    """The soak's failure: every result was produced within its lease, the scheduler reads
    them later than that, two per batch; each batch's dispatch must not reclaim the tickets
    whose results wait further on in the topic."""
    with service_rig(batch_size=2, lease_s=LEASE_S) as r:
        urls = r.seed(10)
        r.run()
        first = r.requests()
        assert sorted(q.url for q in first) == sorted(urls)
        r.answer(first)
        time.sleep(LEASE_S * 1.5)  # the results wait in fetch.results past their lease
        r.run()
        assert r.scheduler.stats["leases_expired"] == 0
        assert r.scheduler.stats["stale_completions"] == 0
        assert len(r.requests()) == len(urls)  # nothing fetched twice
        assert r.scheduler.pending(0) == (0, 0)


def test_a_lost_request_is_still_timed_out_once_the_scheduler_has_read_past_its_lease(service_rig) -> None:
    """What the lease is for: a request that never reached a fetcher (a crash before it was
    produced, a fetcher that dropped it) is retried once the scheduler has read every result
    produced in its lease, here by catching up with the topic."""
    with service_rig(batch_size=2, lease_s=LEASE_S) as r:
        r.seed(3)
        r.run()
        first = r.requests()
        lost, answered = first[0], first[1:]
        r.answer(answered)
        r.run()
        time.sleep(LEASE_S * 1.5)
        r.run()
        assert r.scheduler.stats["leases_expired"] == 1
        time.sleep(0.1)  # the retry's back-off (scheduler.max_backoff_s)
        r.run()
        retries = [q for q in r.requests() if q.attempt == 1]
        assert [q.url for q in retries] == [lost.url]
