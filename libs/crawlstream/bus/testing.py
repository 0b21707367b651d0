"""Test support for the Kafka backend: librdkafka's built-in mock cluster, on loopback.

No Kafka broker can be installed on the development machines, so tests speak the real
Kafka protocol to librdkafka's mock cluster (``test.mock.num.brokers``). Its behaviour,
which tests must account for:

* It lives inside the librdkafka client that created it and dies with it. By default
  ``MockKafkaCluster`` hosts it in a dedicated child process, so tests can kill their client
  processes (kill -9) freely; the child exits when its stdin closes (the test process
  ended, even by a crash) or after ``max_lifetime_s``, and is killed by PID on exit.
* It rejects CreateTopics (no controller). Topics are auto-created on first use (the
  first metadata request or produce naming them) with ``AUTO_CREATED_PARTITIONS`` (4)
  partitions, whatever partition count ``create_topics`` asked for.
* A new consumer group waits ~3 s (the mock's initial rebalance delay) before its first
  assignment, so consumer tests take seconds, not milliseconds.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import tempfile
from types import TracebackType
from typing import Any, Final

import confluent_kafka

from crawlstream.errors import BusUnavailable

__all__ = ["AUTO_CREATED_PARTITIONS", "MockKafkaCluster"]

logger = logging.getLogger(__name__)

AUTO_CREATED_PARTITIONS: Final = 4

# Runs in the child: create the cluster, print its bootstrap address, live until stdin
# closes or the lifetime bound passes. Kept tiny and dependency-free beyond confluent-kafka.
_HOST_SCRIPT = """
import sys, threading, time, os
import confluent_kafka
num_brokers, max_lifetime_s = int(sys.argv[1]), float(sys.argv[2])
client = confluent_kafka.Producer({"test.mock.num.brokers": num_brokers, "bootstrap.servers": ""})
metadata = client.list_topics(timeout=10)
print(",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values()), flush=True)
def _watch_stdin():
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)
threading.Thread(target=_watch_stdin, daemon=True).start()
time.sleep(max_lifetime_s)
os._exit(0)
"""


class MockKafkaCluster:
    """``with MockKafkaCluster() as cluster: KafkaBus(cluster.bootstrap_servers)``.

    ``in_process=True`` hosts the cluster in this process instead (starts faster, but it
    dies with this process, so it cannot outlive a client this process runs).
    ``stop()`` ends it early: clients then see an unreachable cluster, which is how tests
    exercise ``BusUnavailable``.
    """

    def __init__(
        self,
        *,
        num_brokers: int = 1,
        in_process: bool = False,
        start_timeout_s: float = 20.0,
        max_lifetime_s: float = 1800.0,
    ) -> None:
        self.num_brokers = num_brokers
        self.in_process = in_process
        self.start_timeout_s = start_timeout_s
        self.max_lifetime_s = max_lifetime_s
        self.bootstrap_servers = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    @property
    def pid(self) -> int | None:
        """PID of the hosting child process (None when in-process or stopped)."""
        return self._process.pid if self._process is not None else None

    def start(self) -> MockKafkaCluster:
        if self.in_process:
            self._client = confluent_kafka.Producer(
                {"test.mock.num.brokers": self.num_brokers, "bootstrap.servers": ""}
            )
            metadata = self._client.list_topics(timeout=self.start_timeout_s)
            self.bootstrap_servers = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
        else:
            self._start_process()
        logger.info("mock Kafka cluster at %s (pid %s)", self.bootstrap_servers, self.pid)
        return self

    def _start_process(self) -> None:
        with tempfile.TemporaryFile() as stderr:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _HOST_SCRIPT, str(self.num_brokers), str(self.max_lifetime_s)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
            assert self._process.stdout is not None
            ready, _, _ = select.select([self._process.stdout], [], [], self.start_timeout_s)
            line = self._process.stdout.readline().decode().strip() if ready else ""
            if not line:
                self.stop()
                stderr.seek(0)
                raise BusUnavailable(
                    f"the mock Kafka cluster did not start within {self.start_timeout_s}s; "
                    f"its stderr: {stderr.read()[-2000:].decode(errors='replace')!r}"
                )
        self.bootstrap_servers = line

    def stop(self) -> None:
        """Stop the cluster (by PID, bounded). Safe to call twice."""
        self._client = None
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, 9)
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> MockKafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
