"""A long-lived lake writer's memory must not grow with the files it publishes (issue 28).

The 2-hour soak of session 18 saw each parquet-sink member's RSS climb steadily, ~1 MB a
minute (184 -> 306 MB): the sink publishes a file per lake prefix every 20 s, ~32,000 files a
member in two hours, and ``LakeWriter`` kept a ``WrittenFile`` (a dataclass with its path
object and strings) for every file it had ever written. Reproduced at small scale: the Python
heap a writer holds across 600 more published files, per file.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from crawlstream.lake import LakeWriter
from crawlstream.urls import canonicalize

BOUND_BYTES_PER_FILE = 50  # nothing the writer keeps should be per file


def _publish(writer: LakeWriter, i: int) -> None:
    writer.add_canonical(1, canonicalize(f"https://site{i % 5}.example/page/{i}"), ts_ms=i)
    assert len(writer.flush()) == 1


def test_the_heap_a_writer_holds_does_not_grow_with_the_files_it_publishes(tmp_path: Path) -> None:
    writer = LakeWriter(tmp_path, io_threads=1)
    for i in range(100):
        _publish(writer, i)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100, 700):
            _publish(writer, i)
        gc.collect()
        per_file = (tracemalloc.get_traced_memory()[0] - before) / 600
    finally:
        tracemalloc.stop()
        writer.close()
    assert per_file < BOUND_BYTES_PER_FILE, f"the writer's heap grew {per_file:.0f} B per published file"
    totals = writer.totals
    assert (totals.files, totals.rows) == (700, 700)
