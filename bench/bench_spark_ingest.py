"""`crawlstream ingest --no-publish` vs `crawlstream spark-ingest --master local[2]` on the same
generated text input (30 zstd files, so Spark has splits): rows/s of each, their ratio, and
rows/s per core (ADR 030). Both commands run as processes, one after the other, on an empty lake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_index import generate

SPARK_CORES = 2


def _tree_cpu_s(root: int, seen: dict[int, float]) -> None:
    """Record the CPU seconds so far of ``root`` and every descendant (/proc; Spark's JVM and
    Python workers are not reaped by the command, so its rusage misses them)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry))
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if pid in stats:
            utime, stime = int(stats[pid][11]), int(stats[pid][12])
            seen[pid] = max(seen.get(pid, 0.0), (utime + stime) / os.sysconf("SC_CLK_TCK"))


def _command(args: list[str], data_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "CRAWLSTREAM_DATA_DIR": str(data_dir)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "crawlstream", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    cpu: dict[int, float] = {}
    out = b""
    while proc.poll() is None:
        _tree_cpu_s(proc.pid, cpu)
        time.sleep(0.5)
    out = proc.stdout.read() if proc.stdout else b""
    assert proc.returncode == 0, args
    summary = json.loads(out)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    summary["cpu_s"] = round(sum(cpu.values()), 1)  # sampled every 0.5 s: a lower bound
    return summary


def run(quick: bool) -> dict[str, Any]:
    n_urls = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="bench-spark-ingest-") as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        paths = [str(p) for p in generate(work / "in", n_urls, big_rows=n_urls // 50)[0]]
        ingest = _command(["ingest", *paths, "--dataset-id", "1", "--no-publish"], work / "ingest")
        spark = _command(["spark-ingest", *paths, "--dataset-id", "1", "--master", f"local[{SPARK_CORES}]"],
                         work / "spark")
    assert spark["rows"] == ingest["rows"] and spark["valid"] == ingest["valid"]
    spark_job_rows_per_s = spark["rows"] / spark["seconds"]
    return {
        "rows": ingest["rows"],
        "files": len(paths),
        "ingest_rows_per_s": ingest["rows_per_s"],
        "ingest_wall_s": ingest["wall_s"],
        "spark_rows_per_s": round(spark_job_rows_per_s),
        "spark_rows_per_s_per_core": round(spark_job_rows_per_s / SPARK_CORES),
        "spark_session_s": spark["spark_session_seconds"],
        "spark_wall_s": spark["wall_s"],
        "spark_vs_ingest": round(spark_job_rows_per_s / ingest["rows_per_s"], 2),
        "ingest_cpu_s": ingest["cpu_s"],
        "spark_cpu_s": spark["cpu_s"],  # the JVM's and the Python workers', session start included
        "ingest_rows_per_cpu_s": round(ingest["rows"] / ingest["cpu_s"]),
        "spark_rows_per_cpu_s": round(spark["rows"] / spark["cpu_s"]),
        "spark_task_s": spark["task_seconds"],
        "load_average": os.getloadavg(),
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(run("--quick" in sys.argv), indent=2) + "\n")
