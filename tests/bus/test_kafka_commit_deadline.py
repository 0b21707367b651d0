"""A synchronous commit is bounded (issue 28's soak, seed 4 of session 14: a parquet-sink member
sat 8+ minutes inside librdkafka's synchronous commit after two brokers were killed and
restarted; confluent-kafka-python #1801). The small-scale reproduction: the group coordinator's
broker stops answering (SIGSTOP, a real broker) while a member commits. Unbounded, the commit
blocks for as long as the broker stays stopped (48 s in the first try, forever in the soak); with
``bus.commit_deadline_s`` it raises ``ClientWedged`` at the deadline, the consumer's close does not
wait on the stuck client, and ``crawlstream service`` exits for its supervisor to start a fresh
process, which resumes from the last commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawlstream.bus import KafkaBus, TopicPartition
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.errors import ClientWedged
from crawlstream.runtime import EXIT_CLIENT_WEDGED

pytestmark = pytest.mark.timeout(180)

DEADLINE_S = 3.0


def _consume(consumer, want: int, timeout_s: float = 60.0) -> int:  # type: ignore[no-untyped-def]
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < want and time.monotonic() < deadline:
        got += len(consumer.consume(100, 0.5))
    return got


def test_a_commit_to_a_coordinator_that_does_not_answer_gives_up_at_its_deadline(tmp_path: Path) -> None:
    with LocalKafka(brokers=1, partitions=2, data_dir=tmp_path / "kafka") as kafka:
        bus = KafkaBus(kafka.bootstrap_servers, commit_deadline_s=DEADLINE_S)
        bus.create_topics(["wedge"], 2)
        producer = bus.producer()

        def produce(n: int) -> None:
            for i in range(n):
                producer.produce("wedge", b"x", key=str(i).encode(), partition=i % 2)
            producer.flush()

        produce(20)
        consumer = bus.consumer("g-wedge")
        consumer.subscribe(["wedge"])
        assert _consume(consumer, 20) == 20
        consumer.commit()  # the coordinator is known and answers
        produce(20)
        assert _consume(consumer, 20) == 20  # something new to commit
        [node] = kafka.node_ids
        pid = kafka.pid_of(node)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(ClientWedged, match="commit"):
                consumer.commit()
            took = time.monotonic() - started
            assert DEADLINE_S <= took < DEADLINE_S + 5, took
            started = time.monotonic()
            consumer.close()  # must not wait on the stuck client
            assert time.monotonic() - started < 2
        finally:
            os.kill(pid, signal.SIGCONT)
        producer.close()
        bus.close()


def test_a_commit_from_a_rebalance_callback_returns(tmp_path: Path) -> None:
    """Repetition round 1 of session 15: with the deadline, a commit made from ``on_revoke`` (a
    member joined: an eager rebalance) never returned. confluent-kafka gates a consumer's use to
    one thread: ``poll`` holds the gate while its rebalance callback runs, so a commit on the
    deadline's own thread waited at the gate for a callback that waited for the commit. A call
    made from inside ``poll``'s callbacks now runs on the polling thread itself."""
    with LocalKafka(brokers=1, partitions=2, data_dir=tmp_path / "kafka") as kafka:
        bus = KafkaBus(kafka.bootstrap_servers, commit_deadline_s=DEADLINE_S)
        bus.create_topics(["revoke"], 2)
        producer = bus.producer()
        for i in range(20):
            producer.produce("revoke", b"x", key=str(i).encode(), partition=i % 2)
        producer.flush()
        first = bus.consumer("g-revoke")
        commits: list[float] = []

        def on_revoke(partitions: list[TopicPartition]) -> None:
            started = time.monotonic()
            first.commit()  # what ServiceLoop does: commit what it finished while still owned
            commits.append(time.monotonic() - started)

        first.subscribe(["revoke"], on_revoke=on_revoke)
        assert _consume(first, 20) == 20
        second = bus.consumer("g-revoke")
        second.subscribe(["revoke"])
        deadline = time.monotonic() + 60
        while not commits and time.monotonic() < deadline:  # the join revokes the first one's partitions
            first.consume(10, 0.2)
            second.consume(10, 0.2)
        assert commits and commits[0] < DEADLINE_S, commits
        assert first.committed([TopicPartition("revoke", 0), TopicPartition("revoke", 1)]) == {
            TopicPartition("revoke", 0): 10, TopicPartition("revoke", 1): 10}
        for c in (first, second):
            c.close()
        producer.close()
        bus.close()


_WEDGED_SERVICE = """
import sys
from crawlstream.errors import ClientWedged
from crawlstream.runtime import run_standalone
from crawlstream.settings import load

class Wedged:
    def run(self):
        raise ClientWedged("commit of {t[0]: 5} did not return in 3 s")
    def stop(self):
        pass
    def close(self):
        pass

sys.exit(run_standalone(load({"CRAWLSTREAM_DATA_DIR": sys.argv[1]}), lambda host: Wedged()))
"""


def test_a_service_whose_client_is_wedged_exits_for_its_supervisor(tmp_path: Path) -> None:
    """Not restarted in-process as an outage is: the stuck client cannot be closed, only dropped
    with the process. The exit code says why (a supervisor or a person reading ``kubectl``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    proc = subprocess.run([sys.executable, "-c", _WEDGED_SERVICE, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == EXIT_CLIENT_WEDGED, proc.stderr[-2000:]
    assert "did not return in 3 s" in proc.stderr
    assert "exiting so that a fresh process" in proc.stderr
    assert "most recent call first" in proc.stderr  # every thread's stack, for the diagnosis
