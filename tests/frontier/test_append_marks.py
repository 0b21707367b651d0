"""The log of appends beside the frontier files (``frontier.AppendMarks``, ADR 037): what the
next owner reads back after a crash cut a frame short, and how the log stays small."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from crawlstream.frontier import AppendMark, AppendMarks

START_S = 1_700_000_000.0


def test_marks_read_back_in_order_with_their_domains(tmp_path: Path) -> None:
    marks = AppendMarks(tmp_path, clock=lambda: START_S)
    marks.record(3, 10, ["a.example", "b.example"])
    marks.record(3, 12, [])
    assert marks.read(3) == [
        AppendMark(10, 1_700_000_000_000, ("a.example", "b.example")),
        AppendMark(12, 1_700_000_000_000, ()),
    ]
    assert marks.read(4) == []


def test_a_torn_last_frame_is_cut_off_so_later_marks_are_not_hidden(tmp_path: Path) -> None:
    marks = AppendMarks(tmp_path, clock=lambda: START_S)
    marks.record(0, 5, ["a.example"])
    marks.record(0, 9, ["b.example"])
    path = marks.path_for(0)
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])  # the writer died inside its last write
    assert [m.through for m in marks.read(0)] == [5]
    marks.record(0, 9, ["b.example"])  # the next owner appends again
    assert [m.through for m in AppendMarks(tmp_path).read(0)] == [5, 9]


def test_the_log_keeps_only_recent_appends_once_it_is_large(tmp_path: Path) -> None:
    now = [START_S]
    marks = AppendMarks(tmp_path, keep_s=60, max_bytes=4096, clock=lambda: now[0])
    for through in range(1, 200):
        marks.record(1, through, [f"d{through}.example"])
        now[0] += 1
    kept = [m.through for m in marks.read(1)]
    assert kept == list(range(kept[0], 200))  # the newest, none missing among them
    assert kept[0] > 199 - 150  # the old ones went
    assert len(kept) >= 60  # the last minute stays whole
    assert marks.path_for(1).stat().st_size <= 3 * 4096


def test_a_busy_partition_trims_less_often_without_letting_a_quiet_one_grow(tmp_path: Path) -> None:
    """A partition whose last ``keep_s`` is larger than half the limit gets its own higher limit
    (else it would rewrite its log on every append); the other partitions keep the configured one."""
    now = [START_S]
    marks = AppendMarks(tmp_path, keep_s=600, max_bytes=4096, clock=lambda: now[0])
    for through in range(1, 400):  # busy: one append a second, all within keep_s
        marks.record(1, through, [f"busy-{through}.example"])
        now[0] += 1
    assert marks.path_for(1).stat().st_size > 4096  # within keep_s: kept, under a raised limit
    for through in range(1, 400):  # quiet: one append a minute, old ones past keep_s
        marks.record(2, through, [f"quiet-{through}.example"])
        now[0] += 60
    assert marks.path_for(2).stat().st_size <= 4096 + 64


def test_reading_past_a_mark_decodes_only_the_appends_after_it(tmp_path: Path) -> None:
    """A new owner reads the log on every assign to find the few appends past the Redis mark
    (after a fault, a scheduler assigns all its partitions at once). Decoding every frame's
    domains made ~5 MB of strings per megabyte of log, each time: session 24's soak stepped the
    schedulers' RSS up at each Redis kill. Only the frames past the mark are decoded now."""
    marks = AppendMarks(tmp_path, max_bytes=1 << 30, clock=lambda: START_S)
    for through in range(1, 3001):  # ~1 MB: about what a busy partition keeps
        marks.record(0, through, [f"d{(through * 31 + i) % 9600:04d}.example" for i in range(20)])
    size = marks.path_for(0).stat().st_size
    assert [m.through for m in marks.read(0, after=2998)] == [2999, 3000]
    assert marks.read(0, after=2999)[0].domains[:2] == ("d6600.example", "d6601.example")  # 3000 * 31 % 9600
    tracemalloc.start()
    try:
        assert len(marks.read(0, after=2998)) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * size  # the file's bytes and an index of frames (all decoded: ~6x)
    assert len(marks.read(0)) == 3000  # all of them when no mark is given
