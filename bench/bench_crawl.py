"""End-to-end crawl: crawlstream vs. Scrapy on the same synthetic web, in the same run.

The web is issue 15's: 2,000 registered domains x 50 pages of 15-60 KB HTML in full mode
(200 x 10 in quick mode), and each crawler is stopped with SIGINT (Ctrl-C, a graceful stop)
after ``STOP_AFTER_S`` (180 s; 45 s quick) if it has not finished. One ``DemoWeb`` serves
both crawlers from this process; each crawler runs in its own subprocess so its CPU time
(user + sys, from ``RUSAGE_CHILDREN`` deltas, its shutdown included) is its own and excludes
the web server. Pages are counted from the web server's request log (robots.txt fetches
excluded), reset before each crawler.

* crawlstream: ``crawlstream run --exit-when-done`` with the default services (pages are
  stored in the content store and the Parquet lake), resolver map to the loopback web,
  scheduler minimum delay 0 and response-time factor 0.
  It runs twice, ``--processes 1`` and ``--processes 2`` (ADR 025), each on a fresh data dir:
  ``processes`` in the JSON compares them (pages/s, CPU per page, peak RSS summed over the
  run's processes, the scaling factor); ``crawlstream`` is the two-process run.
* Scrapy: ``bench/_scrapy_baseline.py`` (see its docstring for the tuning), through the
  demo web's forward proxy; it stores nothing.

Politeness differences that remain: crawlstream obeys robots ``Crawl-delay`` (kept small
here), honours ``Retry-After``/back-off (capped small) and treats a 5xx robots.txt as
"disallow all" (RFC 9309), where Scrapy parses the error body as an empty robots.txt and
crawls the host. Slow pages answer after ``SLOW_S`` (below the shared timeout), so the
run measures throughput, not politeness waits.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from bench._harness import REPO, main
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord

SLOW_S = 0.5
CRAWL_DELAY_S = 0.05
TIMEOUT_S = 3.0  # fetch timeout of both crawlers (well above SLOW_S: no spurious timeouts on a busy box)
MAX_RETRIES = 2
MAX_BODY_BYTES = 1024 * 1024
PAGE_BYTES = (15_000, 60_000)
STOP_AFTER_S = 180.0
CONCURRENCY = 64
USER_AGENT = "crawlstream/0.1 (+https://example.invalid/crawlstream)"
_ROBOTS_PATHS = ("/robots.txt", "/robots-moved.txt")


def _crawlstream_env(data_dir: Path, resolve_map_file: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CRAWLSTREAM_DATA_DIR": str(data_dir),
            "CRAWLSTREAM_LOG_LEVEL": "WARNING",
            "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": "1000000",
            "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
            "CRAWLSTREAM_SCHEDULER_RESPONSE_TIME_FACTOR": "0",
            "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.3",
            "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": str(MAX_RETRIES),
            "CRAWLSTREAM_FETCH_TIMEOUT_S": str(TIMEOUT_S),
            "CRAWLSTREAM_FETCH_READ_TIMEOUT_S": str(TIMEOUT_S),
            "CRAWLSTREAM_FETCH_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
            "CRAWLSTREAM_FETCH_CONCURRENCY": str(CONCURRENCY),
            "CRAWLSTREAM_FETCH_USER_AGENT": USER_AGENT,
            "CRAWLSTREAM_FETCH_ROBOTS_ERROR_BACKOFF_S": "0.3",
            "CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE": str(resolve_map_file),
            "CRAWLSTREAM_CRAWL_PROGRESS_INTERVAL_S": "10",
        }
    )
    return env


def _run_child(cmd: list[str], env: dict[str, str], stop_after_s: float, timeout_s: float) -> dict[str, Any]:
    """Run ``cmd``, Ctrl-C it after ``stop_after_s``; wall seconds, user+sys CPU of the child,
    exit code, stdout (last line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    timed_out = stopped = False
    sampler = _RssSampler(proc.pid)
    try:
        out, err = sampler.communicate(proc, stop_after_s)
    except subprocess.TimeoutExpired:
        stopped = True
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: our own child's session only
        try:
            out, err = sampler.communicate(proc, timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    result: dict[str, Any] = {
        "exit_code": proc.returncode,
        "stopped_by_sigint": stopped,
        "timed_out": timed_out,
        "wall_s": round(wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "peak_rss_mb_sum": round(sampler.peak_bytes / 2**20, 1),
        "processes_seen": sampler.max_processes,
    }
    try:
        result["summary"] = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result["summary"] = lines[-1][:500]
    if (proc.returncode != 0 and not stopped) or timed_out:
        result["stderr_tail"] = err[-2000:]
    return result


class _RssSampler:
    """Peak of the summed RSS of a process and its descendants (sampled every 0.2 s)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_bytes = 0
        self.max_processes = 0

    def sample(self) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        self.peak_bytes = max(self.peak_bytes, total)
        self.max_processes = max(self.max_processes, len(procs))

    def communicate(self, proc: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
        deadline = time.monotonic() + timeout_s
        while True:
            self.sample()
            try:
                return proc.communicate(timeout=0.2)
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise


def _log_stats(log: list[RequestRecord]) -> dict[str, Any]:
    pages = [r for r in log if r.path not in _ROBOTS_PATHS]
    urls = Counter(r.url for r in pages)
    by_host: dict[str, list[float]] = {}
    for r in log:
        by_host.setdefault(r.host, []).append(r.time_s)
    gaps = sorted(b - a for times in by_host.values() for a, b in zip(sorted(times), sorted(times)[1:], strict=False))
    span_s = (max(r.time_s for r in pages) - min(r.time_s for r in pages)) if len(pages) > 1 else 0.0
    return {
        "pages": len(pages),
        "unique_urls": len(urls),
        "repeat_requests": len(pages) - len(urls),
        "robots_requests": len(log) - len(pages),
        "statuses": dict(sorted(Counter(str(r.status) for r in pages).items())),
        "active_span_s": round(span_s, 2),
        # per-host gap between consecutive requests (robots.txt included): politeness waits,
        # queueing behind the other domains and the crawler's response -> next-request latency
        "same_host_gap_s_p50": round(gaps[len(gaps) // 2], 3) if gaps else None,
        "same_host_gap_s_p90": round(gaps[len(gaps) * 9 // 10], 3) if gaps else None,
    }


def _politeness(web: DemoWeb, log: list[RequestRecord]) -> dict[str, Any]:
    """What the server saw of robots.txt: requests to disallowed paths, and consecutive page
    requests to one host closer than its Crawl-delay (arrival times; 1 ms of clock slack)."""
    disallowed = sum(1 for r in log if r.path not in _ROBOTS_PATHS and not web.model.allowed(r.url))
    last: dict[str, RequestRecord] = {}
    below = 0
    for r in sorted((r for r in log if r.path not in _ROBOTS_PATHS), key=lambda r: r.time_s):
        delay = web.model.crawl_delay_s_for(r.host)
        if delay and r.host in last and last[r.host].apart_s(r) < delay - 0.001:
            below += 1
        last[r.host] = r
    return {"requests_to_disallowed_paths": disallowed, "page_gaps_below_crawl_delay": below}


def _measure(web: DemoWeb, cmd: list[str], env: dict[str, str], stop_after_s: float) -> dict[str, Any]:
    web.clear_log()
    child = _run_child(cmd, env, stop_after_s, timeout_s=60.0)
    time.sleep(0.2)  # let the server thread record the last responses
    stats = _log_stats(web.requests()) | _politeness(web, web.requests())
    pages = stats["pages"]
    wall_s = child["wall_s"]
    return {
        **stats,
        **child,
        "pages_per_s": round(pages / wall_s, 1) if wall_s else None,
        "pages_per_s_active": round(pages / stats["active_span_s"], 1) if stats["active_span_s"] else None,
        "cpu_s_per_1000_pages": round(1000 * child["cpu_s"] / pages, 3) if pages else None,
        "cores_busy": round(child["cpu_s"] / wall_s, 2) if wall_s else None,  # 1.0 = one core saturated
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def web_size(quick: bool) -> tuple[int, int]:
    """(registered domains, pages per domain) of the benchmark web."""
    return (200, 10) if quick else (2000, 50)


def demo_web(n_domains: int, pages_per_domain: int, page_bytes: tuple[int, int] | None = PAGE_BYTES) -> DemoWeb:
    """The synthetic web the crawl benchmarks crawl (not started)."""
    return DemoWeb(
        n_domains,
        pages_per_domain=pages_per_domain,
        seed=7,
        crawl_delay_s=CRAWL_DELAY_S,
        slow_s=SLOW_S,
        huge_bytes=2 * MAX_BODY_BYTES,
        bomb_bytes=8 * MAX_BODY_BYTES,
        page_bytes=page_bytes,
    )


def write_crawl_inputs(web: DemoWeb, root: Path) -> tuple[Path, Path]:
    """The seeds file and the fetcher's resolver map file of ``web`` (started), under ``root``."""
    seeds_file = root / "seeds.txt"
    seeds_file.write_text("\n".join(web.seed_urls()) + "\n", encoding="utf-8")
    resolve_map_file = root / "resolve-map.json"
    resolve_map_file.write_text(json.dumps({h: list(t) for h, t in web.resolve_map.items()}), encoding="utf-8")
    return seeds_file, resolve_map_file


def crawlstream_run_command(seeds_file: Path, processes: int = 1) -> list[str]:
    """``crawlstream run --exit-when-done --processes N`` on the embedded bus: the embedded crawl."""
    return [
        sys.executable,
        "-c",
        "import sys; from crawlstream.cli import main; sys.exit(main())",
        "run",
        "--exit-when-done",
        "--allow-private-networks",
        "--seeds",
        str(seeds_file),
        "--processes",
        str(processes),
    ]


def run(quick: bool) -> dict[str, Any]:
    n_domains, pages_per_domain = web_size(quick)
    stop_after_s = 45.0 if quick else STOP_AFTER_S
    web = demo_web(n_domains, pages_per_domain)
    with tempfile.TemporaryDirectory(prefix="bench-crawl-") as tmp, web:
        tmp_path = Path(tmp)
        seeds_file, resolve_map_file = write_crawl_inputs(web, tmp_path)
        expected_pages = len(web.reachable_pages())

        load_before = os.getloadavg()
        by_processes: dict[int, dict[str, Any]] = {}
        for processes in (1, 2):
            env = _crawlstream_env(tmp_path / f"data-{processes}", resolve_map_file)
            by_processes[processes] = _measure(web, crawlstream_run_command(seeds_file, processes), env, stop_after_s)
        ours = by_processes[2]

        scrapy_cmd = [
            sys.executable,
            "-m",
            "bench._scrapy_baseline",
            "--seeds-file",
            str(seeds_file),
            "--proxy",
            web.proxy_url,
            "--timeout-s",
            str(TIMEOUT_S),
            "--retries",
            str(MAX_RETRIES),
            "--concurrency",
            str(CONCURRENCY),
            "--max-body-bytes",
            str(MAX_BODY_BYTES),
            "--user-agent",
            USER_AGENT,
        ]
        scrapy_env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
        theirs = _measure(web, scrapy_cmd, scrapy_env, stop_after_s)

    pps = _ratio(ours["pages_per_s"], theirs["pages_per_s"])
    cpu = _ratio(ours["cpu_s_per_1000_pages"], theirs["cpu_s_per_1000_pages"])
    return {
        "workload": {
            "domains": n_domains,
            "hosts": len(web.hosts),
            "pages_per_domain": pages_per_domain,
            "page_bytes_min_max": list(PAGE_BYTES),
            "stop_after_s": stop_after_s,
            "expected_pages_polite": expected_pages,
            "slow_s": SLOW_S,
            "crawl_delay_s": CRAWL_DELAY_S,
            "fetch_timeout_s": TIMEOUT_S,
            "max_retries": MAX_RETRIES,
            "concurrency": CONCURRENCY,
            "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
            "note": "pages counted from the web server's log (robots.txt excluded); crawlstream stores "
            "every page (content store + Parquet lake), Scrapy stores nothing; CPU = user+sys of the "
            "crawler subprocess (web server excluded); wall includes process start-up",
        },
        "crawlstream": ours,
        "processes": {
            "processes_1": by_processes[1],
            "processes_2": by_processes[2],
            "scaling_pages_per_s_2_over_1": _ratio(by_processes[2]["pages_per_s"], by_processes[1]["pages_per_s"]),
            "scaling_pages_per_s_active_2_over_1": _ratio(
                by_processes[2]["pages_per_s_active"], by_processes[1]["pages_per_s_active"]
            ),
            "cpu_per_page_2_over_1": _ratio(
                by_processes[2]["cpu_s_per_1000_pages"], by_processes[1]["cpu_s_per_1000_pages"]
            ),
            "note": "same web, same run, fresh data dir each; CPU = user+sys of the run and its workers",
        },
        "scrapy": theirs,
        "ratio_crawlstream_over_scrapy": {
            "pages_per_s": pps,
            "pages_per_s_active": _ratio(ours["pages_per_s_active"], theirs["pages_per_s_active"]),
            "cpu_s_per_1000_pages": cpu,
        },
        "target_met": {  # issue 15
            "pages_per_s_at_least_5x": pps is not None and pps >= 5.0,
            "cpu_per_page_at_most_0_25x": cpu is not None and cpu <= 0.25,
        },
    }


if __name__ == "__main__":
    main(run)
