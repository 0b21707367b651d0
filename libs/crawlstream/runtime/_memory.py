"""Give the heap memory a service has freed back to the operating system (glibc ``malloc_trim``).

A service that catches up after a fault (a broker back, Redis back, a member rebuilt) decodes
batches far larger than its steady ones; once they are freed, glibc keeps the pages in its
arenas for reuse, and only the top of the main heap is ever trimmed by itself. The process's
RSS then steps up at each fault and never comes down: the session-22 soak's schedulers, link
extractors and bucket compressors grew 10-12% in 45 minutes that way, in steps at faults
(ADR 034, "Session 22"). Measured on a 440 MB burst of decoded messages, 1 in 50 kept:
RSS stayed at 438 MB after the free and fell to 177 MB after ``malloc_trim(0)`` (0.2 s).

Arenas: glibc gives each new thread an arena of its own, up to 8 per core, and a service's
client libraries run many threads (librdkafka ~25, Arrow's pools). Each arena keeps its own
free lists, so memory freed in one is not reused by the others and the holes add up: session
24's link extractors had ~14 arenas and 73 MB in them, creeping 3-5% an hour after their
warm-up. ``limit_malloc_arenas`` caps them (``mallopt(M_ARENA_MAX)``, the knob the
``MALLOC_ARENA_MAX`` variable sets) before the clients start their threads.

``malloc_trim`` and ``mallopt`` are glibc's; elsewhere (musl, macOS) there is nothing to call and
these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MemoryTrimmer", "limit_malloc_arenas", "release_free_memory"]

logger = logging.getLogger(__name__)


M_ARENA_MAX = -8  # glibc's malloc.h


def _glibc_function(name: str, argtypes: list[Any]) -> Any:
    """glibc's ``name`` typed to return an int, or None off glibc (no ``malloc_trim`` there)."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    try:
        libc = ctypes.CDLL(libc_name)
    except OSError:
        return None
    function = getattr(libc, name, None)
    if function is None or getattr(libc, "malloc_trim", None) is None:
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


_malloc_trim: Callable[[int], int] | None = _glibc_function("malloc_trim", [ctypes.c_size_t])
_mallopt: Callable[[int, int], int] | None = _glibc_function("mallopt", [ctypes.c_int, ctypes.c_int])


def limit_malloc_arenas(count: int) -> bool:
    """At most ``count`` malloc arenas in this process from now on (0 = glibc's own limit).
    Threads started before keep the arenas they have, so call it before any client starts.
    True when glibc took the limit."""
    if count <= 0 or _mallopt is None:
        return False
    return bool(_mallopt(M_ARENA_MAX, count))


def release_free_memory(*, collect: bool = False) -> bool:
    """Return the free pages of every malloc arena to the OS; ``collect`` runs the cyclic
    garbage collector first (after a rebuild: the old service's cycles are garbage now).
    True when glibc gave memory back, False when it had none to give or this is not glibc."""
    if collect:
        gc.collect()
    if _malloc_trim is None:
        return False
    return bool(_malloc_trim(0))


class MemoryTrimmer:
    """``release_free_memory`` every ``interval_s`` on a daemon thread, while the process runs
    (0 = never). A thread of its own, so that a service's loop, whatever it waits on, needs no
    hook: glibc locks one arena at a time while it trims."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval_s <= 0 or _malloc_trim is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="memory-trim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                release_free_memory()
            except Exception:  # never let a trim take the process down
                logger.exception("returning freed memory to the OS failed")
