"""Every CRC-framed file format, on real files: a torn tail and a flipped byte are handled as
they always were (these tests were written against the four hand-rolled codecs first), the
bytes on disk are the ones the shared ``encode_frame`` writes, and the readers walk them with
``iter_frames`` (a recording wrapper sees each format's reads)."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlstream.durable import _frames
from crawlstream.frontier import HEADER_SIZE, FileState, FrontierEntry, FrontierFiles, encode_record
from crawlstream.lake._staging import Row, StagingLog
from crawlstream.politeness._revisit import (
    RevisitFiles,
    RevisitRecord,
    Validators,
    decode_revisits,
    encode_revisit,
)
from crawlstream.store._codec import decode_log_records, encode_log_record
from crawlstream.store._logs import read_log

# -- helpers ----------------------------------------------------------------------------------


def _frame(payload: bytes, fmt: str = "<II") -> bytes:
    """The framing as each format has always written it, spelled out independently."""
    return struct.pack(fmt, len(payload), zlib.crc32(payload)) + payload


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


@pytest.fixture
def frame_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records which shared framing functions ran (wrapping the real ones)."""
    calls: list[str] = []
    real_iter, real_encode = _frames.iter_frames, _frames.encode_frame

    def iter_frames(*args: object, **kwargs: object) -> Iterator[_frames.Frame]:
        calls.append("iter_frames")
        return real_iter(*args, **kwargs)

    def encode_frame(*args: object, **kwargs: object) -> bytes:
        calls.append("encode_frame")
        return real_encode(*args, **kwargs)

    for module in _framed_modules():
        if hasattr(module, "iter_frames"):
            monkeypatch.setattr(module, "iter_frames", iter_frames)
        if hasattr(module, "encode_frame"):
            monkeypatch.setattr(module, "encode_frame", encode_frame)
    return calls


def _framed_modules() -> list[object]:
    from crawlstream.frontier import _records
    from crawlstream.lake import _staging
    from crawlstream.politeness import _revisit
    from crawlstream.store import _codec

    return [_codec, _records, _revisit, _staging]


# -- content store logs (index.log, ops.log, quarantine.log, dicts.log) -----------------------

LOG_RECORDS: list[dict[str, Any]] = [{"a": 1}, {"b": "zwei"}, {"c": [3]}]


