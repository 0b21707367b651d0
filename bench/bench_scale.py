"""The index at scale (issue 27): ingest, build, bytes and latency at 1M, 10M and 100M URLs.

Per size, on URLs shaped like the real lists (``bench.scale_data``; seeded, 4 datasets):

* ingest rows/s of ``crawlstream ingest --no-publish`` (one process per dataset, as users run
  it) and of ``crawlstream spark-ingest --master local[2]`` into a second lake, with CPU
  seconds, so rows/s per core projects a cluster's rate;
* ``crawlstream index build --full`` over the lake Spark wrote (``ingest``'s when Spark is not
  installed): seconds, URLs/s and peak RSS (``/usr/bin/time``);
* lake + index bytes per URL beside the same rows as one sorted zstd-19 text file;
* ``/v1/domain`` (``datasets_for_domain``) and first-page (``urls(d, ds, 0, 100)``) p50/p99 warm
  (one reader, caches filled) and cold (a new process, a new reader per query, the data dir
  evicted from the page cache: ``bench_s3``'s cold walk), and ``/v1/url`` (``lookup_url``) p99.

``python -m bench scale``: 1M and 10M; ``--quick``: 1M; 100M is opt-in:
``CRAWLSTREAM_BENCH_SCALE_SIZES=1m,10m,100m python -m bench scale`` (~3 h on 2 cores, ~40 GB of
disk under ``CRAWLSTREAM_BENCH_DIR``). Generated inputs are kept in
``CRAWLSTREAM_BENCH_DIR/scale-inputs`` for the next run, and each size's results in
``CRAWLSTREAM_BENCH_DIR/scale-<N>.json`` as soon as it is done; set
``CRAWLSTREAM_BENCH_SCALE_KEEP=1`` to keep the lakes too, and
``CRAWLSTREAM_BENCH_SCALE_INGEST_MAX=10m`` to time ``crawlstream ingest`` only up to that size
(its rate per row does not change with size; at 100M it costs most of an hour).
``CRAWLSTREAM_BENCH_SCALE_LAKE=<kept lake> CRAWLSTREAM_BENCH_SCALE_PREVIOUS=<its scale-N.json>``
measures a kept lake again (build, bytes, latency) after a change, beside the previous numbers.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import REPO, latency_ms, main
from bench.bench_index import _dir_bytes, _sorted_text_zstd19
from bench.bench_s3 import _cold, _queries, _settings
from bench.scale_data import generate

N_QUERIES_WARM = 2000
N_QUERIES_COLD = 60
CLI = [sys.executable, "-m", "crawlstream"]


def _sizes_value(text: str) -> int | None:
    """``10m`` -> 10,000,000 (``k``, ``m`` or a plain number); None for an empty string."""
    text = text.strip()
    if not text:
        return None
    units = {"k": 1_000, "m": 1_000_000}
    return int(float(text[:-1]) * units[text[-1].lower()]) if text[-1].lower() in units else int(text)


def _sizes(quick: bool) -> list[int]:
    raw = os.environ.get("CRAWLSTREAM_BENCH_SCALE_SIZES", "1m" if quick else "1m,10m")
    return [v for v in map(_sizes_value, raw.split(",")) if v is not None]


def _timed(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd`` under GNU time: wall and CPU seconds, peak RSS, and its stdout's last JSON."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", tf.name, *cmd],
                              capture_output=True, text=True, env=env, timeout=6 * 3600)
        if proc.returncode not in (0, 3):
            raise RuntimeError(f"{' '.join(cmd[:6])}... exited {proc.returncode}: {proc.stderr[-2000:]}")
        wall, user, sys_s, rss_kb = tf.read().split()[-4:]
    out: dict[str, Any] = {"wall_s": float(wall), "cpu_s": round(float(user) + float(sys_s), 2),
                           "peak_rss_mb": round(int(rss_kb) / 1024, 1)}
    start = proc.stdout.find("{")
    if start >= 0:
        with contextlib.suppress(json.JSONDecodeError):
            out["report"] = json.loads(proc.stdout[start:])
    return out


def _env(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "libs"), str(REPO)]),
            "CRAWLSTREAM_DATA_DIR": str(data_dir), "CRAWLSTREAM_LOG_LEVEL": "WARNING"}


def _ingest(files: dict[int, list[Path]], data_dir: Path, rows: int, spark: bool) -> dict[str, Any]:
    runs = []
    for ds, paths in files.items():
        cmd = [*CLI, "spark-ingest", "--master", "local[2]"] if spark else [*CLI, "ingest", "--no-publish"]
        runs.append(_timed([*cmd, "--dataset-id", str(ds), *map(str, paths)], _env(data_dir)))
    wall = sum(r["wall_s"] for r in runs)
    cpu = sum(r["cpu_s"] for r in runs)
    valid = sum(int(r.get("report", {}).get("valid", 0)) for r in runs)
    return {"rows": rows, "valid": valid, "wall_s": round(wall, 1), "cpu_s_driver": round(cpu, 1),
            "rows_per_s": round(rows / wall), "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "runs": [{k: v for k, v in r.items() if k != "report"} for r in runs]}


def _spark_available() -> bool:
    proc = subprocess.run([*CLI, "spark-ingest", "--help"], capture_output=True, env=_env(Path(tempfile.gettempdir())))
    return proc.returncode == 0


def _warm(data_dir: Path, queries: list[tuple[str, int]]) -> dict[str, Any]:
    from crawlstream.index import IndexReader

    reader = IndexReader(data_dir)
    t = time.perf_counter()
    with reader.pin() as idx:
        open_s = time.perf_counter() - t
        urls = []
        for d, ds in queries:  # fill the caches once, as steady traffic does
            idx.datasets_for_domain(d)
            page = idx.urls(d, ds, 0, 100)
            if page is not None and page.items:
                urls.append((page.items[0].url, ds))
    res: dict[str, list[float]] = {"domain": [], "first_page_100": [], "url": []}
    for d, ds in queries:
        with reader.pin() as idx:
            t = time.perf_counter()
            idx.datasets_for_domain(d)
            res["domain"].append(time.perf_counter() - t)
            t = time.perf_counter()
            idx.urls(d, ds, 0, 100)
            res["first_page_100"].append(time.perf_counter() - t)
    for url, ds in urls:
        with reader.pin() as idx:
            t = time.perf_counter()
            found = idx.lookup_url(url)
            res["url"].append(time.perf_counter() - t)
        assert ds in found, url
    reader.close()
    return {"open_s": round(open_s, 3), **{k: latency_ms(v) for k, v in res.items()}}


def _index_bytes(data_dir: Path) -> int:
    from crawlstream.index._manifest import read_manifest

    manifest = read_manifest(data_dir)
    assert manifest is not None
    return _dir_bytes(data_dir / "index" / manifest.current_version)


def _one_size(n: int, inputs: Path, work: Path, spark: bool) -> dict[str, Any]:
    t = time.perf_counter()
    gen = generate(inputs / f"{n}", n)
    out: dict[str, Any] = {"urls_generated": gen.rows, "candidate_domains": gen.domains,
                           "generate_s": round(time.perf_counter() - t, 1)}
    lake = work / f"lake-{n}"
    ingest_max = _sizes_value(os.environ.get("CRAWLSTREAM_BENCH_SCALE_INGEST_MAX", "")) if spark else None
    if ingest_max is None or n <= ingest_max:
        sys.stderr.write(f"bench scale {n:,}: ingest\n")
        out["ingest"] = _ingest(gen.files, lake, gen.rows, spark=False)
    if spark:
        # The index is built on the lake Spark wrote (the batch path at this size: one file per
        # partition); ``crawlstream ingest`` past lake.buffer_max_rows publishes a partition in
        # several files, which only its rate is measured for here.
        shutil.rmtree(lake, ignore_errors=True)
        sys.stderr.write(f"bench scale {n:,}: spark-ingest\n")
        out["spark_ingest"] = _ingest(gen.files, lake, gen.rows, spark=True)
        if "ingest" in out:
            out["spark_over_ingest_rows_per_s"] = round(
                out["spark_ingest"]["rows_per_s"] / out["ingest"]["rows_per_s"], 2
            )
        out["spark_rows_per_s_per_core"] = round(out["spark_ingest"]["rows_per_s"] / 2)
    out["lake_written_by"] = "spark-ingest" if spark else "ingest"
    out.update(_measure_lake(lake, f"{n:,}", gen.rows))
    if os.environ.get("CRAWLSTREAM_BENCH_SCALE_KEEP") != "1":
        shutil.rmtree(lake, ignore_errors=True)
    return out


def _measure_lake(lake: Path, label: str, urls: int, baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """``index build --full`` of ``lake`` (timed, peak RSS), lake + index bytes beside the sorted
    zstd-19 text of its rows (``baseline``'s, a run over the same rows, when given: that text
    costs ~45 min at 100M), then the warm and cold latencies."""
    out: dict[str, Any] = {}
    sys.stderr.write(f"bench scale {label}: index build\n")
    build = _timed([*CLI, "index", "build", "--full"], _env(lake))
    report = build.pop("report", {})
    out["build"] = {**build, "urls_per_s": round(urls / build["wall_s"]),
                    "us_per_url": round(build["wall_s"] / urls * 1e6, 3),
                    **{k: report[k] for k in ("domains", "pairs", "files_scanned", "phases_s") if k in report}}
    lake_b, index_b = _dir_bytes(lake / "urls"), _index_bytes(lake)
    if baseline is not None:
        rows = int(baseline["rows"])
        text_b = round(baseline["sorted_zstd19_per_url"] * rows)
    else:
        sys.stderr.write(f"bench scale {label}: sorted zstd-19 baseline\n")
        text_b, rows = _sorted_text_zstd19(lake)
    out["bytes"] = {"rows": rows, "lake_per_url": round(lake_b / rows, 2), "index_per_url": round(index_b / rows, 2),
                    "sorted_zstd19_per_url": round(text_b / rows, 2),
                    "ratio_to_sorted_zstd19": round((lake_b + index_b) / text_b, 3),
                    **({"sorted_zstd19_from": "the baseline run"} if baseline is not None else {})}
    sys.stderr.write(f"bench scale {label}: latency\n")
    queries = _queries(_settings({"CRAWLSTREAM_DATA_DIR": str(lake)}), random.Random(7), N_QUERIES_WARM)
    out["warm"] = _warm(lake, queries)
    out["cold"] = _cold({"CRAWLSTREAM_DATA_DIR": str(lake)}, queries[:N_QUERIES_COLD], None)
    return out


def remeasure(lake: Path, previous: Path) -> dict[str, Any]:
    """A kept lake (``CRAWLSTREAM_BENCH_SCALE_KEEP=1``) measured again after a change of the index or
    the lake's layout (``bench.scale_layout relayout``): ``previous`` is its size's JSON, whose rows
    and sorted zstd-19 bytes still hold (the same rows)."""
    before = json.loads(previous.read_text())
    out = _measure_lake(lake, lake.name, int(before["urls_generated"]), before["bytes"])
    out["previous"] = {k: before[k] for k in ("build", "bytes", "warm", "cold")}
    return out


def run(quick: bool) -> dict[str, Any]:
    base = Path(os.environ.get("CRAWLSTREAM_BENCH_DIR", tempfile.gettempdir()))
    kept = os.environ.get("CRAWLSTREAM_BENCH_SCALE_LAKE")
    if kept:
        previous = Path(os.environ.get("CRAWLSTREAM_BENCH_SCALE_PREVIOUS", ""))
        if not previous.is_file():
            raise SystemExit("CRAWLSTREAM_BENCH_SCALE_LAKE needs CRAWLSTREAM_BENCH_SCALE_PREVIOUS: the JSON of "
                             "the run that made the lake (scale-<N>.json)")
        result = remeasure(Path(kept), previous)
        (base / f"remeasure-{Path(kept).name}.json").write_text(json.dumps(result, indent=2) + "\n")
        return result
    inputs = base / "scale-inputs"
    work = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=base))
    spark = _spark_available()
    result: dict[str, Any] = {"spark": spark, "sizes": {}}
    try:
        for n in _sizes(quick):
            result["sizes"][str(n)] = _one_size(n, inputs, work, spark)
            # each size's numbers kept as soon as they exist: a 100M run takes hours
            (base / f"scale-{n}.json").write_text(json.dumps(result["sizes"][str(n)], indent=2) + "\n")
        sizes = sorted(result["sizes"], key=int)
        if len(sizes) >= 2:
            small, big = result["sizes"][sizes[-2]], result["sizes"][sizes[-1]]
            result["largest_over_previous"] = {
                "build_peak_rss": round(big["build"]["peak_rss_mb"] / small["build"]["peak_rss_mb"], 2),
                "build_us_per_url": round(big["build"]["us_per_url"] / small["build"]["us_per_url"], 2),
            }
    finally:
        if os.environ.get("CRAWLSTREAM_BENCH_SCALE_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main(run)
