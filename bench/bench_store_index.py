"""The url index in SQLite (ADR 036) beside the build before it, measured in the same run.

``python -m bench.bench_store_index [--quick] [--before PATH]``: PATH is a checkout of the build to
compare with (``git worktree add --detach /tmp/store-before <commit>``); without it only this
build is measured. Every measurement runs in a fresh child process whose ``PYTHONPATH`` is the
build's ``libs``, the two builds alternating, each measurement repeated (``REPS``); the JSON
gives the median of each and after/before ratios. A loaded machine moves the absolute numbers,
the ratios much less: compare those.

* ``puts_small``: puts/s (wall) and CPU per put of ``BUILD_PAGES`` synthetic ~0.6 KB pages over
  200 domains, ``fsync="never"``: the index's share of a put at its largest. The store it leaves
  is the one the next two open.
* ``puts_synced``: the same small pages with ``fsync="batch"`` and ``sync`` every ``SYNC_EVERY``
  puts, as the bucket compressor does at the end of a batch (segment fsync; then the index.log
  fsync before, a commit of the index transaction now).
* ``puts_real``: puts/s of the real pages of ../shared/data/html (each copy's body made
  distinct, so every put compresses): what a bucket compressor stores.
* ``open``: start-up of that store in a fresh process (``ContentStore(root)``), and the RSS it
  holds after it.
* ``get_warm``: p50/p99 of ``get`` (lookup + read + checks) over ``READS`` random URLs, each read
  once before (files in the page cache, index pages warm).
* ``archived``: the 957 real pages put once and moved to the archive tier by a pass with ages
  zero (``archive_level`` 19 to keep it short), then reopened: the index's bytes a page on disk
  (sealed blocks since session 21; format 3's snapshot before ADR 036), and p50/p99 of ``entry``
  (the lookup alone) and ``get`` over every URL in random order, warm (read once before).
* ``heap_per_page``: tracemalloc's Python heap growth per page over 6,000 puts after 1,000
  (``tests/store/test_index_memory.py``'s measurement).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUILD_PAGES = 200_000
QUICK_BUILD_PAGES = 20_000
READS = 2_000
REPS = 3
REAL_COPIES = 3  # the 957 real pages, this many times (distinct bodies)
SYNCED_PAGES = 5_000
SYNC_EVERY = 100


def _small_body(i: int) -> bytes:
    return f"<html><title>Post {i}</title><body>{'lorem ipsum ' * 40}{i}</body></html>".encode()


def _small_url(i: int) -> str:
    return f"http://www.site{i % 200}.example/blog/post-{i}.html"


# ------------------------------------------------------------------ children (either build)


def _child_build(root: Path, pages: int) -> dict[str, Any]:
    from crawlstream.store import ContentStore, StoreConfig

    store = ContentStore(root, config=StoreConfig(fsync="never"))
    t, c = time.perf_counter(), time.process_time()
    for i in range(pages):
        store.put(_small_url(i), _small_body(i), content_type="text/html", title=f"Post number {i}", status=200)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    store.close()
    return {"puts_per_s": pages / wall, "cpu_us_per_put": cpu / pages * 1e6}


def _child_synced(root: Path) -> dict[str, Any]:
    from crawlstream.store import ContentStore, StoreConfig

    store = ContentStore(root, config=StoreConfig(fsync="batch"))
    t, c = time.perf_counter(), time.process_time()
    for i in range(SYNCED_PAGES):
        store.put(_small_url(i), _small_body(i), content_type="text/html", title=f"Post number {i}", status=200)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            store.sync()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    store.close()
    return {"puts_per_s": SYNCED_PAGES / wall, "cpu_us_per_put": cpu / SYNCED_PAGES * 1e6}


def _child_real(root: Path) -> dict[str, Any]:
    from crawlstream.store import ContentStore, StoreConfig

    pages = _real_pages()
    store = ContentStore(root, config=StoreConfig(fsync="never"))
    n = 0
    t, c = time.perf_counter(), time.process_time()
    for copy in range(REAL_COPIES):
        for i, (url, body) in enumerate(pages):
            sep = "&" if "?" in url else "?"
            store.put(f"{url}{sep}copy={copy}-{i}", body + b"<!-- %d -->" % copy, content_type="text/html", status=200)
            n += 1
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    store.close()
    return {"puts_per_s": n / wall, "cpu_us_per_put": cpu / n * 1e6, "pages": n}


def _real_pages() -> list[tuple[str, bytes]]:
    sys.path.insert(0, str(REPO))
    from bench._harness import shared_data

    base = shared_data() / "html"
    with open(base / "manifest.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [(row["url"] or f"https://no-url.example.com/{i}", gzip.decompress((base / row["file"]).read_bytes()))
            for i, row in enumerate(rows)]


def _quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return xs[len(xs) // 2] * 1e3, xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e3


def _child_archived(root: Path) -> dict[str, Any]:
    from crawlstream.store import ContentStore, StoreConfig

    config = StoreConfig(fsync="never", archive_level=19)
    pages = _real_pages()
    with ContentStore(root, config=config) as store:
        for url, body in pages:
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        t = time.perf_counter()
        store.maintain(ages_zero=True)
        maintain_s = time.perf_counter() - t
    index_bytes = sum(p.stat().st_size for p in root.iterdir() if p.name.startswith(("index", "ops.log")))
    out: dict[str, Any] = {"maintain_s": maintain_s, "index_bytes_per_page": index_bytes / len(pages)}
    with ContentStore(root, config=config) as store:
        urls = [e.url for e in store.search()]
        random.Random(7).shuffle(urls)
        for name, call in (("entry", store.entry), ("get", store.get)):
            for url in urls:  # warm
                call(url)
            samples = []
            for url in urls:
                t = time.perf_counter()
                call(url)
                samples.append(time.perf_counter() - t)
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = _quantiles(samples)
    return out


def _child_open(root: Path, pages: int) -> dict[str, Any]:
    import resource

    from crawlstream.store import ContentStore

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    store = ContentStore(root)
    open_s = time.perf_counter() - t
    rss_open_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    urls = [_small_url(i) for i in random.Random(7).sample(range(pages), READS)]
    for url in urls:  # warm: segment files and index pages in the caches
        store.get(url)
    samples, cpu = [], []
    for url in urls:
        t, c = time.perf_counter(), time.thread_time()
        store.get(url)
        samples.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    store.close()
    samples.sort()
    cpu.sort()

    def q(xs: list[float], p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))] * 1e3

    return {
        "open_s": open_s,
        "rss_growth_at_open_mb": rss_open_mb,
        "get_p50_ms": q(samples, 0.5),
        "get_p99_ms": q(samples, 0.99),
        "get_cpu_p50_ms": q(cpu, 0.5),
        "get_cpu_p99_ms": q(cpu, 0.99),
    }


def _child_heap(root: Path) -> dict[str, Any]:
    import gc
    import tracemalloc

    from crawlstream.store import ContentStore, StoreConfig

    store = ContentStore(root, config=StoreConfig(fsync="never"))
    tracemalloc.start()
    for i in range(1_000):
        store.put(_small_url(i), _small_body(i), content_type="text/html", title=f"Post number {i}", status=200)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(1_000, 7_000):
        store.put(_small_url(i), _small_body(i), content_type="text/html", title=f"Post number {i}", status=200)
    gc.collect()
    per_page = (tracemalloc.get_traced_memory()[0] - before) / 6_000
    tracemalloc.stop()
    store.close()
    return {"heap_bytes_per_page": per_page}


def _child(argv: list[str]) -> None:
    kind, root = argv[0], Path(argv[1])
    if kind == "build":
        out = _child_build(root, int(argv[2]))
    elif kind == "real":
        out = _child_real(root)
    elif kind == "synced":
        out = _child_synced(root)
    elif kind == "open":
        out = _child_open(root, int(argv[2]))
    elif kind == "archived":
        out = _child_archived(root)
    else:
        out = _child_heap(root)
    sys.stdout.write(json.dumps(out))


# ------------------------------------------------------------------ parent


def _run_child(build: Path, *args: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=f"{build / 'libs'}{os.pathsep}{build}")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        env=env,
        cwd=build,
        capture_output=True,
        text=True,
        timeout=7200,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{build}: child {args} failed: {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout))


def _median(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}


def measure(builds: dict[str, Path], pages: int, reps: int) -> dict[str, Any]:
    """Every measurement of each build in ``builds``, alternating builds; medians per build."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in builds}
    with tempfile.TemporaryDirectory(prefix="bench-store-index-") as tmp:
        for name, build in builds.items():  # the store the open and get runs read: built once per build
            runs[name]["puts_small"] = [_run_child(build, "build", f"{tmp}/{name}-store", str(pages))]
        for rep in range(reps):
            for name, build in builds.items():
                runs[name].setdefault("open_and_get", []).append(
                    _run_child(build, "open", f"{tmp}/{name}-store", str(pages))
                )
                runs[name].setdefault("heap", []).append(_run_child(build, "heap", f"{tmp}/{name}-heap-{rep}"))
                runs[name].setdefault("archived", []).append(
                    _run_child(build, "archived", f"{tmp}/{name}-archived-{rep}")
                )
                runs[name].setdefault("puts_real", []).append(_run_child(build, "real", f"{tmp}/{name}-real-{rep}"))
                runs[name].setdefault("puts_synced", []).append(
                    _run_child(build, "synced", f"{tmp}/{name}-synced-{rep}")
                )
                if rep:  # more samples of the small puts, on stores of their own
                    runs[name]["puts_small"].append(
                        _run_child(build, "build", f"{tmp}/{name}-small-{rep}", str(min(pages, 50_000)))
                    )
    return {name: {kind: _median(rs) for kind, rs in kinds.items()} for name, kinds in runs.items()}


def _ratios(result: dict[str, Any]) -> dict[str, float]:
    before, after = result["before"], result["after"]
    out = {}
    for kind, values in after.items():
        for key, value in values.items():
            base = before[kind][key]
            if base:
                out[f"{kind}.{key}"] = round(value / base, 3)
    return out


def run(quick: bool, before: Path | None = None) -> dict[str, Any]:
    pages = QUICK_BUILD_PAGES if quick else BUILD_PAGES
    builds = {"after": REPO} if before is None else {"before": before, "after": REPO}
    result: dict[str, Any] = {"pages": pages, "reps": 1 if quick else REPS}
    result.update(measure(builds, pages, 1 if quick else REPS))
    if before is not None:
        result["before_build"] = str(before)
        result["after_over_before"] = _ratios(result)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
    else:
        from bench._harness import machine

        args = sys.argv[1:]
        before_path = Path(args[args.index("--before") + 1]) if "--before" in args else None
        doc = {"machine": machine(), **run("--quick" in args, before_path)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
