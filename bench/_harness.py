"""Shared helpers for benchmarks: where the third-party data is, machine facts, JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
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


def main(run: Callable[[bool], dict[str, Any]]) -> None:
    """Entry point for ``python -m bench.bench_x [--quick]``: prints one JSON document."""
    quick = "--quick" in sys.argv[1:]
    result = {"machine": machine(), **run(quick)}
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