def _log_bytes() -> tuple[bytes, list[int]]:
    frames = [encode_log_record(r) for r in LOG_RECORDS]
    ends = [sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    return b"".join(frames), ends


def test_store_log_bytes_are_little_endian_frames_of_compact_json(frame_calls: list[str]) -> None:
    assert encode_log_record({"a": 1, "u": "é"}) == _frame('{"a":1,"u":"é"}'.encode())
    assert "encode_frame" in frame_calls


def test_store_log_torn_tail_is_truncated(tmp_path: Path, frame_calls: list[str]) -> None:
    data, ends = _log_bytes()
    path = tmp_path / "ops.log"
    path.write_bytes(data[:-3])
    assert read_log(path) == LOG_RECORDS[:2]
    assert path.read_bytes() == data[: ends[1]]
    assert "iter_frames" in frame_calls


def test_store_log_flipped_payload_byte_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, ends = _log_bytes()
    damaged = _flip(data, ends[0] + 9)  # inside the second record's payload
    assert decode_log_records(damaged) == ([LOG_RECORDS[0], LOG_RECORDS[2]], len(data), 1)
    path = tmp_path / "index.log"
    path.write_bytes(damaged)
    assert read_log(path) == [LOG_RECORDS[0], LOG_RECORDS[2]]
    assert path.read_bytes() == damaged  # nothing truncated: the damage is not a tail
    assert "1 log records failed their crc32" in caplog.text


def test_store_log_flipped_length_byte_ends_the_walk_there(tmp_path: Path) -> None:
    data, ends = _log_bytes()
    damaged = _flip(data, ends[0] + 3)  # the second record's length claims 1 GiB more
    assert decode_log_records(damaged) == ([LOG_RECORDS[0]], ends[0], 0)
    path = tmp_path / "quarantine.log"
    path.write_bytes(damaged)
    assert read_log(path) == [LOG_RECORDS[0]]
    assert path.read_bytes() == data[: ends[0]]


def test_store_log_payload_that_is_not_a_json_object_is_skipped_and_counted() -> None:
    data = encode_log_record({"a": 1}) + _frame(b"[1, 2]") + _frame(b"{not json") + encode_log_record({"b": 2})
    assert decode_log_records(data) == ([{"a": 1}, {"b": 2}], len(data), 2)


# -- frontier files ---------------------------------------------------------------------------

DOMAIN = "example.com"


def _entries(n: int) -> list[FrontierEntry]:
    return [FrontierEntry(DOMAIN, f"https://example.com/{i}", i, depth=1) for i in range(n)]


def test_frontier_record_bytes_are_little_endian_frames(frame_calls: list[str]) -> None:
    entry = FrontierEntry(DOMAIN, "https://example.com/x", 7, depth=2, discovered_at_ms=9, attempt=1)
    payload = struct.pack("<QqHH", 7, 9, 2, 1) + b"https://example.com/x"
    assert encode_record(entry) == _frame(payload)
    lane = FrontierEntry(DOMAIN, "https://example.com/x", 7, priority=5)
    assert encode_record(lane, lane=True) == _frame(struct.pack("<QqHHi", 7, 0, 0, 0, 5) + b"https://example.com/x")
    assert "encode_frame" in frame_calls


@pytest.mark.parametrize("lane", [False, True])
def test_frontier_torn_tail_is_cut_on_reconcile(tmp_path: Path, lane: bool, frame_calls: list[str]) -> None:
    files = FrontierFiles(tmp_path)
    state = files.append(0, DOMAIN, _entries(1), FileState(), lane=lane)
    path = files.path_for(0, DOMAIN, lane=lane)
    good = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(encode_record(_entries(2)[1], lane=lane))
        fh.write(encode_record(_entries(3)[2], lane=lane)[:-4])
    new = files.reconcile(0, DOMAIN, state, lane=lane)
    assert new.size == len(good) + len(encode_record(_entries(2)[1], lane=lane))
    assert path.stat().st_size == new.size
    assert [e.url for e, _ in files.read(0, DOMAIN, new, limit=10, lane=lane)] == [e.url for e in _entries(2)]
    assert "iter_frames" in frame_calls


def test_frontier_flipped_byte_ends_the_good_records_and_is_cut_on_reconcile(tmp_path: Path) -> None:
    files = FrontierFiles(tmp_path)
    state = files.append(0, DOMAIN, _entries(1), FileState())
    path = files.path_for(0, DOMAIN)
    first_end = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(_flip(encode_record(_entries(2)[1]), 12))  # a payload byte of the second record
        fh.write(encode_record(_entries(3)[2]))  # a good record after it is not reached
    decoded, end = _decode_frontier(path.read_bytes()[HEADER_SIZE:])
    assert [e.url for e, _ in decoded] == [_entries(1)[0].url] and end == first_end - HEADER_SIZE
    new = files.reconcile(0, DOMAIN, state)
    assert new.size == first_end and path.stat().st_size == first_end


def test_frontier_length_out_of_bounds_ends_the_records() -> None:
    good = encode_record(_entries(1)[0])
    too_short = _frame(b"\x00" * 10)  # shorter than the fixed fields
    assert _decode_frontier(good + too_short + good) == (_decode_frontier(good)[0], len(good))
    too_long = struct.pack("<II", 21 + (1 << 20), 0)
    assert _decode_frontier(good + too_long + b"x" * 64)[1] == len(good)


def test_frontier_invalid_utf8_with_a_good_crc_ends_the_records() -> None:
    good = encode_record(_entries(1)[0])
    bad = _frame(struct.pack("<QqHH", 1, 0, 0, 0) + b"\xff\xfe")
    decoded, end = _decode_frontier(good + bad + good)
    assert len(decoded) == 1 and end == len(good)


def _decode_frontier(data: bytes) -> tuple[list[tuple[FrontierEntry, int]], int]:
    from crawlstream.frontier import decode_records

    return decode_records(data, DOMAIN)


# -- revisit files ----------------------------------------------------------------------------


def _revisits(n: int) -> list[RevisitRecord]:
    return [RevisitRecord(1000 + i, i, 1, "a.io", f"http://a.io/{i}", Validators('"e"', None, None)) for i in range(n)]


def test_revisit_record_bytes_are_little_endian_frames(frame_calls: list[str]) -> None:
    record = RevisitRecord(5, 6, 7, "a.io", "http://a.io/", Validators("e", None, "h"))
    fields = b"".join(struct.pack("<H", len(s)) + s for s in (b"a.io", b"http://a.io/", b"e", b"", b"h"))
    assert encode_revisit(record) == _frame(struct.pack("<QQH", 5, 6, 7) + fields)
    assert "encode_frame" in frame_calls


def test_revisit_torn_tail_is_cut_before_the_next_append(tmp_path: Path, frame_calls: list[str]) -> None:
    files = RevisitFiles(tmp_path, 60_000)
    records = _revisits(3)
    path = tmp_path / "0" / "0.rv"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_revisit(records[0]) + encode_revisit(records[1])[:-2])
    files.append(0, [records[2]])
    assert path.read_bytes() == encode_revisit(records[0]) + encode_revisit(records[2])
    assert "iter_frames" in frame_calls


