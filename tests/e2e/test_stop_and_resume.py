"""Stopping cleanly (max pages, SIGTERM) and resuming on the same data dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from e2e_support import MAX_RETRIES, crawl_env, crawl_settings, demo_web

from crawlstream.cli._run import CRAWL_SERVICES, run_crawl
from crawlstream.runtime import open_host

_RETRYABLE = ("/status/500", "/status/503", "/status/429", "/slow")


def test_a_crawl_stopped_at_max_pages_resumes_without_refetching(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with demo_web(20) as web:
        with open_host(crawl_settings(data_dir, CRAWLSTREAM_CRAWL_MAX_PAGES="40")) as host:
            first = run_crawl(
                host, web.seed_urls(), services=CRAWL_SERVICES, exit_when_done=True, resolve_map=web.resolve_map
            )
        fetched_first = len([r for r in web.requests() if not r.path.startswith("/robots")])
        with open_host(crawl_settings(data_dir)) as host:  # no seeds: resume what is on disk
            second = run_crawl(host, [], services=CRAWL_SERVICES, exit_when_done=True, resolve_map=web.resolve_map)
        requests = web.requests()
        expected = web.reachable_pages()

    assert first.reason == "max_pages" and first.stats.pages >= 40
    assert fetched_first < len(expected) // 2
    assert second.reason == "drained"
    assert second.stats.pages == second.pages_this_run + first.stats.pages  # totals carry over
    counts = Counter(r.url for r in requests if not r.path.startswith("/robots"))
    assert set(counts) == expected
    assert {n for u, n in counts.items() if not u.endswith(_RETRYABLE)} == {1}  # a clean stop refetches nothing
    assert {n for u, n in counts.items() if u.endswith(_RETRYABLE)} <= {1 + MAX_RETRIES}


def test_sigterm_stops_the_cli_cleanly_with_a_summary(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with demo_web(20) as web:
        resolve_map = tmp_path / "resolve.json"
        resolve_map.write_text(json.dumps(web.resolve_map))
        env = {**os.environ, **crawl_env(data_dir, CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map))}
        cmd = [sys.executable, "-m", "crawlstream", "run", "--services", ",".join(CRAWL_SERVICES)]
        cmd += ["--seeds", *web.seed_urls()[:10], "--seeds", *web.seed_urls()[10:]]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while len(web.requests()) < 30 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, err.decode()[-2000:]
    summary = json.loads(out.decode())
    assert summary["reason"] == "stopped" and summary["pages"] > 0
    logged = (data_dir / "logs" / "crawlstream.log").read_bytes()  # a clean terminal: log lines go to the file
    assert b"SIGTERM: stopping" in logged
    assert b"crawl ended (stopped)" in logged
