"""Freed heap memory goes back to the OS (ADR 034, session 22): the soak's services stepped up
at each fault and stayed there, glibc keeping what a catch-up's large batches had freed."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from crawlstream.runtime._memory import MemoryTrimmer, release_free_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")

# A catch-up batch in a fresh process: 300,000 decoded messages (a dict, a str, 700 bytes of
# body each), 1 in 50 kept, the rest freed; RSS after the free, then after the trim under test.
BURST = """
import gc, json, sys, time, psutil
from crawlstream.runtime._memory import MemoryTrimmer, release_free_memory
rss = lambda: psutil.Process().memory_info().rss
batch = [{"url": f"https://d{i % 5000}.example/p/{i}", "body": bytes([i % 256]) * 700} for i in range(300_000)]
kept = batch[::50]
del batch
gc.collect()
freed = rss()
if sys.argv[1] == "call":
    release_free_memory()
elif sys.argv[1] == "thread":
    trimmer = MemoryTrimmer(0.2)
    trimmer.start()
    time.sleep(1.0)
    trimmer.stop()
print(json.dumps({"freed": freed, "after": rss(), "kept": len(kept)}))
"""


def _burst(how: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", BURST, how], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


@glibc
def test_memory_a_burst_freed_stays_with_the_process_until_it_is_trimmed() -> None:
    untouched = _burst("none")
    trimmed = _burst("call")
    assert untouched["freed"] > 200e6  # the burst's memory is still the process's after the free
    assert untouched["after"] > 0.9 * untouched["freed"]
    assert trimmed["after"] < 0.6 * trimmed["freed"], trimmed  # most of it given back


@glibc
def test_the_trimmer_thread_gives_freed_memory_back_on_its_interval_and_stops() -> None:
    result = _burst("thread")
    assert result["after"] < 0.6 * result["freed"], result


def test_a_zero_interval_starts_no_thread_and_a_trim_never_raises() -> None:
    trimmer = MemoryTrimmer(0)
    trimmer.start()
    assert trimmer._thread is None
    trimmer.stop()
    assert release_free_memory(collect=True) in (True, False)
