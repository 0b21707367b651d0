"""``crawlstream demo-web`` serves until signalled and writes what a crawl needs."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_demo_web_command_serves_writes_seeds_and_map_and_stops_on_sigterm(tmp_path: Path) -> None:
    rmap, seeds = tmp_path / "map.json", tmp_path / "seeds.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crawlstream",
            "demo-web",
            "--domains",
            "5",
            "--resolve-map-out",
            str(rmap),
            "--seeds-out",
            str(seeds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "CRAWLSTREAM_LOG_LEVEL": "WARNING"},
    )
    try:
        deadline = time.monotonic() + 20
        while (
            not (rmap.exists() and seeds.exists() and rmap.read_text().endswith("}\n")) and time.monotonic() < deadline
        ):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        mapping = json.loads(rmap.read_text())
        urls = seeds.read_text().split()
        assert len(urls) == 5 and urls[0] == "http://cs0000-demo.com/"
        ip, port = mapping["cs0000-demo.com"]
        conn = http.client.HTTPConnection(ip, port, timeout=5)
        conn.request("GET", "/", headers={"Host": "cs0000-demo.com"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
