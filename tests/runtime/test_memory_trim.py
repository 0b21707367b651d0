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


# Sixteen threads allocating at once in a fresh process, then the arenas glibc made for them,
# counted from malloc_info's report (one <heap nr=...> per arena).
ARENAS = """
import ctypes, ctypes.util, json, os, re, sys, tempfile, threading
from crawlstream.runtime import limit_malloc_arenas
took = limit_malloc_arenas(int(sys.argv[1]))
libc = ctypes.CDLL(ctypes.util.find_library("c"))
malloc, free = libc.malloc, libc.free
malloc.restype, malloc.argtypes, free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
start = threading.Barrier(16)
def work():
    start.wait()
    for _ in range(200):
        free(malloc(4096))
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes, libc.malloc_info.argtypes = [ctypes.c_void_p], [ctypes.c_int, ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "malloc_info.xml")
fh = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fh)
libc.fclose(fh)
print(json.dumps({"took": took, "arenas": len(re.findall(r'<heap nr="\\d+">', open(path).read()))}))
"""


def _arenas(limit: int) -> dict[str, int]:
    command = [sys.executable, "-c", ARENAS, str(limit)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@glibc
def test_the_arena_limit_keeps_many_threads_in_few_arenas() -> None:
    """Session 24's link extractors held ~14 arenas (librdkafka's and Arrow's threads) and crept:
    holes freed in one arena are not reused by another."""
    default, capped = _arenas(0), _arenas(2)
    assert default["took"] == 0 and default["arenas"] > 4, default  # one per thread, up to 8 per core
    assert capped["took"] == 1 and capped["arenas"] <= 2, capped
