"""``crawlstream service query-api`` in its own process: settings from the environment,
ACL from the tokens file, answers over 127.0.0.1, clean exit on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from crawlstream.devtools.localproc import free_port

REPO = Path(__file__).resolve().parents[2]


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_query_api_service_serves_the_index_with_acl_and_stops_on_sigterm(lake_root: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"svc-token": [1]}))
    port = free_port()
    env = {
        **os.environ,
        "CRAWLSTREAM_DATA_DIR": str(lake_root),
        "CRAWLSTREAM_API_PORT": str(port),
        "CRAWLSTREAM_API_TOKENS_FILE": str(tokens),
        "CRAWLSTREAM_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlstream", "service", "query-api"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            try:
                status, health = _get(base + "/healthz")
                break
            except OSError:
                assert time.monotonic() < deadline, "query-api did not listen within 30 s"
                time.sleep(0.1)
        assert status == 200 and health["status"] == "ok"
        assert _get(base + "/v1/domain/example.co.uk")[0] == 401
        status, body = _get(base + "/v1/domain/www.example.co.uk", "svc-token")
        assert status == 200 and [d["dataset_id"] for d in body["datasets"]] == [1]  # type: ignore[index]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            raise
    assert code == 0
