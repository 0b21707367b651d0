"""Query API under sustained load (issue 16): 60 s at 16 connections on 127.0.0.1, 0 errors.

The corpus and server are bench_api's (``crawlstream serve`` in its own process, as shipped,
the default loopback set-up: anonymous reads). The load mixes the read routes as a client
would: ``/v1/domain/{d}`` (Zipf-picked), first pages of (domain, dataset) pairs, deep pages
of the big domain and ``/v1/url`` lookups. Any status but 200, and any connection error or
timeout, counts as an error. The baseline, measured in the same run, is the run's own first
10 s: the last 10 s's p99 and requests/s are reported as ratios to it (a server that leaks,
fragments or queues up under sustained load shows a ratio well above 1).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import latency_ms, main
from bench.bench_api import CONCURRENCY, _cpu_s, _pick, _scenarios, _start_server, _stop

DURATION_S = 60.0
WINDOW_S = 10.0
REQUEST_TIMEOUT_S = 10.0


async def _sustained(base: str, paths: list[str], concurrency: int, seconds: float) -> dict[str, Any]:
    import aiohttp

    samples: list[tuple[float, float]] = []  # (start offset s, latency s) of each 200
    errors: dict[str, int] = {}
    next_i = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_i
        while time.perf_counter() < deadline:
            path = paths[next_i % len(paths)]
            next_i += 1
            t = time.perf_counter()
            try:
                async with session.get(base + path) as resp:
                    await resp.read()
                    if resp.status == 200:
                        samples.append((t - started, time.perf_counter() - t))
                    else:
                        errors[str(resp.status)] = errors.get(str(resp.status), 0) + 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    first = [lat for at, lat in samples if at < WINDOW_S]
    last = [lat for at, lat in samples if at >= seconds - WINDOW_S]
    out: dict[str, Any] = {
        "seconds": round(elapsed, 1),
        "concurrency": concurrency,
        "requests": len(samples) + sum(errors.values()),
        "errors": sum(errors.values()),
        "errors_by_kind": errors,
        "requests_per_s": round(len(samples) / elapsed, 1),
        **latency_ms([lat for _, lat in samples]),
        "first_10s": {"requests_per_s": round(len(first) / WINDOW_S, 1), **latency_ms(first)},
        "last_10s": {"requests_per_s": round(len(last) / WINDOW_S, 1), **latency_ms(last)},
    }
    if first and last:
        out["ratio_last_vs_first_10s"] = {
            "p99": round(out["last_10s"]["p99_ms"] / max(out["first_10s"]["p99_ms"], 1e-9), 2),
            "requests_per_s": round(len(last) / max(len(first), 1), 2),
        }
    return out


def run(quick: bool) -> dict[str, Any]:
    from bench.bench_index import generate
    from crawlstream.index import IndexBuilder
    from crawlstream.ingest import ingest_files
    from crawlstream.lake import LakeWriter
    from crawlstream.settings import IndexSettings

    n_urls, big_rows, deep_offset = (150_000, 60_000, 50_000)
    work = Path(tempfile.mkdtemp(prefix="bench-api-load-", dir=os.environ.get("CRAWLSTREAM_BENCH_DIR")))
    root = work / "data"
    result: dict[str, Any] = {"duration_s": DURATION_S, "concurrency": CONCURRENCY}
    try:
        t = time.perf_counter()
        inputs, domains, weights = generate(work, n_urls, big_rows)
        rows = sum(
            ingest_files([path], ds, LakeWriter(root), keep_extras=False).valid for ds, path in enumerate(inputs, 1)
        )
        IndexBuilder(root, index=IndexSettings(postings_shards=64)).build(full=True)
        result["corpus"] = {"urls": rows, "prepare_s": round(time.perf_counter() - t, 1)}
        proc, base = _start_server(root, 4)
        try:
            pairs = asyncio.run(_pick(base, domains, weights, 300))
            scenarios = _scenarios(pairs, ("bigdomain.com", 1, deep_offset))
            lookups = [f"/v1/url?url=http://www.{d}/" for d, _, _ in pairs]
            paths = [*scenarios["domain"], *scenarios["first_page"], *scenarios["deep_page"], *lookups]
            random.Random(3).shuffle(paths)
            cpu = _cpu_s(proc.pid)
            load = asyncio.run(_sustained(base, paths, CONCURRENCY, DURATION_S))
            load["server_cpu_ms_per_request"] = round((_cpu_s(proc.pid) - cpu) * 1000 / max(load["requests"], 1), 3)
            load["paths"] = {"distinct": len(set(paths)), "routes": ["domain", "first_page", "deep_page", "url"]}
            result["sustained"] = load
            result["server_alive"] = proc.poll() is None
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main(run)
    sys.exit(0)
