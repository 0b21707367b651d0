"""SIGUSR1 makes a service process print every thread's stack into its log and go on: how a
stuck member shows where it is stuck (the deployment sends it before a SIGKILL, and when a wait
times out)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from crawlstream.devtools.deployment import ServiceProcess


def test_sigusr1_prints_every_threads_stack_and_the_service_goes_on(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")}
    env.update(CRAWLSTREAM_DATA_DIR=str(tmp_path / "data"), CRAWLSTREAM_BUS_FSYNC="never")
    member = ServiceProcess.start("deduper", env, tmp_path / "deduper.log")
    try:
        deadline = time.monotonic() + 60
        while "consuming" not in member.log.read_text(errors="replace"):
            assert member.running and time.monotonic() < deadline, member.tail()
            time.sleep(0.2)
        member.dump_stacks()
        log = member.log.read_text(errors="replace")
        assert "most recent call first" in log, member.tail()
        assert "crawlstream/runtime/_loop.py" in log, "the main thread's loop is among the stacks"
        assert member.running
    finally:
        member.stop()
    assert member.returncode == 0, member.tail()
