"""A shard's url-index page cache: what SQLite's cache buys a shard the size a crawl's are, and what
it costs a member in memory (ADR 034 "Session 27").

``python -m bench shard_cache [--quick]``: for each cache size of ``CACHES`` (the old per-shard
share, 512 KiB, and the new one, 64 KiB), children alternating, ``REPS`` times, a fresh child
process builds one shard of ``SHARD_PAGES`` small pages over ``DOMAINS`` domains (a 2-hour soak's
shards held ~7,000 pages each), then measures at that size, as the bucket compressor works:

* ``put``: CPU per put of ``MEASURED_PUTS`` more pages, ``sync()`` every ``SYNC_EVERY`` (the
  end of a batch), ``fsync="never"`` (the disk is not what is compared);
* ``entry`` and ``get``: p50/p95/p99 (``latency_ms``) of ``READS`` lookups of random stored
  URLs, and of full reads;
* ``rss_mb_per_open_shard``: then ``OPEN_SHARDS`` copies of that shard are opened at once, as a
  member holds its 64, and looked up at random (``LOOKUP_ROUNDS`` rounds of ``READS`` each): the
  RSS they add, per shard, once it stops growing. Times 64 is what a member's caches hold warm;
  a member that closes its shards (a rebalance, an outage) frees it and fills it again, the
  sawtooth of the bucket compressors' RSS in the soak (ADR 034 "Session 27").

The page data sits in the OS page cache either way (a shard's index is a few MB): what SQLite's
cache saves is the copy from it. Ratios new/old are what to read; a loaded machine moves both.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench._harness import latency_ms
from bench._harness import main as harness_main
from bench.bench_store_index import _small_body

REPO = Path(__file__).resolve().parents[1]
CACHES = (512 * 1024, 64 * 1024)
SHARD_PAGES = 7_000
QUICK_SHARD_PAGES = 2_000
MEASURED_PUTS = 2_000
SYNC_EVERY = 100
READS = 2_000
DOMAINS = 60
REPS = 3
OPEN_SHARDS = 32
LOOKUP_ROUNDS = 10


def _url(i: int) -> str:
    return f"http://www.site{i % DOMAINS}.example/blog/{i * 7919 % 100_003}/post-{i}.html"


def _child(root: Path, cache_bytes: int, pages: int) -> dict[str, Any]:
    from crawlstream.store import ContentStore, StoreConfig

    store = ContentStore(root, config=StoreConfig(fsync="never", index_cache_bytes=cache_bytes))
    for i in range(pages):
        store.put(_url(i), _small_body(i), content_type="text/html", title=f"Post {i}", status=200)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            store.sync()
    c = time.process_time()
    for i in range(pages, pages + MEASURED_PUTS):
        store.put(_url(i), _small_body(i), content_type="text/html", title=f"Post {i}", status=200)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            store.sync()
    put_cpu = time.process_time() - c
    urls = [_url(i) for i in random.Random(7).sample(range(pages + MEASURED_PUTS), READS)]
    entry_s, get_s = [], []
    for url in urls:
        t = time.perf_counter()
        store.entry(url)
        entry_s.append(time.perf_counter() - t)
    for url in urls:
        t = time.perf_counter()
        store.get(url)
        get_s.append(time.perf_counter() - t)
    store.close()
    return {
        "cpu_us_per_put": put_cpu / MEASURED_PUTS * 1e6,
        **{f"entry_{key}": value for key, value in latency_ms(entry_s).items() if key != "n"},
        **{f"get_{key}": value for key, value in latency_ms(get_s).items() if key != "n"},
        "rss_mb_per_open_shard": _rss_per_open_shard(root, cache_bytes, urls),
    }


def _rss_per_open_shard(root: Path, cache_bytes: int, urls: list[str]) -> float:
    from crawlstream.store import ContentStore, StoreConfig

    copies = [root.with_name(f"{root.name}-{n}") for n in range(OPEN_SHARDS)]
    for copy in copies:
        shutil.copytree(root, copy)
    process = psutil.Process()
    rss_open = process.memory_info().rss
    stores = [ContentStore(copy, config=StoreConfig(fsync="never", index_cache_bytes=cache_bytes)) for copy in copies]
    rng = random.Random(11)
    for _ in range(LOOKUP_ROUNDS):
        for url in urls:
            rng.choice(stores).entry(url)
    growth = process.memory_info().rss - rss_open
    for store in stores:
        store.close()
    return growth / OPEN_SHARDS / 1e6


def _run_child(cache_bytes: int, pages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-shard-cache-") as tmp:
        env = dict(os.environ, PYTHONPATH=str(REPO / "libs"))
        shard = str(Path(tmp) / "shard")
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_shard_cache", "--child", shard, str(cache_bytes), str(pages)],
            cwd=REPO, env=env, check=True, capture_output=True, text=True,
        )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(quick: bool = False) -> dict[str, Any]:
    pages = QUICK_SHARD_PAGES if quick else SHARD_PAGES
    reps = 1 if quick else REPS
    runs: dict[int, list[dict[str, Any]]] = {cache: [] for cache in CACHES}
    for rep in range(reps):
        for cache in CACHES if rep % 2 == 0 else tuple(reversed(CACHES)):
            runs[cache].append(_run_child(cache, pages))
            print(f"  rep {rep + 1}/{reps} cache {cache // 1024} KiB: {runs[cache][-1]}", file=sys.stderr)
    medians = {
        f"{cache // 1024}_kib": {key: statistics.median(r[key] for r in results) for key in results[0]}
        for cache, results in runs.items()
    }
    old, new = (medians[f"{cache // 1024}_kib"] for cache in CACHES)
    return {
        "shard_pages": pages,
        "measured_puts": MEASURED_PUTS,
        "reads": READS,
        "open_shards": OPEN_SHARDS,
        "reps": reps,
        "medians": medians,
        "new_over_old": {key: new[key] / old[key] if old[key] else None for key in old},
        "runs": {f"{cache // 1024}_kib": results for cache, results in runs.items()},
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(_child(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
    else:
        harness_main(run)
