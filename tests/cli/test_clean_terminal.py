"""`crawlstream demo` (what `make run` runs) keeps the terminal clean: a progress display, a short
summary and the API banner; the log lines go to a file in the data dir (issue 14)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from crawlstream.devtools.localproc import free_port

MAX_LINES_BEFORE_API = 25


def test_demo_prints_a_few_lines_before_the_api_is_up_and_logs_to_a_file(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    env = {k: v for k, v in os.environ.items() if k != "CRAWLSTREAM_LOG_LEVEL"}
    env.update(
        CRAWLSTREAM_CRAWL_MAX_PAGES="12",  # the display and the line count, not a whole crawl
        CRAWLSTREAM_CRAWL_PROGRESS_INTERVAL_S="1",
        CRAWLSTREAM_SCHEDULER_MIN_DELAY_S="0.05",
    )
    cmd = [sys.executable, "-m", "crawlstream", "demo", "--domains", "4", "--pages-per-domain", "3"]
    cmd += ["--data-dir", str(data_dir), "--api-port", str(port)]
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + 90
        while "query API on" not in err_path.read_text():
            assert proc.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.1)
        while True:  # up: it answers on loopback
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=2) as resp:
                    assert resp.status == 200
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        stderr = err_path.read_text()
        stdout = out_path.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    before_api = stderr[: stderr.index("query API on")].splitlines() + stdout.splitlines()
    assert len(before_api) <= MAX_LINES_BEFORE_API, "\n".join(before_api)
    log_file = data_dir / "logs" / "crawlstream.log"
    assert f"log lines go to {log_file}" in stderr  # the path, printed once
    assert stderr.count("log lines go to") == 1
    assert " INFO " not in stderr and " WARNING " not in stderr  # no log line on the terminal
    assert "embedded bus open" in log_file.read_text()  # ... they are in the file
    progress = [line for line in stderr.splitlines() if re.match(r"\d+:\d\d:\d\d pages ", line)]
    assert progress and all("queued" in line and "errors" in line for line in progress)
    assert "crawl max_pages after" in stderr  # the short human summary
    assert proc.returncode in (0, 130, -signal.SIGINT)


def test_an_explicit_log_level_keeps_the_log_lines_on_the_terminal(tmp_path: Path) -> None:
    seeds = tmp_path / "none.txt"
    seeds.write_text("# nothing\n")
    proc = subprocess.run(
        [sys.executable, "-m", "crawlstream", "run", "--data-dir", str(tmp_path / "d"), "--log-level", "INFO",
         "--exit-when-done"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2  # nothing to crawl: a usage error, after the bus opened and logged
    assert "embedded bus open" in proc.stderr and "log lines go to" not in proc.stderr
    assert not (tmp_path / "d" / "logs").exists()


def test_ingest_leaves_only_its_progress_and_summary_on_the_terminal(tmp_path: Path) -> None:
    """Issue 24: the embedded bus's INFO lines (open, topics created, closed) and the invalid-rows
    WARNING the progress line already counts went to the terminal; they go to the log file."""
    urls = tmp_path / "urls.txt"
    urls.write_text("https://example.com/a\nhttps://example.org/b\nnot a url\n")
    data_dir = tmp_path / "d"
    env = {k: v for k, v in os.environ.items() if k != "CRAWLSTREAM_LOG_LEVEL"}
    proc = subprocess.run(
        [sys.executable, "-m", "crawlstream", "ingest", str(urls), "--dataset-id", "3", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["valid"] == 2
    log_file = data_dir / "logs" / "crawlstream.log"
    lines = proc.stderr.splitlines()
    assert lines[0] == f"crawlstream ingest: log lines go to {log_file} (--log-level LEVEL shows them here)"
    assert lines[1:] and all(line.startswith("ingest dataset 3: 3 rows, ") for line in lines[1:]), lines
    assert not re.search(r" (DEBUG|INFO|WARNING|ERROR) ", proc.stderr)
    logged = log_file.read_text()
    assert "embedded bus at" in logged and "closed" in logged and "invalid rows" in logged