def test_revisit_flipped_byte_ends_the_good_records(tmp_path: Path) -> None:
    records = _revisits(3)
    first = encode_revisit(records[0])
    data = first + _flip(encode_revisit(records[1]), 20) + encode_revisit(records[2])
    decoded, end = decode_revisits(data)
    assert [r for r, _ in decoded] == records[:1] and end == len(first)
    files = RevisitFiles(tmp_path, 60_000)
    path = tmp_path / "0" / "0.rv"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    new = _revisits(4)[3]
    files.append(0, [new])
    assert path.read_bytes() == first + encode_revisit(new)


def test_revisit_length_out_of_bounds_or_undecodable_fields_end_the_records() -> None:
    first = encode_revisit(_revisits(1)[0])
    assert decode_revisits(first + _frame(b"\x00" * 17) + first)[1] == len(first)  # shorter than the fixed part
    assert decode_revisits(first + struct.pack("<II", 64 * 1024 + 1, 0) + b"x" * 100)[1] == len(first)
    field_past_end = _frame(struct.pack("<QQH", 1, 2, 3) + struct.pack("<H", 50) + b"ab")
    assert decode_revisits(first + field_past_end + first)[1] == len(first)


def test_revisit_read_due_stops_at_damage(tmp_path: Path) -> None:
    from crawlstream.politeness._revisit import RevisitCursor

    records = _revisits(3)
    path = tmp_path / "0" / "0.rv"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_revisit(records[0]) + _flip(encode_revisit(records[1]), 20) + encode_revisit(records[2]))
    got, cursor, _ = RevisitFiles(tmp_path, 60_000).read_due(0, RevisitCursor(), 10_000, 10)
    assert got == records[:1] and cursor == RevisitCursor(0, len(encode_revisit(records[0])))


# -- parquet sink staging log -----------------------------------------------------------------

ROW_A: Row = (1, "https://a.example/", "a.example", None, None)
ROW_B: Row = (2, "https://b.example/", "b.example", 7, "{}")


def _staging(tmp_path: Path, *batches: list[Row]) -> tuple[Path, list[int]]:
    log = StagingLog(tmp_path / "s", fsync=False)
    ends = []
    for batch in batches:
        log.append(batch)
        ends.append((tmp_path / "s" / "rows.log").stat().st_size)
    log.close()
    return tmp_path / "s" / "rows.log", ends


def test_staging_bytes_are_big_endian_frames_of_json_rows(tmp_path: Path, frame_calls: list[str]) -> None:
    path, _ = _staging(tmp_path, [ROW_A])
    assert path.read_bytes() == _frame(json.dumps([ROW_A], separators=(",", ":")).encode(), ">II")
    assert "encode_frame" in frame_calls


