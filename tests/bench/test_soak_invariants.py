"""The soak's classification of unstored pages (issue 28): queued for a retry, or lost."""

from __future__ import annotations

from bench.soak.invariants import retry_pending


def test_a_retried_failure_with_an_attempt_left_is_pending_and_the_last_attempt_is_lost() -> None:
    last = {
        "http://a/1": ("timeout", "timed out", 0),  # retried at attempt 1: queued
        "http://a/2": ("connect_error", "refused", 1),  # retried at attempt 2: queued
        "http://a/3": ("timeout", "timed out", 2),  # the last of max_retries 2: given up
        "http://a/4": ("ok", None, 0),  # fetched but not stored: lost
        "http://a/5": ("robots_disallowed", None, 0),  # not retried
    }
    pending = retry_pending(last, max_retries=2)
    assert sorted(pending) == ["http://a/1", "http://a/2"]
    assert pending["http://a/1"] == "timeout (timed out), attempt 0"


def test_a_retry_still_unread_in_its_frontier_file_is_pending(tmp_path) -> None:
    """Session 18's soak counted 58 pages lost that were queued for a retry: a request dropped in
    a broker outage (its ticket expired; no result at all) or a robots.txt that could not be read.
    The scheduler's own state says which are still queued."""
    from bench.soak.final import queued_in_frontier
    from crawlstream.frontier import FrontierEntry
    from crawlstream.politeness import Scheduler
    from crawlstream.redisconn import open_redis
    from crawlstream.settings import load
    from crawlstream.urls import partition_for, url_key

    settings = load({"CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"), "CRAWLSTREAM_BUS_PARTITIONS": "4",
                     "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0"})
    domain = "queued.example"
    urls = [f"http://{domain}/p/{i}" for i in range(3)]
    partition = partition_for(domain, 4)
    with open_redis(None, settings.data_dir) as handle:
        scheduler = Scheduler.from_settings(settings, handle.client)
        scheduler.load_partition(partition)
        entries = [FrontierEntry(domain=domain, url=u, url_key=url_key(u), depth=1, discovered_at_ms=0, attempt=1)
                   for u in urls]
        scheduler.enqueue(partition, entries)
        handed_out = scheduler.due(partition)
        scheduler.flush_partition(partition)
    assert [t.entry.url for t in handed_out] == urls[:1]
    queued = queued_in_frontier(settings, {*urls, "http://other.example/"})
    assert queued == {u: "queued in the frontier, attempt 1" for u in urls[1:]}
