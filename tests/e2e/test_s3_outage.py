"""Issue 26's outage must-show: the S3 server stopped for 20 s while ``crawlstream serve``
answers and the index-compactor service builds on its interval. During the outage every request
is answered fast (a cached answer, or a 503: never a hang), the compactor's ticks fail and it
stays up; when the server returns both recover by themselves, and the dataset ingested just
before the outage is answered: nothing lost.

Real parts: versitygw (a private instance, stopped and restarted on its port with its data),
the two services as their own processes, HTTP on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.cli import main as cli_main
from crawlstream.devtools.localproc import free_port
from crawlstream.devtools.locals3 import LocalS3

OUTAGE_S = 20.0
FAST_S = 4.0  # the longest an answer may take during the outage (the reader's S3 deadline is 2 s)
LAKE = "s3://crawlstream/outage"


def _get(url: str) -> tuple[int, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.monotonic() - started


def _write_dataset(path: Path, domains: list[str]) -> Path:
    path.write_text("".join(f"https://www.{d}/page/{i}\n" for d in domains for i in range(5)))
    return path


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[LocalS3]:
    with LocalS3(data_dir=tmp_path / "s3") as server:
        yield server


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return subprocess.Popen([sys.executable, "-m", "crawlstream", *args], env=env, stdout=subprocess.DEVNULL,
                                stderr=err)


def test_a_20s_s3_outage_while_serving_and_building_fails_fast_and_recovers_without_loss(
    tmp_path: Path, s3: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_")}
    env.update(s3.env, CRAWLSTREAM_DATA_DIR=str(tmp_path / "data"), CRAWLSTREAM_LAKE_URI=LAKE,
               CRAWLSTREAM_S3_DEADLINE_S="2", CRAWLSTREAM_S3_REQUEST_TIMEOUT_S="1",
               CRAWLSTREAM_INDEX_BUILD_INTERVAL_S="1", CRAWLSTREAM_INDEX_MANIFEST_POLL_S="0.5",
               CRAWLSTREAM_API_PORT=str(port), CRAWLSTREAM_LOG_LEVEL="INFO")
    for key, value in env.items():
        if key.startswith(("CRAWLSTREAM_", "AWS_")):
            monkeypatch.setenv(key, value)
    first = [f"first{i}.example" for i in range(40)]
    second = [f"second{i}.example" for i in range(10)]
    assert cli_main(["ingest", str(_write_dataset(tmp_path / "one.txt", first)), "--dataset-id", "1"]) == 0
    assert cli_main(["index", "build"]) == 0
    api = _start(["serve"], env, tmp_path / "api.log")
    compactor = _start(["service", "index-compactor"], env, tmp_path / "compactor.log")
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert api.poll() is None, (tmp_path / "api.log").read_text()[-2000:]
            try:
                if _get(base + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the API did not listen in 30 s"
            time.sleep(0.1)
        cached = first[:10]
        for d in cached:  # read once: their postings blocks are in the API's memory now
            assert _get(f"{base}/v1/domain/www.{d}")[0] == 200
        assert cli_main(["ingest", str(_write_dataset(tmp_path / "two.txt", second)), "--dataset-id", "2"]) == 0

        s3.stop(keep_data=True)
        down_at = time.monotonic()
        answers: list[tuple[str, int, float]] = []
        while time.monotonic() - down_at < OUTAGE_S:
            for d in [*cached[:3], *first[20:23]]:
                status, took = _get(f"{base}/v1/domain/www.{d}")
                answers.append((d, status, took))
            assert api.poll() is None and compactor.poll() is None, "a service exited during the outage"
            time.sleep(0.2)
        s3.restart()
        back_at = time.monotonic()

        assert answers and max(took for _, _, took in answers) < FAST_S, sorted(a[2] for a in answers)[-5:]
        assert {status for _, status, _ in answers} <= {200, 503}
        assert all(status == 200 for d, status, _ in answers if d in cached[:3])  # from memory
        assert any(status == 503 for d, status, _ in answers if d in first[20:23])

        # both recover by themselves: every domain answered, the second dataset indexed
        deadline = back_at + 30
        while True:
            statuses = [_get(f"{base}/v1/domain/www.{d}")[0] for d in (*first, *second)]
            if set(statuses) == {200}:
                break
            assert time.monotonic() < deadline, f"not recovered 30 s after the outage: {statuses}"
            time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/v1/domain/www.{second[0]}") as resp:
            assert [d["dataset_id"] for d in json.loads(resp.read())["datasets"]] == [2]
        log = (tmp_path / "compactor.log").read_text(errors="replace")
        assert "tick failed" in log or "cannot reach the lease" in log, log[-2000:]
        assert api.poll() is None and compactor.poll() is None
    finally:
        for proc in (api, compactor):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (api, compactor):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert api.returncode == 0 and compactor.returncode == 0
