"""The soak's invariants (issue 28): unstored pages queued for a retry or lost; repeats and
spacing as a stalled server records them."""

from __future__ import annotations

from bench.soak.invariants import politeness, repeats, retry_pending
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord


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


def _request(
    host: str, path: str, time_s: float, earliest_s: float | None = None, abandoned: bool = False
) -> RequestRecord:
    return RequestRecord(host, path, time_s, 200, "crawlstream", None, None, earliest_s, abandoned)


def test_a_request_retried_after_its_client_gave_up_is_a_time_out_not_a_defect() -> None:
    """A stalled server handles a request its client has timed out on, then the retry: two
    requests of one page, the first abandoned. A repeat of an answered request stays unexplained."""
    web = DemoWeb(3, seed=1)
    host = web.model.domains[0]
    stalled = [_request(host, "/p/1", 10.0, earliest_s=8.5, abandoned=True), _request(host, "/p/1", 10.1)]
    counted = repeats([*stalled, _request(host, "/p/2", 11.0), _request(host, "/p/2", 12.0)], [], max_retries=2)
    assert counted["beyond_allowance"] == 2 and counted["explained_by_time_outs"] == 1
    assert counted["unexplained"] == 1 and counted["examples"][0].startswith(f"http://{host}/p/2 ")


def test_a_gap_a_stalled_server_compressed_is_judged_by_when_the_request_may_have_arrived() -> None:
    web = DemoWeb(3, seed=1)
    host = web.model.domains[0]
    stalled = [_request(host, "/p/1", 10.0, earliest_s=8.5, abandoned=True), _request(host, "/p/1", 10.1)]
    assert politeness(web, stalled, min_delay_s=1.0)["spacing_violations"] == 0
    close = [_request(host, "/p/1", 10.0), _request(host, "/p/2", 10.1)]
    assert politeness(web, close, min_delay_s=1.0)["spacing_violations"] == 1
