"""What only the embedded log promises: files on disk that survive crashes and corruption.

The contract shared with Kafka is in test_contract.py; here are the on-disk guarantees:
kill -9 loses nothing acknowledged, a torn tail is cut off on open, mid-log corruption is
reported (ChecksumMismatch) and never served, offsets survive restarts, one process per log.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus, Message, TopicPartition
from crawlstream.bus._embedded_records import decode_records, encode_records
from crawlstream.errors import BusUnavailable, ChecksumMismatch, ConfigError

REPO = Path(__file__).resolve().parents[2]
RECORD_OVERHEAD = 34  # length, crc, offset, timestamp, key_len, value_len, header_count


def drain(bus: EmbeddedBus, topic: str, group: str = "reader", timeout_s: float = 10.0) -> list[Message]:
    """Every message of ``topic`` from the beginning (a fresh group), in partition order."""
    consumer = bus.consumer(group)
    consumer.subscribe([topic])
    expected = sum(bus.end_offsets(topic))
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.consume(10_000, 0.2))
    consumer.close()
    return got


def segment_path(root: Path, topic: str, partition: int = 0, base: int = 0) -> Path:
    return root / "topics" / topic / str(partition) / f"{base:020d}.log"


def value_for(partition: int, seq: int) -> bytes:
    """A value whose bytes prove their own integrity (size and filler depend on ``seq``)."""
    return f"{partition}:{seq}:".encode() + bytes([seq % 251]) * (50 + (seq * 7919) % 3000)


_WRITER = """
import sys, time
from pathlib import Path
from crawlstream.bus import EmbeddedBus
sys.path.insert(0, sys.argv[2])
from tests.bus.test_embedded_log import value_for
bus = EmbeddedBus(Path(sys.argv[1]), default_partitions=2)
producer = bus.producer()
seq = [0, 0]
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    for _ in range(40):
        p = seq[0] % 2 if seq[0] == seq[1] else (0 if seq[0] < seq[1] else 1)
        producer.produce("t", value_for(p, seq[p]), partition=p, key=b"k")
        seq[p] += 1
    producer.flush()
    print(seq[0], seq[1], flush=True)
