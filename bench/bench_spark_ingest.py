"""`crawlstream ingest --no-publish` vs `crawlstream spark-ingest --master local[2]` on the same
generated text input (30 zstd files, so Spark has splits): rows/s of each, their ratio, and
rows/s per core (ADR 030). Both commands run as processes, one after the other, on an empty lake.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_index import generate

SPARK_CORES = 2


def _command(args: list[str], data_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "CRAWLSTREAM_DATA_DIR": str(data_dir)}
    started = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "crawlstream", *args], env=env, capture_output=True, check=True)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(done.stdout)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    # CPU of the command and every descendant it waited for (Spark: the JVM and its Python workers)
    summary["cpu_s"] = round(cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime, 1)
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
        "spark_cpu_s": spark["cpu_s"],  # session start included
        "spark_task_s": spark["task_seconds"],
        "load_average": os.getloadavg(),
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(run("--quick" in sys.argv), indent=2) + "\n")
