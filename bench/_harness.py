"""Shared helpers for benchmarks: where the third-party data is, machine facts, JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """../shared/data (override with CRAWLSTREAM_SHARED_DATA)."""
    override = os.environ.get("CRAWLSTREAM_SHARED_DATA")
    return Path(override) if override else REPO.parent / "shared" / "data"


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def process_cpu_s(process: Any) -> float:
    """User+sys seconds of a ``psutil.Process`` and its waited-for children so far."""
    t = process.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def latency_ms(samples_s: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 in milliseconds (nearest rank) and the sample count."""
    xs = sorted(samples_s)
    if not xs:
        return {"n": 0}

    def q(p: float) -> float:
        return round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 3)

    return {"p50_ms": q(0.50), "p95_ms": q(0.95), "p99_ms": q(0.99), "n": len(xs)}


def drop_page_cache(paths: Iterable[Path]) -> None:
    """Evict ``paths`` from the page cache (POSIX_FADV_DONTNEED): the next read goes to the disk."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main(run: Callable[[bool], dict[str, Any]]) -> None:
    """Entry point for ``python -m bench.bench_x [--quick]``: prints one JSON document."""
    quick = "--quick" in sys.argv[1:]
    result = {"machine": machine(), **run(quick)}
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
