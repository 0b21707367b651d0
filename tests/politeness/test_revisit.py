"""Revisits (ADR 022): a fetched page comes back after the configured age with its validators,
on a hand-moved clock, the real Redis and real files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import FetchOutcome, RevisitFiles, Scheduler, Validators
from crawlstream.politeness._revisit import RevisitCursor, RevisitRecord, decode_revisits, encode_revisit

if TYPE_CHECKING:
    from tests.politeness.conftest import ManualClock

MakeScheduler = Callable[..., Scheduler]
PAGE = Validators('"v1"', "Wed, 01 Jan 2026 00:00:00 GMT", "ab" * 16)


def _fetch_one(s: Scheduler, outcome: FetchOutcome) -> str:
    (ticket,) = s.due(0)
    s.complete(0, ticket.domain, ticket.url, outcome)
    return ticket.url


def test_the_codec_round_trips_and_stops_at_a_torn_tail() -> None:
    record = RevisitRecord(123, (1 << 63) - 1, 3, "b\u00fccher.de", "http://x.de/\udcff", PAGE)
    data = encode_revisit(record) + encode_revisit(RevisitRecord(5, 1, 0, "a.io", "http://a.io/", Validators()))
    decoded, end = decode_revisits(data)
    assert [r for r, _ in decoded] == [record, RevisitRecord(5, 1, 0, "a.io", "http://a.io/", Validators())]
    assert end == len(data)
    torn, end = decode_revisits(data[:-3])
    assert [r for r, _ in torn] == [record] and end == decoded[0][1]


def test_a_fetched_page_is_due_again_after_the_age_with_its_validators(
    make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path
) -> None:
    s = make_scheduler(revisit_after_s=3600, revisit_root=tmp_path / "revisit")
    s.enqueue(0, [FrontierEntry("a.example", "https://a.example/", 7, depth=2)])
    url = _fetch_one(s, FetchOutcome(200, elapsed_ms=10, validators=PAGE))
    clock.advance(3599)
    assert s.due(0) == []
    clock.advance(2)
    (ticket,) = s.due(0)
    assert (ticket.url, ticket.entry.url_key, ticket.entry.depth) == (url, 7, 2)
    assert ticket.validators == PAGE
    assert s.stats["revisits_released"] == 1


def test_a_304_keeps_the_validators_it_does_not_restate_and_schedules_the_next_visit(
    make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path
) -> None:
    s = make_scheduler(revisit_after_s=60, revisit_root=tmp_path / "revisit")
    s.enqueue(0, [FrontierEntry("a.example", "https://a.example/", 7)])
    _fetch_one(s, FetchOutcome(200, validators=PAGE))
    clock.advance(61)
    _fetch_one(s, FetchOutcome(304, validators=Validators(etag='"v1"')))
    clock.advance(61)
    (ticket,) = s.due(0)
    assert ticket.validators == PAGE
    assert s.stats["not_modified"] == 1


def test_a_page_gone_404_is_not_revisited_again(
    make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path
) -> None:
    s = make_scheduler(revisit_after_s=60, revisit_root=tmp_path / "revisit", max_retries=0)
    s.enqueue(0, [FrontierEntry("a.example", "https://a.example/", 7)])
    _fetch_one(s, FetchOutcome(200, validators=PAGE))
    clock.advance(61)
    _fetch_one(s, FetchOutcome(404))
    clock.advance(3600)
    assert s.due(0) == []


def test_a_revisit_that_fails_for_good_on_a_503_comes_back_with_its_old_validators(
    make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path
) -> None:
    s = make_scheduler(revisit_after_s=60, revisit_root=tmp_path / "revisit", max_retries=0)
    s.enqueue(0, [FrontierEntry("a.example", "https://a.example/", 7)])
    _fetch_one(s, FetchOutcome(200, validators=PAGE))
    clock.advance(61)
    _fetch_one(s, FetchOutcome(503))  # no retries left: given up
    clock.advance(61)
    (ticket,) = s.due(0)
    assert ticket.validators == PAGE and s.stats["revisits_failed"] == 1


def test_revisits_survive_a_new_owner_and_read_files_are_removed(
    make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path
) -> None:
    root = tmp_path / "revisit"
    s = make_scheduler(revisit_after_s=60, revisit_root=root)
    s.enqueue(0, [FrontierEntry("a.example", f"https://a.example/{i}", i) for i in range(3)])
    for _ in range(3):
        _fetch_one(s, FetchOutcome(200, validators=PAGE))
        clock.advance(1)
    s.flush_partition(0)
    clock.advance(600)  # past the files' slices: they can be read to the end and removed
    other = make_scheduler(revisit_after_s=60, revisit_root=root)  # loads partition 0 again
    urls = set()
    for _ in range(3):
        urls.add(_fetch_one(other, FetchOutcome(404)))  # gone: no further revisit
        clock.advance(2)
    assert urls == {f"https://a.example/{i}" for i in range(3)}
    assert RevisitFiles(root, 60_000).buckets(0) == []


def test_refetch_enqueue_forgets_waiting_validators(
    make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path
) -> None:
    s = make_scheduler(revisit_after_s=60, revisit_root=tmp_path / "revisit")
    entry = FrontierEntry("a.example", "https://a.example/", 7)
    s.enqueue(0, [entry])
    _fetch_one(s, FetchOutcome(200, validators=PAGE))
    s.enqueue(0, [entry], unconditional=True)  # a refetch, while the revisit is not due yet
    clock.advance(2)
    assert s.due(0)[0].validators is None
    clock.advance(60)
    s.complete(0, "a.example", entry.url, FetchOutcome(200, validators=PAGE))
    clock.advance(61)
    (revisit,) = s.due(0)
    assert revisit.validators == PAGE  # a revisit released now carries them again


def test_without_an_age_nothing_is_recorded(make_scheduler: MakeScheduler, clock: ManualClock, tmp_path: Path) -> None:
    s = make_scheduler()
    s.enqueue(0, [FrontierEntry("a.example", "https://a.example/", 7)])
    _fetch_one(s, FetchOutcome(200, validators=PAGE))
    clock.advance(10**6)
    assert s.due(0) == [] and s.revisits is None and not (tmp_path / "revisit").exists()


def test_read_due_stays_on_an_open_slice_and_moves_past_a_closed_one(tmp_path: Path) -> None:
    files = RevisitFiles(tmp_path, 1000)
    files.append(0, [RevisitRecord(1500, 1, 0, "a.io", "http://a.io/1", Validators())])
    got, cursor, next_due = files.read_due(0, RevisitCursor(), 1600, 10)
    assert [r.url for r in got] == ["http://a.io/1"] and cursor.bucket_ms == 1000 and next_due is None
    files.append(0, [RevisitRecord(1700, 2, 0, "a.io", "http://a.io/2", Validators())])
    got, cursor, next_due = files.read_due(0, cursor, 2100, 10)
    assert [r.url for r in got] == ["http://a.io/2"] and cursor == RevisitCursor(2000, 0)
    assert files.remove_read(0, cursor) == 1 and files.buckets(0) == []
