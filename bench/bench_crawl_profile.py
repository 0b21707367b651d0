"""Where an embedded crawl's CPU goes, by pipeline stage (issue 15's table, ADR 009).

One ``crawlstream run --exit-when-done`` of the crawl benchmark's synthetic web (the same
``bench_crawl`` world: robots, Crawl-delay, sitemaps, bombs) under ``py-spy record --gil``:
py-spy samples only the thread that holds the GIL, so a sample is Python CPU time of some
service thread, and threads waiting on a lock, a socket or fsync are not counted. Each
sample goes to the stage of its leaf-most frame that a rule below names (``stage_of``).
Work a C extension does without the GIL (zstd, zlib, pyarrow's writers) is missed, so the
shares are of Python CPU; ``cpu_ms_per_page`` is the process's whole user+sys time
(``RUSAGE_SELF`` at exit, py-spy's own time excluded) over the pages the web served.

Sampling at 200 Hz costs the crawl a few percent; compare shares between runs of the same
world, not the absolute ms with ``bench_crawl``'s.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench._harness import main
from bench.bench_crawl import _crawlstream_env, crawlstream_run_command, demo_web, write_crawl_inputs

# (stage, substring of a frame), checked from the leaf frame up: the first frame any rule
# names decides the stage. Library frames come before our modules so that, e.g., redis-py
# called from the scheduler counts as Redis, not scheduling.
STAGE_RULES: tuple[tuple[str, str], ...] = (
    ("Avro encode/decode", "fastavro"),
    ("Avro encode/decode", "crawlstream/events/"),
    ("Redis round trips", "redis/"),
    ("Redis round trips", "crawlstream/redisconn"),
    ("HTTP client (aiohttp)", "aiohttp/"),
    ("HTTP client (aiohttp)", "yarl/"),
    ("HTTP client (aiohttp)", "multidict/"),
    ("sitemaps (gunzip, parse)", "crawlstream/sitemaps/"),
    ("link extraction", "crawlstream/links/"),
    ("URL canonicalization", "crawlstream/urls/"),
    ("dedupe (Bloom)", "crawlstream/dedupe/"),
    ("scheduling (politeness, frontier)", "crawlstream/politeness/"),
    ("scheduling (politeness, frontier)", "crawlstream/frontier/"),
    ("robots", "crawlstream/robots/"),
    ("robots", "protego"),
    ("fetch (decode, guard, outcome)", "crawlstream/fetch/"),
    ("content store", "crawlstream/store/"),
    ("content store", "zstandard"),
    ("Parquet sink (lake)", "crawlstream/lake/"),
    ("Parquet sink (lake)", "pyarrow/"),
    ("bus (embedded log)", "crawlstream/bus/"),
    ("bus (embedded log)", "crawlstream/durable"),
    ("asyncio event loop", "asyncio/"),
    ("asyncio event loop", "selectors.py"),
    ("service loop (runtime)", "crawlstream/runtime/"),
    ("crawl runner, progress", "crawlstream/crawl/"),
    ("start-up (imports, settings)", "importlib"),
    ("start-up (imports, settings)", "crawlstream/settings/"),
    ("start-up (imports, settings)", "crawlstream/cli/"),
)
SAMPLE_RATE_HZ = 200


def stage_of(frames: list[str]) -> str:
    """The stage of one stack (root first), by its leaf-most frame a rule names."""
    for frame in reversed(frames):
        for stage, needle in STAGE_RULES:
            if needle in frame:
                return stage
    return "other"


def stage_shares(raw_profile: str) -> tuple[dict[str, float], int]:
    """Share of samples per stage (largest first) of py-spy's ``raw`` (collapsed) output."""
    counts: Counter[str] = Counter()
    for line in raw_profile.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if stack and n.isdigit():
            counts[stage_of(stack.split(";"))] += int(n)
    total = sum(counts.values())
    return {stage: n / total for stage, n in counts.most_common()} if total else {}, total


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy not found: it is in requirements.lock (make venv)")
    return found


def run(quick: bool) -> dict[str, Any]:
    n_domains, pages_per_domain = (300, 8) if quick else (1000, 8)
    web = demo_web(n_domains, pages_per_domain)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp, web:
        root = Path(tmp)
        seeds_file, resolve_map_file = write_crawl_inputs(web, root)
        crawl = crawlstream_run_command(seeds_file)
        # the crawl reports its own CPU at exit: py-spy's sampling is not the crawl's cost
        crawl[2] = (
            "import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
            "'CRAWL_CPU_S %f\\n' % sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))); " + crawl[2]
        )
        profile = root / "profile.txt"
        cmd = [_py_spy(), "record", "--gil", "--nonblocking", "--rate", str(SAMPLE_RATE_HZ)]
        cmd += ["--format", "raw", "--output", str(profile), "--", *crawl]
        env = _crawlstream_env(root / "data", resolve_map_file)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        cpu = re.search(r"CRAWL_CPU_S ([0-9.]+)", done.stderr)
        if done.returncode != 0 or cpu is None or not profile.exists():
            raise SystemExit(f"profiled crawl failed (exit {done.returncode}): {done.stderr[-2000:]}")
        pages = sum(1 for r in web.requests() if r.path not in ("/robots.txt", "/robots-moved.txt"))
        shares, samples = stage_shares(profile.read_text(encoding="utf-8"))
    cpu_ms_per_page = 1000 * float(cpu.group(1)) / max(pages, 1)
    return {
        "domains": n_domains,
        "pages": pages,
        "crawl_cpu_s": round(float(cpu.group(1)), 2),
        "cpu_ms_per_page": round(cpu_ms_per_page, 3),
        "gil_samples": samples,
        "stages": {
            stage: {"share": round(share, 4), "ms_per_page": round(share * cpu_ms_per_page, 3)}
            for stage, share in shares.items()
        },
    }


if __name__ == "__main__":
    main(run)
