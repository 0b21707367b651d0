"""Two index compactors on one data dir (ADR 028): one builds, the other stands by and takes over
when the first dies (SIGKILL) or stops (SIGTERM); two never publish at once.

Real parts: two ``crawlstream service index-compactor`` processes, the lake and index on disk
(a flock elects the active one) or on a real S3 server (a lease object, ADR 029); each version's
manifest entry names the process that built it (``built_by``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.index import read_manifest
from crawlstream.lake import LakeWriter, as_store
from crawlstream.objectstore import ObjectStore
from crawlstream.urls import canonicalize

pytestmark = pytest.mark.timeout(120)

INTERVAL_S = 0.3
POLL_S = 0.2
TAKEOVER_LIMIT_S = 15.0  # the bound is POLL_S plus one build; loose for a loaded machine


class Compactors:
    """The processes, and every version seen in the manifest with who built it."""

    def __init__(self, data_dir: Path, *, lake: ObjectStore | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.lake = lake if lake is not None else as_store(data_dir)
        self.env = env or {}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen: dict[str, str] = {}  # version -> built_by
        self.files = 0

    def start(self) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "CRAWLSTREAM_DATA_DIR": str(self.data_dir),
            "CRAWLSTREAM_INDEX_BUILD_INTERVAL_S": str(INTERVAL_S),
            "CRAWLSTREAM_INDEX_STANDBY_POLL_S": str(POLL_S),
            "CRAWLSTREAM_METRICS_PORT": "0",
            "CRAWLSTREAM_LOG_LEVEL": "INFO",
            **self.env,
        }
        log = open(self.data_dir.parent / f"compactor-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-m", "crawlstream", "service", "index-compactor"],
                                env=env, stdout=log, stderr=log)
        self.procs.append(proc)
        return proc

    def write_file(self) -> None:
        writer = LakeWriter(self.lake)
        for i in range(5):
            writer.add_canonical(3, canonicalize(f"https://site{self.files}.example.com/p/{i}"))
        writer.flush()
        self.files += 1

    def observe(self) -> None:
        manifest = read_manifest(self.lake)
        for info in manifest.versions if manifest else ():
            self.seen.setdefault(info.version, str(info.stats.get("built_by", "")))

    def wait_for_version_by(self, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
        """Seconds until a version built by ``proc`` appears."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            self.observe()
            if any(by.endswith(f":{proc.pid}") for by in self.seen.values()):
                return time.monotonic() - started
            assert proc.poll() is None, f"compactor {proc.pid} exited with {proc.returncode}"
            time.sleep(0.05)
        raise AssertionError(f"no version built by {proc.pid} within {timeout_s} s: {self.seen}")

    def builders(self) -> set[str]:
        return {by.rsplit(":", 1)[-1] for by in self.seen.values()}

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(params=["local", "s3"])
def compactors(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Compactors]:
    if request.param == "local":
        group = Compactors(tmp_path / "data")
    else:
        from tests.index._s3 import s3_store

        server, prefix = request.getfixturevalue("s3_server"), request.getfixturevalue("s3_prefix")
        group = Compactors(tmp_path / "data", lake=s3_store(server, prefix),
                           env={**server.env, "CRAWLSTREAM_LAKE_URI": prefix, "CRAWLSTREAM_INDEX_LEASE_TTL_S": "2"})
    group.data_dir.mkdir()
    try:
        yield group
    finally:
        group.stop_all()


def _both_alive_one_builds(group: Compactors) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    group.write_file()
    first = group.start()
    group.wait_for_version_by(first, 30)
    second = group.start()
    log_file = group.data_dir.parent / "compactor-1.log"
    started = time.monotonic()  # its start-up (imports) takes seconds on a loaded machine
    while "standing by" not in log_file.read_text():
        assert time.monotonic() - started < 60 and second.poll() is None, log_file.read_text()
        time.sleep(0.1)
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:  # new lake files keep coming; only the active one builds
        group.write_file()
        time.sleep(INTERVAL_S)
        group.observe()
        assert second.poll() is None
    assert group.builders() == {str(first.pid)}, group.seen
    assert len(group.seen) >= 3, "the active compactor kept building"
    return first, second


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_the_standby_takes_over_within_the_bound_and_never_builds_beside_the_active(
    compactors: Compactors, how: signal.Signals
) -> None:
    first, second = _both_alive_one_builds(compactors)
    first.send_signal(how)
    first.wait(timeout=30)
    compactors.write_file()
    took = compactors.wait_for_version_by(second, TAKEOVER_LIMIT_S)
    print(f"takeover after {how.name}: a version by the standby {took:.2f} s later")
    assert compactors.builders() == {str(first.pid), str(second.pid)}
    # every version after the first one the standby built is the standby's
    order = sorted(compactors.seen)
    by_second = [v for v in order if compactors.seen[v].endswith(f":{second.pid}")]
    assert all(compactors.seen[v].endswith(f":{second.pid}") for v in order if v > by_second[0])
