"""Frontier files on disk: append, read, torn tails, compaction and crashes in between."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import HEADER_SIZE, FileState, FrontierEntry, FrontierFiles, encode_record
from crawlstream.urls import domain_prefix

DOMAIN = "example.com"


def _entries(n: int, start: int = 0) -> list[FrontierEntry]:
    return [FrontierEntry(DOMAIN, f"https://example.com/p/{i}\n|x", i, depth=i % 4) for i in range(start, start + n)]


def _read_all(files: FrontierFiles, state: FileState) -> list[FrontierEntry]:
    return [e for e, _ in files.read(3, DOMAIN, state, limit=10_000)]


@pytest.fixture
def files(tmp_path: Path) -> FrontierFiles:
    return FrontierFiles(tmp_path / "frontier")


def test_file_lives_under_partition_and_domain_prefix(files: FrontierFiles, tmp_path: Path) -> None:
    files.append(3, DOMAIN, _entries(1), FileState())
    assert files.path_for(3, DOMAIN) == tmp_path / "frontier" / "3" / domain_prefix(DOMAIN) / DOMAIN
    assert files.path_for(3, DOMAIN).exists()


def test_appended_entries_read_back_in_order_with_offsets(files: FrontierFiles) -> None:
    state = files.append(3, DOMAIN, _entries(5), FileState())
    state = files.append(3, DOMAIN, _entries(5, start=5), state)
    got = files.read(3, DOMAIN, state, limit=100)
    assert [e for e, _ in got] == _entries(10)
    offsets = [o for _, o in got]
    assert offsets == sorted(offsets) and offsets[-1] == state.size
    rest = files.read(3, DOMAIN, FileState(0, offsets[6], state.size), limit=100)
    assert [e.url_key for e, _ in rest] == [7, 8, 9]


def test_read_of_a_record_longer_than_the_read_chunk(files: FrontierFiles) -> None:
    big = FrontierEntry(DOMAIN, "https://example.com/" + "a" * 100_000, 1)
    state = files.append(3, DOMAIN, [big, *_entries(1)], FileState())
    assert _read_all(files, state) == [big, *_entries(1)]


def test_torn_tail_after_a_kill_is_cut_and_whole_unacknowledged_records_kept(files: FrontierFiles) -> None:
    """Redis knows 2 records; the file holds 3 whole ones plus half a fourth."""
    acknowledged = files.append(3, DOMAIN, _entries(2), FileState())
    path = files.path_for(3, DOMAIN)
    with open(path, "ab") as fh:
        fh.write(encode_record(_entries(1, start=2)[0]))
        fh.write(encode_record(_entries(1, start=3)[0])[:-5])
    state = files.reconcile(3, DOMAIN, acknowledged)
    assert _read_all(files, state) == _entries(3)
    assert path.stat().st_size == state.size
    state = files.append(3, DOMAIN, _entries(1, start=3), state)  # appends continue cleanly
    assert _read_all(files, state) == _entries(4)


def test_file_torn_while_being_created_counts_as_empty(files: FrontierFiles) -> None:
    path = files.path_for(3, DOMAIN)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"CSFR")
    state = files.reconcile(3, DOMAIN, FileState())
    assert state == FileState()
    state = files.append(3, DOMAIN, _entries(2), state)
    assert _read_all(files, state) == _entries(2)


def test_damage_below_the_acknowledged_size_is_reported_not_skipped(files: FrontierFiles) -> None:
    state = files.append(3, DOMAIN, _entries(3), FileState())
    path = files.path_for(3, DOMAIN)
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE + 10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch, match="damaged"):
        files.read(3, DOMAIN, state)


def test_compaction_keeps_unread_records_in_order_and_bumps_generation(files: FrontierFiles) -> None:
    state = files.append(3, DOMAIN, _entries(100), FileState())
    consumed = files.read(3, DOMAIN, state, limit=60)
    state = FileState(state.generation, consumed[-1][1], state.size)
    before = files.path_for(3, DOMAIN).stat().st_size
    compacted = files.compact(3, DOMAIN, state)
    assert compacted.generation == 1 and compacted.offset == HEADER_SIZE
    assert compacted.size == files.path_for(3, DOMAIN).stat().st_size < before
    assert _read_all(files, compacted) == _entries(40, start=60)
    compacted = files.append(3, DOMAIN, _entries(1, start=100), compacted)
    assert _read_all(files, compacted) == _entries(41, start=60)


def test_crash_before_the_rename_leaves_the_old_file_in_force(files: FrontierFiles) -> None:
    state = files.append(3, DOMAIN, _entries(10), FileState())
    state = FileState(0, files.read(3, DOMAIN, state, limit=4)[-1][1], state.size)
    stray = files.path_for(3, DOMAIN).with_name(DOMAIN + "~compact")
    stray.write_bytes(b"half a compaction")
    assert files.reconcile(3, DOMAIN, state) == state
    assert not stray.exists()
    assert _read_all(files, state) == _entries(6, start=4)


def test_crash_after_the_rename_before_redis_update_adopts_the_new_file(files: FrontierFiles) -> None:
    """Redis still holds the old generation and offset: the file header tells them apart."""
    state = files.append(3, DOMAIN, _entries(10), FileState())
    old = FileState(0, files.read(3, DOMAIN, state, limit=4)[-1][1], state.size)
    files.compact(3, DOMAIN, old)  # step 4 (store in Redis) never happens
    recovered = files.reconcile(3, DOMAIN, old)
    assert recovered.generation == 1
    assert _read_all(files, recovered) == _entries(6, start=4)


def test_missing_file_reconciles_to_empty(files: FrontierFiles) -> None:
    assert files.reconcile(3, DOMAIN, FileState(2, 100, 500)) == FileState(2, HEADER_SIZE, HEADER_SIZE)


def test_sync_fsyncs_each_dirty_file_once(files: FrontierFiles) -> None:
    files.append(3, DOMAIN, _entries(1), FileState())
    files.append(3, "other.example", [FrontierEntry("other.example", "https://other.example/", 1)], FileState())
    assert files.sync() == 2
    assert files.sync() == 0
