"""Query API under load: requests/s and latency p50/p95/p99 over HTTP on 127.0.0.1.

The lake is generated and ingested with bench_index's generator (Zipf domains over 30
datasets plus one big domain), the index built, then ``crawlstream serve`` runs in its own
process while this process loads it with an aiohttp client (N concurrent connections,
bounded by time and count). Scenarios: ``/v1/domain/{d}`` (Zipf-picked domains), the first
page of URLs of a (domain, dataset), and a deep page (offset ``deep_offset`` in the big
domain). Each runs at concurrency 1 (latency) and N (throughput), and reports the server
process's CPU time per request next to the client's latencies. The server runs twice: as
shipped (``executor_threads=4``: ``/v1/domain`` and pages whose row groups are cached on the
loop, Parquet reads on a thread pool) and everything on the event loop (``0``), the baseline
for that decision, measured in the same run.

Cold: a fresh server process per scenario (started, then one request for an unknown domain so
the PSL is loaded and the version opened); before each measured request the page cache of every
lake and index file is dropped (``posix_fadvise(DONTNEED)``) and the request names a domain /
page the process has not served yet, so it reads and decodes from disk.

Quick mode (``--quick``): ~210k URLs, ~1 minute. Full: bench_index's full corpus (10M
generated URLs over 30 datasets + a 1.2M-URL domain, offset 1,000,000); set
``CRAWLSTREAM_BENCH_API_LAKE=<data dir>`` to serve a lake bench_index kept
(``CRAWLSTREAM_BENCH_KEEP=1``) instead of generating and ingesting it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench._harness import REPO, drop_page_cache, latency_ms, main
from bench.bench_index import N_DATASETS
from crawlstream.devtools.localproc import free_port

CONCURRENCY = 16


def _start_server(root: Path, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "CRAWLSTREAM_DATA_DIR": str(root),
        "CRAWLSTREAM_API_HOST": "127.0.0.1",
        "CRAWLSTREAM_API_PORT": str(port),
        "CRAWLSTREAM_API_EXECUTOR_THREADS": str(threads),
        "CRAWLSTREAM_LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join([str(REPO / "libs"), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen([sys.executable, "-m", "crawlstream", "serve"], env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"crawlstream serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.1)
    _stop(proc)
    raise RuntimeError("crawlstream serve did not become healthy within 30 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


async def _load(base: str, paths: list[str], concurrency: int, seconds: float, max_requests: int) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    statuses: dict[int, int] = {}
    next_i = 0
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_i
        while time.perf_counter() < deadline and next_i < max_requests:
            path = paths[next_i % len(paths)]
            next_i += 1
            t = time.perf_counter()
            async with session.get(base + path) as resp:
                await resp.read()
                latencies.append(time.perf_counter() - t)
                statuses[resp.status] = statuses.get(resp.status, 0) + 1

    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "statuses": statuses,
        **latency_ms(latencies),
    }


async def _pick(base: str, domains: list[str], weights: list[float], n: int) -> list[tuple[str, int, int]]:
    """(domain, dataset, url_count) pairs that exist, Zipf-picked; also warms the server."""
    import aiohttp

    rnd = random.Random(5)
    out: list[tuple[str, int, int]] = []
    async with aiohttp.ClientSession() as session:
        for d in rnd.choices(domains, weights=weights, k=n * 3):
            async with session.get(f"{base}/v1/domain/{d}") as resp:
                if resp.status != 200:
                    continue
                body = await resp.json()
            ds = rnd.choice(body["datasets"])
            out.append((body["domain"], ds["dataset_id"], ds["url_count"]))
            if len(out) >= n:
                break
    return out


def _drop_page_cache(root: Path) -> None:
    drop_page_cache(p for p in root.rglob("*") if p.is_file() and p.suffix in (".parquet", ".bin", ".roar", ".zst"))


def _cold(root: Path, scenarios: dict[str, list[str]], n: int) -> dict[str, Any]:
    """Per scenario: a fresh server; each request after dropping the page cache, on paths the
    process has not served (first occurrence of each)."""
    import urllib.error
    import urllib.request

    out: dict[str, Any] = {}
    for name, paths in scenarios.items():
        proc, base = _start_server(root, 4)
        try:
            # one unknown domain first: loads the PSL and opens the index version (process start-up,
            # measured as bench_index's "open"), but decodes no postings and reads no lake file
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(base + "/v1/domain/cold-start.invalid", timeout=30).close()
            samples = []
            for path in list(dict.fromkeys(paths))[:n]:
                _drop_page_cache(root)
                t = time.perf_counter()
                with urllib.request.urlopen(base + path, timeout=30) as resp:
                    resp.read()
                samples.append(time.perf_counter() - t)
            out[name] = latency_ms(samples)
        finally:
            _stop(proc)
    return out


def _scenarios(pairs: list[tuple[str, int, int]], deep: tuple[str, int, int]) -> dict[str, list[str]]:
    domain, dataset, offset = deep
    return {
        "domain": [f"/v1/domain/{d}" for d, _, _ in pairs],
        "first_page": [f"/v1/domain/{d}/datasets/{ds}/urls?limit=100" for d, ds, _ in pairs],
        "deep_page": [
            f"/v1/domain/{domain}/datasets/{dataset}/urls?offset={offset + 137 * i}&limit=100" for i in range(64)
        ],
        # distinct row groups past the deep offset (16,411 rows apart: more than lake.row_group_rows), for cold reads
        "deep_page_spread": [
            f"/v1/domain/{domain}/datasets/{dataset}/urls?offset={offset + 16_411 * i}&limit=100" for i in range(12)
        ],
    }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load_with_cpu(
    proc: subprocess.Popen[bytes], base: str, paths: list[str], concurrency: int, seconds: float, cap: int
) -> dict[str, Any]:
    """:func:`_load` plus the server's CPU time per request over the run."""
    cpu = _cpu_s(proc.pid)
    r = asyncio.run(_load(base, paths, concurrency, seconds, cap))
    r["server_cpu_ms_per_request"] = round((_cpu_s(proc.pid) - cpu) * 1000 / max(r["requests"], 1), 3)
    return r


