"""Object storage benchmark (issue 26): the same lake + index on local disk and on a real S3
server (versitygw on loopback), measured in one run.

Per location: ``crawlstream ingest`` rows/s and ``crawlstream index build`` seconds (CLI
processes, as users run them); ``/v1/domain`` (``datasets_for_domain``) and first-page
(``urls(d, ds, 0, 100)``) latency warm (one reader, caches filled) and cold (a new process, a new
reader per query: empty caches; local files evicted from the page cache); per cold query on S3,
the requests the server logged (GET/HEAD) and the bytes the process read (``/proc/self/io``
``rchar``: socket and file reads); and the archive tier: p50/p99 of reading archived pages
from S3 beside the same pages archived on local disk.

Goals (issue 26): warm p99 within 1.5x of local disk; cold first page p99 <= 100 ms; at most 3
GETs for a cold ``/v1/domain`` once the version is open.

``python -m bench s3`` (quick: ~200k generated URLs in 6 datasets); ``--full``: 2M.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import REPO, latency_ms, main
from bench.bench_index import generate

N_QUERIES_WARM = 2000
N_QUERIES_COLD = 60


def _env(base: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "libs"), str(REPO)]), **base}


def _cli(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "crawlstream", *args], env=env, check=True, capture_output=True,
                   timeout=3600)
    return time.perf_counter() - started


def _settings(env: dict[str, str]) -> Any:
    from crawlstream.settings import load

    return load(env)


def _queries(settings: Any, rnd: random.Random, n: int) -> list[tuple[str, int]]:
    from crawlstream.index import IndexReader

    reader = IndexReader.from_settings(settings)
    out: list[tuple[str, int]] = []
    with reader.pin() as idx:
        for i in rnd.sample(range(idx.domain_count()), min(n, idx.domain_count())):
            d = idx.domain_at(i)
            found = idx.datasets_for_domain(d)
            if found:
                out.append((d, found[0].dataset_id))
    reader.close()
    return out


def _warm(settings: Any, queries: list[tuple[str, int]]) -> dict[str, Any]:
    from crawlstream.index import IndexReader

    reader = IndexReader.from_settings(settings)
    with reader.pin() as idx:  # fill the caches once
        for d, ds in queries:
            idx.datasets_for_domain(d)
            idx.urls(d, ds, 0, 100)
    res: dict[str, list[float]] = {"domain": [], "first_page_100": []}
    for d, ds in queries:
        with reader.pin() as idx:
            t = time.perf_counter()
            idx.datasets_for_domain(d)
            res["domain"].append(time.perf_counter() - t)
            t = time.perf_counter()
            idx.urls(d, ds, 0, 100)
            res["first_page_100"].append(time.perf_counter() - t)
    reader.close()
    return {k: latency_ms(v) for k, v in res.items()}


_COLD_SCRIPT = r"""
import json, os, sys, time
from pathlib import Path
from bench._harness import drop_page_cache
from crawlstream.index import IndexReader
from crawlstream.settings import load
settings = load(os.environ)
queries = json.loads(sys.argv[1]); log = Path(sys.argv[2]) if sys.argv[2] else None
local = None if settings.lake.uri.startswith("s3://") else settings.data_dir
files = [p for p in local.rglob("*") if p.is_file()] if local else []
def rchar():
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
def requests():
    if log is None:
        return {}
    counts = {}
    for line in log.read_text(errors="replace").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) > 5 and parts[1] == "vgw":
            counts[parts[5]] = counts.get(parts[5], 0) + 1
    return counts
def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in b if b.get(k, 0) != a.get(k, 0)}
out = {"open": [], "domain": [], "first_page_100": [], "requests_open": [], "requests_domain": [],
       "requests_first_page": [], "bytes_domain": [], "bytes_first_page": []}
for d, ds in queries:
    drop_page_cache(files)
    r0 = requests(); t = time.perf_counter(); reader = IndexReader.from_settings(settings); p = reader.pin()
    out["open"].append(time.perf_counter() - t); r1 = requests(); out["requests_open"].append(delta(r0, r1))
    b = rchar(); t = time.perf_counter(); p.datasets_for_domain(d); out["domain"].append(time.perf_counter() - t)
    out["bytes_domain"].append(rchar() - b); r2 = requests(); out["requests_domain"].append(delta(r1, r2))
    b = rchar(); t = time.perf_counter(); p.urls(d, ds, 0, 100); out["first_page_100"].append(time.perf_counter() - t)
    out["bytes_first_page"].append(rchar() - b); out["requests_first_page"].append(delta(r2, requests()))
    p.release(); reader.close()