"""


def test_kill_9_loses_no_acknowledged_message_and_returns_no_torn_record(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(root), str(REPO)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "libs"), str(REPO)])},
    )
    acknowledged = (0, 0)
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 30
        lines = 0
        while lines < 25 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acknowledged = tuple(int(x) for x in line.split())  # type: ignore[assignment]
            lines += 1
    finally:
        os.kill(child.pid, signal.SIGKILL)  # mid-way through its next batch
        _, stderr = child.communicate(timeout=10)
    assert lines == 25, f"writer produced {lines} acknowledgements; stderr: {stderr.decode()[-2000:]}"

    with EmbeddedBus(root) as bus:
        got = drain(bus, "t")
        by_partition: dict[int, list[Message]] = defaultdict(list)
        for message in got:
            by_partition[message.partition].append(message)
        for p in (0, 1):
            values = [m.value for m in by_partition[p]]
            assert len(values) >= acknowledged[p]
            assert values == [value_for(p, i) for i in range(len(values))]
            assert [m.offset for m in by_partition[p]] == list(range(len(values)))
        # The log goes on after the recovered tail.
        producer = bus.producer()
        ends = bus.end_offsets("t")
        producer.produce("t", b"after the crash", partition=0)
        producer.flush()
        producer.close()
        last = [m for m in drain(bus, "t", group="after") if m.partition == 0][-1]
        assert (last.offset, last.value) == (ends[0], b"after the crash")


def write_numbered(root: Path, topic: str, count: int, *, fsync: str = "batch", width: int = 20) -> None:
    with EmbeddedBus(root, fsync=fsync) as bus:
        bus.create_topics([topic], 1)
        producer = bus.producer()
        for i in range(count):
            producer.produce(topic, f"{i:0{width}d}".encode(), partition=0)
        producer.flush()
        producer.close()


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(lambda last: last[: len(last) // 2], id="half-written-record"),
        pytest.param(lambda last: last[:8] + b"\x00" * (len(last) - 8), id="zero-filled-record"),
        pytest.param(lambda last: last[:3], id="partial-length-field"),
    ],
)
def test_a_torn_tail_is_truncated_on_open_and_never_returned(
    tmp_path: Path, tail: object, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "bus"
    write_numbered(root, "t", 10)
    path = segment_path(root, "t")
    good_size = path.stat().st_size
    record = good_size // 10
    last = path.read_bytes()[-record:]
    with path.open("ab") as fh:
        fh.write(tail(last))  # type: ignore[operator]
    with caplog.at_level(logging.WARNING), EmbeddedBus(root) as bus:
        assert path.stat().st_size == good_size
        assert "torn tail" in caplog.text
        assert [m.value for m in drain(bus, "t")] == [f"{i:020d}".encode() for i in range(10)]
        producer = bus.producer()
        producer.produce("t", b"next", partition=0)
        producer.flush()
        producer.close()
        got = drain(bus, "t", group="again")
        assert (got[-1].offset, got[-1].value) == (10, b"next")


def test_mid_log_corruption_raises_checksum_mismatch_and_is_never_served(tmp_path: Path) -> None:
    """A bad record with valid ones after it is not a torn tail: it is reported, then skipped."""
    root = tmp_path / "bus"
    write_numbered(root, "t", 20)
    path = segment_path(root, "t")
    size = path.stat().st_size
    record = size // 20
    data = bytearray(path.read_bytes())
    data[5 * record + RECORD_OVERHEAD + 3] ^= 0xFF  # a bit flip inside record 5's value
    path.write_bytes(bytes(data))

    with EmbeddedBus(root) as bus:
        assert path.stat().st_size == size  # not mistaken for a torn tail
        consumer = bus.consumer("g")
        consumer.subscribe(["t"])
        first = consumer.consume(100, 1.0)
        assert [m.offset for m in first] == [0, 1, 2, 3, 4]
        with pytest.raises(ChecksumMismatch, match=r"offsets 5\.\.5"):
            consumer.consume(100, 1.0)
        rest = consumer.consume(100, 1.0)
        assert [m.offset for m in rest] == list(range(6, 20))
        assert all(m.value == f"{m.offset:020d}".encode() for m in first + rest)
        assert bus.corrupt_records_skipped() == 1
        consumer.commit()  # the committed position is past the corrupt record
        assert consumer.committed([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 20}
        consumer.close()


def test_committed_offsets_survive_a_restart_in_an_atomically_written_file(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    write_numbered(root, "t", 7)
    with EmbeddedBus(root) as bus:
        consumer = bus.consumer("svc")
        consumer.subscribe(["t"])
        assert len(consumer.consume(5, 2.0)) == 5
        consumer.commit()
        consumer.close()
    offsets_file = root / "groups" / "svc" / "offsets.json"
    assert json.loads(offsets_file.read_text()) == {"t": {"0": 5}}
    assert not list(offsets_file.parent.glob("*.tmp"))
    with EmbeddedBus(root) as bus:
        consumer = bus.consumer("svc")
        assert consumer.committed([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 5}
        consumer.subscribe(["t"])
        assert [m.offset for m in consumer.consume(10, 1.0)] == [5, 6]
        consumer.close()


OPEN_BUS = "import sys; from crawlstream.bus import EmbeddedBus; EmbeddedBus(sys.argv[1])"


def test_a_second_opener_is_refused_while_the_log_is_open(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    bus = EmbeddedBus(root)
    try:
        with pytest.raises(BusUnavailable, match="already open in another process"):
            EmbeddedBus(root)
        other = subprocess.run(
            [sys.executable, "-c", OPEN_BUS, str(root)],
            capture_output=True, timeout=60,
        )
        assert other.returncode != 0
        assert b"already open in another process" in other.stderr
    finally:
        bus.close()
    EmbeddedBus(root).close()  # released on close


def test_segments_roll_and_reads_and_seeks_cross_them(tmp_path: Path) -> None:
    root = tmp_path / "bus"
    with EmbeddedBus(root, segment_bytes=2_000) as bus:
        bus.create_topics(["t"], 1)
        producer = bus.producer()
        for i in range(200):
            producer.produce("t", f"{i:020d}".encode(), partition=0, timestamp_ms=1_000_000 + i)
            if i % 10 == 9:
                producer.flush()
        producer.close()
    segments = sorted((root / "topics" / "t" / "0").glob("*.log"))
    assert len(segments) > 3
    assert json.loads((root / "topics" / "t" / "meta.json").read_text()) == {"partitions": 1}
    with EmbeddedBus(root, segment_bytes=2_000) as bus:
        assert [m.offset for m in drain(bus, "t")] == list(range(200))
        consumer = bus.consumer("seeker")
        consumer.subscribe(["t"])
        consumer.poll(0.1)
        tp = TopicPartition("t", 0)
        consumer.seek(tp, 137)
        assert [m.offset for m in consumer.consume(3, 1.0)] == [137, 138, 139]
        consumer.seek_to_timestamp(1_000_000 + 91)
        assert consumer.consume(1, 1.0)[0].offset == 91
        consumer.seek_to_timestamp(2_000_000)  # after everything: the log end
        assert consumer.consume(1, 0.2) == []
        consumer.close()


def test_a_large_record_is_read_whole(tmp_path: Path) -> None:
    big = os.urandom(3 << 20)  # larger than one read chunk
    with EmbeddedBus(tmp_path / "bus") as bus:
        producer = bus.producer()
        producer.produce("t", b"small", partition=0)
        producer.produce("t", big, partition=0)
        producer.flush()
        producer.close()
        assert [m.value for m in drain(bus, "t") if m.partition == 0] == [b"small", big]


def test_a_new_owner_waits_for_the_old_owner_to_revoke_and_commit(tmp_path: Path) -> None:
    """Eager rebalance with a hand-over barrier: no message is processed twice."""
    with EmbeddedBus(tmp_path / "bus") as bus:
        bus.create_topics(["t"], 2)
        producer = bus.producer()
        for i in range(10):
            producer.produce("t", b"%d" % i, partition=i % 2)
        producer.flush()
        first = bus.consumer("g")
        first.subscribe(["t"], on_revoke=lambda tps: first.commit())
        processed = [m.value for m in first.consume(4, 1.0)]  # not yet committed
        assert len(processed) == 4
        second = bus.consumer("g")
        second.subscribe(["t"])
        assert second.consume(100, 0.3) == []  # its partition is still held by `first`
        seen = [m.value for m in first.consume(100, 0.3)]  # revokes (commits 4), then resumes
        seen += [m.value for m in second.consume(100, 1.0)]
        assert len(first.assignment()) == len(second.assignment()) == 1
        assert sorted(seen) == sorted(b"%d" % i for i in range(10) if b"%d" % i not in processed)
        first.close()
        second.close()
        producer.close()


def test_a_waiting_consumer_wakes_when_another_thread_flushes(tmp_path: Path) -> None:
    with EmbeddedBus(tmp_path / "bus") as bus:
        producer = bus.producer()
        producer.partition_count("t")
        consumer = bus.consumer("g")
        consumer.subscribe(["t"])
        consumer.poll(0.05)

        def later() -> None:
            time.sleep(0.2)
            producer.produce("t", b"hello", partition=3)
            producer.flush()

        thread = threading.Thread(target=later)
        started = time.monotonic()
        thread.start()
        message = consumer.poll(10.0)
        elapsed = time.monotonic() - started
        thread.join()
        assert message is not None and message.value == b"hello"
        assert elapsed < 2.0
        consumer.close()
        producer.close()


def test_produce_validates_the_partition_and_auto_creates_the_topic(tmp_path: Path) -> None:
    with EmbeddedBus(tmp_path / "bus", default_partitions=4) as bus:
        producer = bus.producer()
        with pytest.raises(ConfigError, match="has 4 partitions"):
            producer.produce("auto", b"x", partition=4)
        assert bus.partition_count("auto") == 4
        bus.create_topics(["auto"], 16)  # idempotent: an existing topic keeps its count
        assert bus.partition_count("auto") == 4
        with pytest.raises(BusUnavailable, match="unknown topic"):
            bus.partition_count("missing")
        with pytest.raises(ConfigError, match="invalid topic name"):
            bus.create_topics(["../escape"], 1)
        producer.close()


@pytest.mark.parametrize("fsync", ["always", "batch", "never"])
def test_every_fsync_policy_keeps_what_was_flushed(tmp_path: Path, fsync: str) -> None:
    root = tmp_path / "bus"
    write_numbered(root, "t", 25, fsync=fsync)
    with EmbeddedBus(root, fsync=fsync) as bus:
        assert len(drain(bus, "t")) == 25
    with pytest.raises(ConfigError):
        EmbeddedBus(tmp_path / "other", fsync="sometimes")


def test_threads_produce_and_consume_concurrently_without_loss_or_duplicates(tmp_path: Path) -> None:
    """The shape of `crawlstream run`: services on threads, each with its own producer or consumer."""
    per_thread, threads = 3_000, 4
    with EmbeddedBus(tmp_path / "bus") as bus:
        bus.create_topics(["t"], 4)
        members = [bus.consumer("g"), bus.consumer("g")]
        for member in members:
            member.subscribe(["t"])
        seen: list[list[Message]] = [[], []]
        done = threading.Event()

        def produce(worker: int) -> None:
            producer = bus.producer()
            for i in range(per_thread):
                producer.produce("t", f"{worker}:{i}".encode(), partition=i % 4)
                if i % 97 == 0:
                    producer.flush()
            producer.close()

        def consume(index: int) -> None:
            member = members[index]
            while not done.is_set():
                seen[index].extend(member.consume(500, 0.05))
                member.commit()

        consumers = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
        producers = [threading.Thread(target=produce, args=(w,)) for w in range(threads)]
        for thread in consumers + producers:
            thread.start()
        for thread in producers:
            thread.join(timeout=60)
        deadline = time.monotonic() + 30
        while sum(map(len, seen)) < per_thread * threads and time.monotonic() < deadline:
            time.sleep(0.05)
        done.set()
        for thread in consumers:
            thread.join(timeout=10)
        values = [m.value for batch in seen for m in batch]
        assert sorted(values) == sorted(f"{w}:{i}".encode() for w in range(threads) for i in range(per_thread))
        assert all(seen), "both members consumed"
        for batch in seen:  # per partition, each producer's messages keep their order
            last: dict[tuple[int, int], int] = {}
            for message in batch:
                worker, i = map(int, message.value.split(b":"))
                assert i > last.get((message.partition, worker), -1)
                last[(message.partition, worker)] = i
        for member in members:
            member.close()


def test_decoded_records_are_ordinary_frozen_messages() -> None:
    """The decoder builds Messages through their slots (fast path): they must be the same."""
    data, max_ts = encode_records(7, [(b"v1", b"k", [("h", b"x")], 5), (b"v2", None, (), 9)])
    out: list[Message] = []
    assert decode_records(data, 0, "t", 3, 0, 10, out) == (len(data), 9, 0)
    assert max_ts == 9
    assert out == [
        Message("t", 3, 7, b"k", b"v1", (("h", b"x"),), 5),
        Message("t", 3, 8, None, b"v2", (), 9),
    ]
    assert hash(out[1]) == hash(Message("t", 3, 8, None, b"v2", (), 9))
    with pytest.raises(dataclasses.FrozenInstanceError):
        out[0].offset = 1