def _measure(
    root: Path, domains: list[str], weights: list[float], deep: tuple[str, int, int], seconds: float
) -> dict[str, Any]:
    """Both servers up at once; runs alternate between them so machine-load drift (2 shared
    cores) hits both alike; each cell keeps the faster of two rounds. Warm = every path of the
    scenario requested once before the measured rounds. ``first_page_miss``: the first page
    of 300 other pairs, each requested once (the server reads its row groups: page cache warm,
    the process's row-group cache not)."""
    modes = {"as_shipped": 4, "event_loop": 0}
    procs = {name: _start_server(root, threads) for name, threads in modes.items()}
    try:
        picked = asyncio.run(_pick(procs["as_shipped"][1], domains, weights, 900))
        pairs = picked[:300]
        fresh = [p for p in dict.fromkeys(picked[300:]) if p not in set(pairs)][:300]
        out: dict[str, Any] = {name: {"executor_threads": t, "pairs": len(pairs)} for name, t in modes.items()}
        scenarios = _scenarios(pairs, deep)
        spread = scenarios.pop("deep_page_spread")
        for scenario, paths in scenarios.items():
            for name in modes:
                asyncio.run(_load(procs[name][1], paths, 4, 30.0, len(paths)))  # warm: every path once
                out[name][scenario] = {}
            for concurrency, cap in ((1, 5000), (CONCURRENCY, 20000)):
                best: dict[str, dict[str, Any]] = {}
                for _round in range(2):
                    for name in modes:
                        r = _load_with_cpu(*procs[name], paths, concurrency, seconds, cap)
                        if name not in best or r["requests_per_s"] > best[name]["requests_per_s"]:
                            best[name] = r
                for name in modes:
                    out[name][scenario][f"c{concurrency}"] = best[name]
        miss = _scenarios(fresh, deep)["first_page"]
        for name in modes:
            out[name]["first_page_miss"] = {"c1": _load_with_cpu(*procs[name], miss, 1, 60.0, len(miss))}
    finally:
        for proc, _ in procs.values():
            _stop(proc)
    out["cold"] = _cold(
        root, {"domain": scenarios["domain"], "first_page": scenarios["first_page"], "deep_page": spread}, 30
    )
    return out


def run(quick: bool) -> dict[str, Any]:
    from bench.bench_index import generate, zipf_domains

    full = not quick and "--full" in sys.argv
    n_urls = 10_000_000 if full else 150_000
    big_rows = 1_200_000 if full else 60_000
    deep_offset = 1_000_000 if full else 50_000
    seconds = 5.0 if full else 1.5
    base_dir = Path(os.environ.get("CRAWLSTREAM_BENCH_DIR", tempfile.gettempdir()))
    work = Path(tempfile.mkdtemp(prefix="bench-api-", dir=base_dir))
    root = work / "data"
    kept = os.environ.get("CRAWLSTREAM_BENCH_API_LAKE")
    result: dict[str, Any] = {"mode": "full" if full else "quick", "concurrency": CONCURRENCY}
    try:
        from crawlstream.index import IndexBuilder, IndexReader
        from crawlstream.ingest import ingest_files
        from crawlstream.lake import LakeWriter
        from crawlstream.settings import IndexSettings

        t = time.perf_counter()
        if kept:
            root = Path(kept)
            domains, weights = zipf_domains(n_urls, random.Random(11))  # generate()'s draws, seed 11
            with IndexReader(root).pin() as idx:
                n_domains, rows = idx.domain_count(), None
        else:
            inputs, domains, weights = generate(work, n_urls, big_rows)
            rows = 0
            for ds, path in enumerate(inputs, 1):
                rows += ingest_files([path], ds, LakeWriter(root), keep_extras=False).valid
            n_domains = IndexBuilder(root, index=IndexSettings(postings_shards=64)).build(full=True).domains
        result["corpus"] = {
            "urls": rows,
            "lake": "kept from bench_index" if kept else "generated",
            "datasets": N_DATASETS,
            "domains": n_domains,
            "deep": {"domain": "bigdomain.com", "dataset_id": 1, "offset": deep_offset, "rows": big_rows},
            "prepare_s": round(time.perf_counter() - t, 1),
        }
        deep = ("bigdomain.com", 1, deep_offset)
        measured = _measure(root, domains, weights, deep, seconds)
        pooled, inline = measured["as_shipped"], measured["event_loop"]
        result.update(measured)
        key = f"c{CONCURRENCY}"
        result["ratio_as_shipped_vs_event_loop_rps"] = {
            name: round(pooled[name][key]["requests_per_s"] / max(inline[name][key]["requests_per_s"], 1e-9), 2)
            for name in ("domain", "first_page", "deep_page")
        }
    finally:
        if os.environ.get("CRAWLSTREAM_BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main(run)
