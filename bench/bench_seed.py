"""``crawlstream seed``: URLs/s and peak memory of bulk seeding, embedded and Kafka.

Input: 1,000,000 lines (100,000 quick) made from the real URL lists in ../shared/data (all
~255k reddit-webtext links and the kasztp list, then the same URLs with a ``v=N`` query
parameter so every pass is new URLs), gzip-compressed as a seed file is shipped. Each run is
its own process (``crawlstream seed FILE --no-progress``), so wall time, CPU time and peak
RSS (``wait4``) are its own and include start-up (~1 s: imports, bus).

Baseline in the same invocation: the seeding path before the bulk intake (``read_seeds``
of a plain-text file into a list, then ``send_seeds``: ``DiscoveredUrl`` objects encoded by
the codec and sent one by one through ``EventProducer``), on the first 200,000 lines (20,000
quick; it holds the whole list in memory). Target: >= 100,000 URLs/s end to end.

``python -m bench seed [--quick]``; Kafka (a ``LocalKafka`` broker) when its jars are there.
With ``CRAWLSTREAM_BENCH_BASELINE=DIR`` (older code, see bench_migrate) that code's ``crawlstream
seed --seeds`` runs on the baseline's lines too.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import REPO, main, shared_data

TARGET_URLS_PER_S = 100_000

_BASELINE = """
import os, sys
from crawlstream.crawl import read_seeds, send_seeds
from crawlstream.runtime import open_host
from crawlstream.settings import load
settings = load(os.environ)
urls = read_seeds([sys.argv[1]], raw=True)  # as crawlstream run does: raw forms recorded too
with open_host(settings) as host:
    send_seeds(host.event_producer(), urls, settings.crawl.dataset_id)
print(len(urls))
"""


def real_urls() -> list[str]:
    root = shared_data() / "urls"
    urls: list[str] = []
    for path in sorted((root / "reddit-webtext").glob("*.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            urls.extend(json.loads(line)["u"] for line in fh if line.strip())
    with gzip.open(root / "ada-url-various-datasets" / "kasztp.txt.gz", "rt", encoding="utf-8") as fh:
        urls.extend(line.strip() for line in fh if line.strip())
    return urls


def write_seed_file(path: Path, n: int, urls: list[str]) -> None:
    """``n`` lines: the real URLs, then again with ``v=<pass>`` appended (new URLs, same shapes)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        for i in range(n):
            url = urls[i % len(urls)]
            rnd = i // len(urls)
            out.write((url if rnd == 0 else f"{url}{'&' if '?' in url else '?'}v={rnd}") + "\n")


def _run(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One process: wall, CPU (user + sys) and peak RSS of that process alone, and its stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{args[2:4]} failed ({proc.returncode}): {err.decode()[-3000:]}")
    return {
        "stdout": out.decode(),
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def _env(data_dir: Path, kafka: str | None = None, code: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAWLSTREAM_", "KAFKA_", "REDIS_URL"))}
    env.update({"CRAWLSTREAM_DATA_DIR": str(data_dir), "CRAWLSTREAM_BUS_FSYNC": "batch",
                "CRAWLSTREAM_LOG_LEVEL": "WARNING"})
    if kafka:
        env["KAFKA_BOOTSTRAP_SERVERS"] = kafka
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


def _seed(path: Path, env: dict[str, str]) -> dict[str, Any]:
    crawlstream = str(Path(sys.executable).parent / "crawlstream")
    res = _run([crawlstream, "seed", str(path), "--no-progress"], env)
    report = json.loads(res["stdout"].strip().splitlines()[-1])
    return {
        "lines": report["lines"],
        "outcomes": report["outcomes"],
        "invalid_by_reason": report["invalid_by_reason"],
        "raw_forms": report["raw_forms"],
        "wall_s": round(res["wall_s"], 2),
        "cpu_s": round(res["cpu_s"], 2),
        "intake_s": report["seconds"],
        "urls_per_s": round(report["lines"] / res["wall_s"]),
        "urls_per_s_after_startup": report["urls_per_s"],
        "urls_per_cpu_s": round(report["lines"] / res["cpu_s"]),
        "peak_rss_mb": res["peak_rss_mb"],
    }


def _kafka_available() -> bool:
    return (REPO / ".cache" / "kafka").is_dir()


def run(quick: bool) -> dict[str, Any]:
    n = 100_000 if quick else 1_000_000
    n_base = n // 5
    urls = real_urls()
    with tempfile.TemporaryDirectory(prefix="bench-seed-") as tmp:
        root = Path(tmp)
        seeds, plain = root / "seeds.txt.gz", root / "baseline.txt"
        write_seed_file(seeds, n, urls)
        write_seed_file(plain, n_base, urls)
        base = _run([sys.executable, "-c", _BASELINE, str(plain)], _env(root / "base"))
        baseline = {
            "lines": n_base,
            "wall_s": round(base["wall_s"], 2),
            "cpu_s": round(base["cpu_s"], 2),
            "urls_per_s": round(n_base / base["wall_s"]),
            "urls_per_cpu_s": round(n_base / base["cpu_s"]),
            "peak_rss_mb": base["peak_rss_mb"],
        }
        embedded = _seed(seeds, _env(root / "embedded"))
        old_code = os.environ.get("CRAWLSTREAM_BENCH_BASELINE")
        old: dict[str, Any] | None = None
        if old_code:  # the `crawlstream seed` of older code (bench_migrate's docstring says how)
            res = _run([sys.executable, "-m", "crawlstream", "seed", "--seeds", str(plain)],
                       _env(root / "old", code=Path(old_code)))
            old = {"code": old_code, "lines": n_base, "wall_s": round(res["wall_s"], 2),
                   "cpu_s": round(res["cpu_s"], 2), "urls_per_s": round(n_base / res["wall_s"]),
                   "urls_per_cpu_s": round(n_base / res["cpu_s"]), "peak_rss_mb": res["peak_rss_mb"]}
        result: dict[str, Any] = {
            "input": {"lines": n, "gzip_bytes": seeds.stat().st_size, "distinct_real_urls": len(urls)},
            "embedded": embedded,
            "baseline_before_bulk_intake_embedded": baseline,
            "speedup_wall": round(embedded["urls_per_s"] / baseline["urls_per_s"], 2),
            "speedup_cpu": round(embedded["urls_per_cpu_s"] / baseline["urls_per_cpu_s"], 2),
            **({"older_code_seed_command": old,
                "speedup_cpu_vs_older_code": round(embedded["urls_per_cpu_s"] / old["urls_per_cpu_s"], 2)}
               if old else {}),
            "target_urls_per_s": TARGET_URLS_PER_S,
            "meets_target_embedded": embedded["urls_per_s_after_startup"] >= TARGET_URLS_PER_S,
        }
        if _kafka_available():
            from crawlstream.devtools.localkafka import LocalKafka

            with LocalKafka(brokers=1, partitions=16) as cluster:
                result["kafka"] = _seed(seeds, _env(root / "kafka", cluster.bootstrap_servers))
            result["meets_target_kafka"] = result["kafka"]["urls_per_s_after_startup"] >= TARGET_URLS_PER_S
        result["note"] = "2 shared cores, other engineers' jobs running: compare the ratios, not the absolute rates"
        return result


if __name__ == "__main__":
    main(run)
