"""The priority lane file (``<domain>~lane``): its codec, rewrite and crash repair, on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import (
    HEADER_SIZE,
    MAX_PRIORITY,
    FileState,
    FrontierEntry,
    FrontierFiles,
    decode_header,
    decode_records,
    encode_header,
    encode_record,
    lane_priority,
    priority_from_real,
)

D = "lane.example"


def _entries(priorities: list[int], start: int = 0) -> list[FrontierEntry]:
    return [
        FrontierEntry(D, f"https://{D}/{start + i}", start + i, depth=1, discovered_at_ms=7, attempt=0, priority=p)
        for i, p in enumerate(priorities)
    ]


@pytest.fixture
def files(tmp_path: Path) -> FrontierFiles:
    return FrontierFiles(tmp_path / "frontier")


def test_lane_records_carry_their_priority_and_fifo_records_do_not() -> None:
    entry = FrontierEntry(D, "https://lane.example/\udcff?q=1\n", 2**64 - 1, 3, -5, 2, priority=MAX_PRIORITY)
    ((back, _),), _ = decode_records(encode_record(entry, lane=True), D, lane=True)
    assert back == entry
    ((fifo, _),), _ = decode_records(encode_record(entry), D)
    assert fifo.priority == 0 and fifo.url == entry.url
    # a lane record is not a FIFO record and the other way round: the lengths do not fit
    assert decode_records(encode_record(entry, lane=True)[:-1], D, lane=True)[0] == []


def test_a_lane_header_is_not_a_fifo_header() -> None:
    assert decode_header(encode_header(9, lane=True), lane=True) == 9
    with pytest.raises(ChecksumMismatch, match="lane"):
        decode_header(encode_header(9), lane=True)
    with pytest.raises(ChecksumMismatch):
        decode_header(encode_header(9, lane=True))


def test_the_lane_lives_next_to_the_domain_file(files: FrontierFiles, tmp_path: Path) -> None:
    state = files.append(0, D, _entries([3]), FileState(), lane=True)
    path = files.path_for(0, D, lane=True)
    assert path == files.path_for(0, D).with_name(D + "~lane") and path.exists()
    assert not files.path_for(0, D).exists()  # the FIFO file is made only when it gets a record
    assert [e.priority for e, _ in files.read(0, D, state, 10, lane=True)] == [3]


def test_the_longest_domain_has_room_for_its_lane_and_rewrite_file(files: FrontierFiles) -> None:
    domain = ".".join(["a" * 61] * 4)[:247].rstrip(".")  # 247 characters, the limit
    assert len(domain) == 247
    state = files.append(
        0, domain, [FrontierEntry(domain, f"https://{domain}/", 1, priority=5)], FileState(), lane=True
    )
    new = files.rewrite(0, domain, state, [FrontierEntry(domain, f"https://{domain}/x", 2, priority=9)])
    assert [e.url_key for e, _ in files.read(0, domain, new, 10, lane=True)] == [2]


def test_rewrite_replaces_the_unread_records_as_the_next_generation(files: FrontierFiles) -> None:
    state = files.append(0, D, _entries([5, 5, 1]), FileState(), lane=True)
    first = files.read(0, D, state, 1, lane=True)
    state = FileState(state.generation, first[0][1], state.size)  # one record consumed
    merged = _entries([9], start=10) + [e for e, _ in files.read(0, D, state, 10, lane=True)]
    new = files.rewrite(0, D, state, merged)
    assert new.generation == state.generation + 1 and new.offset == HEADER_SIZE
    assert [(e.url_key, e.priority) for e, _ in files.read(0, D, new, 10, lane=True)] == [(10, 9), (1, 5), (2, 1)]
    assert not files.path_for(0, D).with_name(D + "~lanetmp").exists()


def test_a_crash_before_the_rewrites_rename_keeps_the_old_lane(files: FrontierFiles) -> None:
    state = files.append(0, D, _entries([4, 2]), FileState(), lane=True)
    tmp = files.path_for(0, D).with_name(D + "~lanetmp")
    tmp.write_bytes(encode_header(state.generation + 1, lane=True) + encode_record(_entries([9])[0], lane=True)[:9])
    fixed = files.reconcile(0, D, state, lane=True)
    assert fixed == state and not tmp.exists()
    assert [e.priority for e, _ in files.read(0, D, fixed, 10, lane=True)] == [4, 2]


def test_a_crash_after_the_rename_before_redis_adopts_the_rewritten_lane(files: FrontierFiles) -> None:
    state = files.append(0, D, _entries([4, 2]), FileState(), lane=True)
    consumed = FileState(state.generation, files.read(0, D, state, 1, lane=True)[0][1], state.size)
    files.rewrite(0, D, consumed, _entries([9], start=5) + _entries([2], start=1))
    # Redis still says the old generation, one record read: the new file holds only unread ones
    fixed = files.reconcile(0, D, consumed, lane=True)
    assert fixed.generation == state.generation + 1 and fixed.offset == HEADER_SIZE
    assert [e.url_key for e, _ in files.read(0, D, fixed, 10, lane=True)] == [5, 1]


def test_a_torn_lane_append_is_cut_on_reconcile(files: FrontierFiles) -> None:
    state = files.append(0, D, _entries([3, 3]), FileState(), lane=True)
    with open(files.path_for(0, D, lane=True), "ab") as fh:
        fh.write(encode_record(_entries([3], start=2)[0], lane=True))  # whole, never acknowledged
        fh.write(encode_record(_entries([3], start=3)[0], lane=True)[:11])  # torn by a kill
    fixed = files.reconcile(0, D, state, lane=True)
    assert [e.url_key for e, _ in files.read(0, D, fixed, 10, lane=True)] == [0, 1, 2]
    assert os.path.getsize(files.path_for(0, D, lane=True)) == fixed.size


def test_read_all_gives_the_lane_then_the_file_and_remove_deletes_both(files: FrontierFiles) -> None:
    files.append(0, D, _entries([0, 0], start=0), FileState())
    files.append(0, D, _entries([8], start=2), FileState(), lane=True)
    assert [e.url_key for e in files.read_all(0, D)] == [2, 0, 1]
    files.remove(0, D)
    assert files.read_all(0, D) == []
    assert not files.path_for(0, D).exists() and not files.path_for(0, D, lane=True).exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 0), (-3, 0), (0, 0), (1, 1), (2**40, MAX_PRIORITY)],
)
def test_lane_priority_of_an_event(value: int | None, expected: int) -> None:
    assert lane_priority(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0),
        (float("nan"), 0),
        (-0.5, 0),
        (0.0, 0),
        (1e-9, 1),
        (0.1, 100),
        (0.9, 900),
        (1.0, 1000),
        (12.3456, 12346),
        (float("inf"), MAX_PRIORITY),
        (1e30, MAX_PRIORITY),
    ],
)
def test_a_real_priority_maps_to_thousandths(value: float | None, expected: int) -> None:
    assert priority_from_real(value) == expected
