"""``LocalKafka`` and ``crawlstream local-kafka``: a real KRaft cluster that starts, answers,
keeps its data across restarts when given a directory, and stops every JVM it started."""

from __future__ import annotations

import concurrent.futures
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from crawlstream.bus import KafkaBus
from crawlstream.devtools.localkafka import LocalKafka, find_kafka_libs
from crawlstream.errors import ConfigError
from crawlstream.topics import ALL_TOPICS, dlq_topic

pytestmark = pytest.mark.kafka


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours still answers kill(0); it has exited all the same.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def _wait_gone(pid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _alive(pid)


def _read_line(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert process.stdout is not None
    # poll, not select: late in a full run the pipe's fd number can exceed select's 1024 limit
    poller = select.poll()
    poller.register(process.stdout, select.POLLIN)
    ready = poller.poll(timeout_s * 1000)
    return process.stdout.readline().decode().strip() if ready else ""


def test_the_command_prints_the_bootstrap_line_creates_the_topics_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAWLSTREAM_", "KAFKA_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "crawlstream", "local-kafka", "--partitions", "16", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        line = _read_line(process, 120)
        assert line.startswith("KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:"), line or process.stderr.read().decode()
        bootstrap = line.split("=", 1)[1]
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        expected = [*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)]
        assert {t: len(metadata.topics[t].partitions) for t in expected} == dict.fromkeys(expected, 16)
        jvms = [int(p) for p in subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True).stdout.split()]
        assert jvms, "the broker runs as a child process"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert all(_wait_gone(pid) for pid in jvms), "every broker JVM stopped"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert (tmp_path / "kafka" / "cluster.json").exists(), "--data-dir keeps the cluster"


def test_a_cluster_kept_in_a_directory_keeps_its_topics_and_messages_across_restarts(tmp_path: Path) -> None:
    with LocalKafka(brokers=1, data_dir=tmp_path) as first:
        bus = KafkaBus(first.bootstrap_servers)
        bus.create_topics(["kept"], 2)
        producer = bus.producer()
        producer.produce("kept", b"survives a restart", partition=1)
        producer.close()
        bus.close()
        address = first.bootstrap_servers
    with LocalKafka(brokers=1, data_dir=tmp_path) as second:
        assert second.bootstrap_servers == address, "the same port, where clients left it"
        bus = KafkaBus(second.bootstrap_servers)
        try:
            assert bus.partition_count("kept") == 2
            assert bus.end_offsets("kept") == [0, 1]
        finally:
            bus.close()


def test_a_directory_of_another_cluster_size_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text('{"brokers": 3, "cluster_id": "x", "ports": []}')
    with pytest.raises(ConfigError, match="3-broker cluster"):
        LocalKafka(brokers=1, data_dir=tmp_path).start()


def test_bad_partition_counts_are_refused_before_anything_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "crawlstream", "local-kafka", "--partitions", "12"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "divisor of 128" in result.stderr.decode()


def test_missing_jars_name_the_make_target(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="make kafka"):
        find_kafka_libs(tmp_path)
    assert find_kafka_libs().name == "libs"


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage tool reads a leading "-" as an option (1 format in 64 failed that way)."""
    import uuid

    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 of 0xf8... starts with "-"
    draws = iter([dash_first, uuid.UUID(int=1)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert LocalKafka._random_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_a_restart_waits_out_another_broker_killed_while_it_waits() -> None:
    """The soak's overlapping faults: broker 2 killed while broker 3's restart waits for it to
    answer. The restart is done when broker 3 is back, not failed because broker 2 is gone."""
    # the pool outlives the restart: a JVM dies with the thread that started it (PR_SET_PDEATHSIG)
    with LocalKafka(brokers=3) as kafka, concurrent.futures.ThreadPoolExecutor(1) as pool:
        kafka.kill(3)
        restarting = pool.submit(kafka.restart, 3)
        time.sleep(0.5)  # broker 3's JVM is still starting: no metadata answer for seconds
        assert not restarting.done()
        kafka.kill(2)
        restarting.result(timeout=kafka.start_timeout_s)
        assert kafka.pid_of(3) is not None and kafka.pid_of(2) is None
        kafka.restart(2)


def _jvm(pid: int) -> tuple[list[str], int]:
    """A JVM's command line and its RSS in bytes, as /proc shows them."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv, int(psutil.Process(pid).memory_info().rss)


def _heap_flags(argv: list[str]) -> tuple[str, str, bool]:
    """The -Xms and -Xmx in force (HotSpot takes the last of each) and whether the heap is pre-touched."""
    return ([a for a in argv if a.startswith("-Xms")][-1], [a for a in argv if a.startswith("-Xmx")][-1],
            "-XX:+AlwaysPreTouch" in argv)


def test_a_resident_heap_broker_holds_its_whole_heap_from_launch(kafka_cluster: LocalKafka) -> None:
    """The soak's brokers (ADR 034, "Session 21"): -Xms = -Xmx and pre-touched, so the JVM's RSS
    is past its heap at launch and a memory curve shows only what is not heap. The test clusters
    keep the small initial heap (RSS ~300 MB a broker, not ~670)."""
    with LocalKafka(brokers=1, resident_heap=True) as kafka:
        pid = kafka.pid_of(1)
        assert pid is not None
        argv, rss = _jvm(pid)
        assert _heap_flags(argv) == ("-Xms512m", "-Xmx512m", True)
        assert rss > 512 << 20, f"RSS {rss >> 20} MiB: the 512 MiB heap is not resident"
    default_pid = kafka_cluster.pid_of(kafka_cluster.node_ids[0])
    assert default_pid is not None
    assert _heap_flags(_jvm(default_pid)[0]) == ("-Xms128m", "-Xmx512m", False)
