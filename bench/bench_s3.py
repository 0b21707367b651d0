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

``python -m bench s3``: 1M generated URLs of which 6 datasets (~200k rows) are ingested, and the
957 real pages of bench_store archived; ``--quick``: 250 of those pages; ``--full``
(``CRAWLSTREAM_BENCH_S3_FULL=1``): 10M generated, ~2M rows.
"""

from __future__ import annotations

import contextlib
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


class _CountingRelay:
    """A TCP relay in front of the S3 server counting the bytes it sends back: what a query reads
    from S3 (pyarrow's HTTP client reads its sockets with ``recv``, which ``/proc/self/io`` does not
    count). Used for the byte counts only: latencies are measured without it."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self._target = target_port
        self._lock = threading.Lock()
        self.received = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            client, _ = self._server.accept()
            upstream = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: Any, dst: Any, count: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if count:
                    with self._lock:
                        self.received += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()


def _server_requests(log: Path | None) -> dict[str, int]:
    """Requests the S3 server logged so far, by method (versitygw's access log)."""
    counts: dict[str, int] = {}
    if log is None:
        return counts
    for line in log.read_text(errors="replace").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) > 5 and parts[1] == "vgw":
            counts[parts[5]] = counts.get(parts[5], 0) + 1
    return counts


def _delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in b if b.get(k, 0) != a.get(k, 0)}


def cold_child(queries_json: str, log_arg: str) -> None:
    """In a fresh process: per query a new reader (empty caches; local files evicted from the page
    cache), timing the version open, ``/v1/domain`` and the first page, with the S3 requests each
    made; then, on S3, the same queries again through a counting relay for the bytes read."""
    import dataclasses

    from bench._harness import drop_page_cache
    from crawlstream.index import IndexReader
    from crawlstream.settings import load

    settings = load(os.environ)
    queries = json.loads(queries_json)
    log = Path(log_arg) if log_arg else None
    files = [] if log else [p for p in settings.data_dir.rglob("*") if p.is_file()]
    out: dict[str, list[Any]] = {k: [] for k in ("open", "domain", "first_page_100", "requests_open",
                                                  "requests_domain", "requests_first_page")}
    for d, ds in queries:
        drop_page_cache(files)
        r0 = _server_requests(log)
        t = time.perf_counter()
        reader = IndexReader.from_settings(settings)
        pin = reader.pin()
        out["open"].append(time.perf_counter() - t)
        r1 = _server_requests(log)
        t = time.perf_counter()
        pin.datasets_for_domain(d)
        out["domain"].append(time.perf_counter() - t)
        r2 = _server_requests(log)
        t = time.perf_counter()
        pin.urls(d, ds, 0, 100)
        out["first_page_100"].append(time.perf_counter() - t)
        out["requests_open"].append(_delta(r0, r1))
        out["requests_domain"].append(_delta(r1, r2))
        out["requests_first_page"].append(_delta(r2, _server_requests(log)))
        pin.release()
        reader.close()
    if log is not None:  # bytes: the same walk through the relay
        port = int(settings.s3.endpoint.rsplit(":", 1)[1])
        relay = _CountingRelay(port)
        counted = dataclasses.replace(settings, s3=dataclasses.replace(
            settings.s3, endpoint=f"http://127.0.0.1:{relay.port}"))
        out["bytes_open"], out["bytes_domain"], out["bytes_first_page"] = [], [], []
        for d, ds in queries:
            b0 = relay.received
            reader = IndexReader.from_settings(counted)
            pin = reader.pin()
            b1 = relay.received
            pin.datasets_for_domain(d)
            b2 = relay.received
            pin.urls(d, ds, 0, 100)
            out["bytes_open"].append(b1 - b0)
            out["bytes_domain"].append(b2 - b1)
            out["bytes_first_page"].append(relay.received - b2)
            pin.release()
            reader.close()
    sys.stdout.write(json.dumps(out) + "\n")


def _cold(env: dict[str, str], queries: list[tuple[str, int]], log: Path | None) -> dict[str, Any]:
    code = "import sys; from bench.bench_s3 import cold_child; cold_child(sys.argv[1], sys.argv[2])"
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(queries), str(log or "")],
                          capture_output=True, text=True, env=_env(env), timeout=1800, check=True)
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    res: dict[str, Any] = {k: latency_ms(raw[k]) for k in ("open", "domain", "first_page_100")}
    for k in ("bytes_open", "bytes_domain", "bytes_first_page"):
        if k in raw:
            xs = sorted(raw[k])
            res[k] = {"p50": xs[len(xs) // 2], "max": xs[-1]}
    for k in ("requests_open", "requests_domain", "requests_first_page"):
        kinds = sorted({kind for r in raw[k] for kind in r})
        res[k] = {kind: {"p50": sorted(r.get(kind, 0) for r in raw[k])[len(raw[k]) // 2],
                         "max": max(r.get(kind, 0) for r in raw[k])} for kind in kinds}
    return res


def _lake_and_index(inputs: list[Path], settings: Any, rows: int) -> dict[str, Any]:
    """``crawlstream ingest``'s and ``index build``'s own code in this process (the CLI adds ~2 s of
    start-up per call, which would dominate this size)."""
    from crawlstream.index import IndexBuilder
    from crawlstream.ingest import ingest_files
    from crawlstream.lake import LakeWriter

    started = time.perf_counter()
    for ds, path in enumerate(inputs, start=1):
        ingest_files([path], ds, LakeWriter.from_settings(settings), keep_extras=False)
    ingest_s = time.perf_counter() - started
    started = time.perf_counter()
    IndexBuilder.from_settings(settings).build(full=True)
    build_s = time.perf_counter() - started
    return {"ingest_s": round(ingest_s, 2), "ingest_rows_per_s": round(rows / ingest_s),
            "build_s": round(build_s, 2), "build_rows_per_s": round(rows / build_s)}


def _archive(work: Path, s3_env: dict[str, str], quick: bool) -> dict[str, Any]:
    """Archived page reads: the real pages of bench_store (../shared/data) archived to S3 and to
    local disk, then read back at random (wall time: on S3 a read is one ranged GET)."""
    import dataclasses

    from bench.bench_store import _load
    from crawlstream.store import open_store

    pages = [(url, body) for url, _, body in _load(False)]
    if quick:  # archiving is zstd level 22 (or bzip2): ~2 min per store for all 957 pages
        pages = random.Random(1).sample(pages, 250)
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
    n_urls = 10_000_000 if full else 1_000_000  # 6 of its 30 datasets are ingested: 1/5 of the rows
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
            result[name] = _lake_and_index(inputs, _settings(env), rows)
        queries = _queries(_settings(envs["local"]), random.Random(7), N_QUERIES_WARM)
        for name, env in envs.items():
            result[name]["warm"] = _warm(_settings(env), queries)
            result[name]["cold"] = _cold(env, queries[:N_QUERIES_COLD], s3.log_file if name == "s3" else None)
        lw, sw = result["local"]["warm"], result["s3"]["warm"]
        result["ratios_s3_over_local"] = {
            f"warm_{k}_p99": round(sw[k]["p99_ms"] / max(lw[k]["p99_ms"], 1e-6), 2) for k in lw
        }
        result["archive"] = _archive(work, s3.env, quick)
        return result


if __name__ == "__main__":
    main(run)