print(json.dumps(out))
"""


def _cold(env: dict[str, str], queries: list[tuple[str, int]], log: Path | None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _COLD_SCRIPT, json.dumps(queries), str(log or "")],
                          capture_output=True, text=True, env=_env(env), timeout=1800, check=True)
    raw = json.loads(proc.stdout)
    res: dict[str, Any] = {k: latency_ms(raw[k]) for k in ("open", "domain", "first_page_100")}
    for k in ("bytes_domain", "bytes_first_page"):
        xs = sorted(raw[k])
        res[k] = {"p50": xs[len(xs) // 2], "max": xs[-1]}
    for k in ("requests_open", "requests_domain", "requests_first_page"):
        kinds = sorted({kind for r in raw[k] for kind in r})
        res[k] = {kind: {"p50": sorted(r.get(kind, 0) for r in raw[k])[len(raw[k]) // 2],
                         "max": max(r.get(kind, 0) for r in raw[k])} for kind in kinds}
    return res


def _lake_and_index(work: Path, inputs: list[Path], env: dict[str, str], rows: int) -> dict[str, Any]:
    ingest_s = 0.0
    for ds, path in enumerate(inputs, start=1):
        ingest_s += _cli(["ingest", str(path), "--dataset-id", str(ds), "--no-rejects"], env)
    build_s = _cli(["index", "build"], env)
    return {"ingest_s": round(ingest_s, 2), "ingest_rows_per_s": round(rows / ingest_s),
            "build_s": round(build_s, 2)}


def _archive(work: Path, s3_env: dict[str, str]) -> dict[str, Any]:
    """Archived page reads: the real pages of bench_store (../shared/data) archived to S3 and to
    local disk, then read back at random (wall time: on S3 a read is one ranged GET)."""
    import dataclasses

    from bench.bench_store import _load
    from crawlstream.store import open_store

    pages = [(url, body) for url, _, body in _load(False)]
    out: dict[str, Any] = {"pages": len(pages)}
    for name, extra in (("local", {}), ("s3", {"CRAWLSTREAM_STORE_ARCHIVE_URI": "s3://crawlstream/bench-archive"})):
        settings = _settings({**s3_env, "CRAWLSTREAM_DATA_DIR": str(work / f"store-{name}"), **extra})
        settings = dataclasses.replace(settings, store=dataclasses.replace(
            settings.store, warm_after_s=0.0, cold_after_s=0.0, archive_after_s=0.0))
        with open_store(settings) as store:
            for url, body in pages:
                store.put(url, body, fetched_at_ms=0)
            t = time.perf_counter()
            store.recompress(0.0, tier="archive", now_ms=1)
            out[f"{name}_archive_s"] = round(time.perf_counter() - t, 2)
        with open_store(settings) as store:
            rnd = random.Random(3)
            samples = []
            for url, body in rnd.choices(pages, k=2000):
                t = time.perf_counter()
                got = store.get(url)
                samples.append(time.perf_counter() - t)
                assert got == body, url
            out[f"{name}_read"] = latency_ms(samples)
    out["read_p99_s3_over_local"] = round(out["s3_read"]["p99_ms"] / max(out["local_read"]["p99_ms"], 1e-6), 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    from crawlstream.devtools.locals3 import LocalS3

    full = not quick and (os.environ.get("CRAWLSTREAM_BENCH_S3_FULL") == "1" or "--full" in sys.argv)
    n_urls = 2_000_000 if full else 200_000
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp, LocalS3(access_log=True) as s3:
        work = Path(tmp)
        paths, _, _ = generate(work, n_urls, big_rows=0)
        inputs = paths[:6]
        rows = sum(len(__import__("zstandard").ZstdDecompressor().decompress(p.read_bytes()).splitlines())
                   for p in inputs)
        envs = {
            "local": {"CRAWLSTREAM_DATA_DIR": str(work / "local")},
            "s3": {**s3.env, "CRAWLSTREAM_DATA_DIR": str(work / "s3data"),
                   "CRAWLSTREAM_LAKE_URI": "s3://crawlstream/bench-lake"},
        }
        result: dict[str, Any] = {"urls": rows, "datasets": len(inputs)}
        for name, env in envs.items():
            result[name] = _lake_and_index(work, inputs, _env(env), rows)
        queries = _queries(_settings(envs["local"]), random.Random(7), N_QUERIES_WARM)
        for name, env in envs.items():
            result[name]["warm"] = _warm(_settings(env), queries)
            result[name]["cold"] = _cold(env, queries[:N_QUERIES_COLD], s3.log_file if name == "s3" else None)
        lw, sw = result["local"]["warm"], result["s3"]["warm"]
        result["ratios_s3_over_local"] = {
            f"warm_{k}_p99": round(sw[k]["p99_ms"] / max(lw[k]["p99_ms"], 1e-6), 2) for k in lw
        }
        result["archive"] = _archive(work, s3.env)
        return result


if __name__ == "__main__":
    main(run)