def test_staging_torn_tail_is_truncated_on_replay(tmp_path: Path, frame_calls: list[str]) -> None:
    path, ends = _staging(tmp_path, [ROW_A], [ROW_B])
    with open(path, "r+b") as fh:
        fh.truncate(ends[1] - 3)
    log = StagingLog(tmp_path / "s")
    assert log.replay() == [ROW_A]
    log.close()
    assert path.stat().st_size == ends[0]
    assert "iter_frames" in frame_calls


def test_staging_flipped_byte_ends_the_good_batches_and_is_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, ends = _staging(tmp_path, [ROW_A], [ROW_B], [ROW_A])
    path.write_bytes(_flip(path.read_bytes(), ends[0] + 10))
    log = StagingLog(tmp_path / "s")
    assert log.replay() == [ROW_A]
    log.close()
    assert path.stat().st_size == ends[0]
    assert "truncated" in caplog.text


def test_staging_six_field_rows_of_old_logs_still_read(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    old = [[1, "https://a.example/", "a.example", 123, None, None]]  # with the url_key ADR 007 dropped
    (tmp_path / "s" / "rows.log").write_bytes(_frame(json.dumps(old).encode(), ">II"))
    log = StagingLog(tmp_path / "s")
    assert log.replay() == [ROW_A]
    log.close()


# -- the shared codec -------------------------------------------------------------------------


def test_iter_frames_policy() -> None:
    from crawlstream.durable import encode_frame, iter_frames

    a, b, c = encode_frame(b"one"), encode_frame(b"two"), encode_frame(b"three", byteorder="big")
    frames = list(iter_frames(a + _flip(b, 9) + a[:-1], base_offset=100))
    assert [(f.offset, f.end, bytes(f.payload), f.intact) for f in frames] == [
        (100, 100 + len(a), b"one", True),
        (100 + len(a), 100 + len(a) + len(b), b"t7o", False),  # damage is yielded, marked
    ]  # the torn third frame ends the walk
    assert [bytes(f.payload) for f in iter_frames(c, byteorder="big")] == [b"three"]
    assert list(iter_frames(a, min_size=4)) == [] and list(iter_frames(a, max_size=2)) == []
    assert list(iter_frames(b"\x03\x00\x00")) == []


def test_iter_frames_reads_a_file_from_its_position(tmp_path: Path) -> None:
    from crawlstream.durable import encode_frame, iter_frames

    path = tmp_path / "f"
    path.write_bytes(b"HEAD" + encode_frame(b"x"))
    with open(path, "rb") as fh:
        fh.seek(4)
        assert [(f.offset, bytes(f.payload)) for f in iter_frames(fh, base_offset=4)] == [(4, b"x")]



# -- the static check -------------------------------------------------------------------------

CRC_ALLOWED = {
    "libs/crawlstream/store/_codec.py": "segment record and group headers: a CRC inside a zstd skippable frame",
    "libs/crawlstream/store/_retrain.py": "walks those segment record headers",
    "libs/crawlstream/bus/_embedded_records.py": "Kafka-like batches: the CRC covers offset, timestamp, key and value",
    "libs/crawlstream/bus/_embedded_log.py": "checks those batches' CRCs when it recovers a segment's tail",
    "libs/crawlstream/status/_embedded_offsets.py": "reads the embedded log's head file (its CRC)",
    "libs/crawlstream/index/_formats.py": "postings blocks: a CRC in a block header of the index file",
    "libs/crawlstream/index/_storage.py": "index files read from object storage: the CRC32 the manifest records",
    "libs/crawlstream/dedupe/_filter.py": "Bloom snapshots: one CRC over a whole file",
}


def test_no_other_module_frames_records_with_its_own_crc() -> None:
    """A new length + CRC log must use ``crawlstream.durable``'s framing; the other CRCs guard
    headers and whole files, not a stream of frames."""
    repo = Path(__file__).resolve().parents[2]
    users = sorted(
        p.relative_to(repo).as_posix()
        for top in ("libs", "services")
        for p in (repo / top).rglob("*.py")
        if "crc32" in p.read_text() and "zlib" in p.read_text()
    )
    assert set(users) - {"libs/crawlstream/durable/_frames.py"} == set(CRC_ALLOWED)
