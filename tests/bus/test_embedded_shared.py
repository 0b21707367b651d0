"""The embedded log shared by several processes (``crawlstream run --processes N``, ADR 025).

Two ``EmbeddedBus`` instances on one directory behave as two processes do: each has its own
file descriptors, so the ``flock`` append lock and the process lock separate them exactly as
they separate processes. One test uses real processes and kill -9.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus, Message, TopicPartition
from crawlstream.bus._embedded import read_log_state
from crawlstream.errors import BusUnavailable

PARTITIONS = 4


def member(root: Path, index: int, count: int, **kw: object) -> EmbeddedBus:
    return EmbeddedBus(root, default_partitions=PARTITIONS, fsync="batch", member=(index, count), **kw)  # type: ignore[arg-type]


def consume_all(bus: EmbeddedBus, topic: str, group: str, want: int, timeout_s: float = 20.0) -> list[Message]:
    consumer = bus.consumer(group)
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.consume(500, 0.05))
    consumer.commit()
    consumer.close()
    return got


def test_two_members_append_concurrently_and_split_the_partitions_of_a_group(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    first = member(root, 0, 1, first=True)  # the run's parent: it produces too
    a, b = member(root, 0, 2), member(root, 1, 2)
    first.create_topics(["t"], PARTITIONS)
    per_writer = 3000

    def write(bus: EmbeddedBus, name: str) -> None:
        producer = bus.producer()
        for i in range(per_writer):
            producer.produce("t", f"{name}-{i}".encode(), partition=i % PARTITIONS)
            if i % 50 == 49:
                producer.flush()
        producer.close()

    writers = [threading.Thread(target=write, args=(bus, name)) for bus, name in ((first, "p"), (a, "a"), (b, "b"))]
    results: dict[str, list[Message]] = {}

    def read(bus: EmbeddedBus, name: str, want: int) -> None:
        results[name] = consume_all(bus, "t", "g", want)

    # a reads partitions 0 and 2, b 1 and 3: half of everything each, while the writes go on
    readers = [threading.Thread(target=read, args=(bus, n, 3 * per_writer // 2)) for bus, n in ((a, "a"), (b, "b"))]
    for t in (*writers, *readers):
        t.start()
    for t in (*writers, *readers):
        t.join(60)
    assert {m.partition for m in results["a"]} == {0, 2} and {m.partition for m in results["b"]} == {1, 3}
    values = Counter(m.value for name in ("a", "b") for m in results[name])
    assert len(values) == 3 * per_writer and set(values.values()) == {1}  # every message once, none torn
    for p in range(PARTITIONS):  # offsets of a partition are dense, whoever appended them
        offsets = sorted(m.offset for name in ("a", "b") for m in results[name] if m.partition == p)
        assert offsets == list(range(3 * per_writer // PARTITIONS))
    # each wrote only its own partitions' commits; a status reader sees all of them, lock-free
    state = read_log_state(root)
    assert state.end_offsets["t"] == [3 * per_writer // PARTITIONS] * PARTITIONS
    assert state.committed["g"] == {"t": {p: 3 * per_writer // PARTITIONS for p in range(PARTITIONS)}}
    assert sorted(p.name for p in (root / "groups" / "g").iterdir()) == ["offsets.0-of-2.json", "offsets.1-of-2.json"]
    for bus in (first, a, b):
        bus.close()
    # a single-process open afterwards resumes the group where the members left it
    with EmbeddedBus(root, default_partitions=PARTITIONS) as single:
        consumer = single.consumer("g")
        consumer.subscribe(["t"])
        assert consumer.consume(100, 0.3) == []
        assert single.end_offsets("t") == state.end_offsets["t"]
        consumer.close()


def test_the_newest_commit_of_a_partition_wins_whichever_file_holds_it(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    with EmbeddedBus(root, default_partitions=2) as single:
        producer = single.producer()
        for i in range(10):
            producer.produce("t", b"x", partition=i % 2)
        producer.close()
        c = single.consumer("g")
        c.subscribe(["t"])
        got = c.consume(3, 1.0)
        assert got
        c.commit()
        c.close()
    time.sleep(0.02)  # a later run with 2 members moves partition 1 on
    with member(root, 0, 1, first=True), member(root, 1, 2) as m1:
        c = m1.consumer("g")
        c.subscribe(["t"])
        rest = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(rest) < 5 - sum(1 for m in got if m.partition == 1):
            rest.extend(c.consume(100, 0.05))
        c.commit()
        c.close()
    with EmbeddedBus(root) as single:
        committed = single.consumer("g").committed([TopicPartition("t", 0), TopicPartition("t", 1)])
    assert committed[TopicPartition("t", 1)] == 5  # from offsets.1-of-2.json, the newer file
    assert committed[TopicPartition("t", 0)] == sum(1 for m in got if m.partition == 0)  # from offsets.json


def test_exclusive_and_shared_opens_exclude_each_other(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    with member(root, 0, 1, first=True), member(root, 0, 2):
        with pytest.raises(BusUnavailable, match="already open in another process"):
            EmbeddedBus(root)
        with pytest.raises(BusUnavailable, match="already open"):
            member(root, 0, 1, first=True)  # a second run's parent waits for the first run to end
    with EmbeddedBus(root), pytest.raises(BusUnavailable, match="already open"):
        member(root, 1, 2)


def test_a_log_of_a_newer_format_is_refused_with_a_message(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    member(root, 0, 1, first=True).close()
    assert json.loads((root / "format.json").read_text()) == {"version": 2}
    (root / "format.json").write_text('{"version": 3}')
    with pytest.raises(BusUnavailable, match="format version 3, newer than this crawlstream reads"):
        EmbeddedBus(root)


_WRITER = """
import sys
from pathlib import Path
from crawlstream.bus import EmbeddedBus
bus = EmbeddedBus(Path(sys.argv[1]), default_partitions=2, member=(int(sys.argv[2]), 2))
producer = bus.producer()
i = 0
while True:
    producer.produce("t", (sys.argv[2] + "-" + str(i)).encode() * 50, partition=i % 2)
    i += 1
    if i % 20 == 0:
        producer.flush()
        print(i, flush=True)
"""


def test_kill_9_of_one_writer_loses_nothing_acknowledged_and_the_other_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    parent = member(root, 0, 1, first=True)
    parent.create_topics(["t"], 2)
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(root), str(i)], stdout=subprocess.PIPE, text=True)
        for i in (0, 1)
    ]
    try:
        acked = []
        for proc in procs:
            assert proc.stdout is not None
            for _ in range(30):  # 600 messages acknowledged by each
                line = proc.stdout.readline()
            acked.append(int(line))
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        time.sleep(0.3)  # the survivor keeps appending after the kill
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(10)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    parent.close()
    with EmbeddedBus(root) as single:  # the next open recovers under the lock
        got = consume_all(single, "t", "r", sum(single.end_offsets("t")), timeout_s=60.0)
    by_writer = Counter(m.value.split(b"-", 1)[0] for m in got)
    assert by_writer[b"0"] >= acked[0] and by_writer[b"1"] > acked[1]
    for p in (0, 1):
        offsets = [m.offset for m in got if m.partition == p]
        assert offsets == list(range(len(offsets)))  # dense: no torn or interleaved record
