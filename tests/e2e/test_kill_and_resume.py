"""kill -9 of `crawlstream run` mid-crawl, then a restart on the same data dir: the crawl completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
from e2e_support import crawl_env, demo_web

SERVICES = "deduper,scheduler,fetcher,link-extractor"


def start_run(data_dir: Path, seeds: Path, resolve_map: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        crawl_env(
            data_dir,
            CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map),
            # a ticket recorded just before the kill, whose request never reached the bus, is
            # re-dispatched when its lease runs out: keep that short (but above the fetch timeout)
            CRAWLSTREAM_SCHEDULER_LEASE_S="3",
            CRAWLSTREAM_DEDUPE_SNAPSHOT_INTERVAL_S="0.5",
        )
    )
    cmd = [sys.executable, "-m", "crawlstream", "run", "--seeds", str(seeds), "--exit-when-done"]
    cmd += ["--services", SERVICES]
    with log.open("ab") as err:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err)


def stop_orphaned_redis(data_dir: Path) -> None:
    """The embedded redis-server of a killed run outlives it; end it by the PID it recorded."""
    registry = data_dir / "redis" / "crawlstream.rdb.settings"
    if not registry.exists():
        return
    pidfile = Path(json.loads(registry.read_text())["pidfile"])
    if pidfile.exists():
        pid = int(pidfile.read_text().strip() or 0)
        if pid and psutil.pid_exists(pid) and "redis" in psutil.Process(pid).name():
            os.kill(pid, signal.SIGKILL)


def test_crawl_killed_mid_way_completes_after_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    log = tmp_path / "run.log"
    with demo_web() as web:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("# demo web\n" + "\n".join(web.seed_urls()) + "\n")
        resolve_map = tmp_path / "resolve.json"
        resolve_map.write_text(json.dumps(web.resolve_map))
        expected = web.reachable_pages()
        try:
            first = start_run(data_dir, seeds, resolve_map, log)
            deadline = time.monotonic() + 60
            # Kill a third of the way in, once the deduper has persisted its state: a kill before
            # its first Bloom snapshot legitimately starts over (on a fast machine the third is
            # reached in under 2 s), and this test is about resuming.
            snapshots = [data_dir / "dedupe" / f"{p}.bloom" for p in range(4)]
            while (
                len(web.requests()) < len(expected) // 3 or not all(p.exists() for p in snapshots)
            ) and first.poll() is None:
                assert time.monotonic() < deadline, "the first run made no progress: " + log.read_text()[-2000:]
                time.sleep(0.05)
            assert first.poll() is None, "the crawl ended before it could be killed"
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            fetched_before = len([r for r in web.requests() if not r.path.startswith("/robots")])
            assert 0 < fetched_before < len(expected)

            second = start_run(data_dir, seeds, resolve_map, log)
            out, _ = second.communicate(timeout=120)
            assert second.returncode == 0, log.read_text()[-3000:]
        finally:
            for proc in (p for p in (locals().get("first"), locals().get("second")) if p is not None):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            stop_orphaned_redis(data_dir)
        requests = web.requests()

    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["reason"] == "drained"
    counts = Counter(r.url for r in requests if not r.path.startswith("/robots"))
    assert set(counts) == expected  # every page at least once, nothing outside the web's reachable set
    assert summary["results"] >= len(expected)
    # The restart resumed rather than starting over: most pages were fetched once only.
    assert sum(1 for n in counts.values() if n == 1) > len(expected) // 2
