"""Run every benchmark module (``bench/bench_*.py``) and print one JSON document.

``python -m bench [--quick] [name ...]`` — names select modules (``urls`` for bench_urls).
``python -m bench soak --minutes M --seed S`` — the chaos soak (``bench.soak.run``: hours, opt-in,
never part of the full run).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time

from bench._harness import machine


def _main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["soak"]:
        from bench.soak.run import main as soak

        raise SystemExit(soak(args[1:]))
    quick = "--quick" in args
    wanted = {a for a in args if not a.startswith("-")}
    import bench

    results: dict[str, object] = {"machine": machine()}
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if not info.name.startswith("bench_"):
            continue
        short = info.name.removeprefix("bench_")
        if wanted and short not in wanted:
            continue
        module = importlib.import_module(f"bench.{info.name}")
        started = time.perf_counter()
        results[short] = module.run(quick)
        sys.stderr.write(f"bench {short}: {time.perf_counter() - started:.1f}s\n")
    sys.stdout.write(json.dumps(results, indent=2, default=str) + "\n")


_main()
