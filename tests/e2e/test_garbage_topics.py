"""Garbage on every topic (issue 16): each consuming service, as its own process on a real
Kafka broker, dead-letters every undecodable message of every topic it reads, with the error
in the headers, keeps running, still does its work, commits past the garbage and stops
cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from e2e_support import GROUPS, crawl_env

from crawlstream.bus import KafkaBus
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.events import DiscoveredUrl, EventCodec, LocalSchemaIds
from crawlstream.settings import load
from crawlstream.topics import ALL_TOPICS, CONTENT_STORED, URLS_DISCOVERED, URLS_FRONTIER, dlq_topic
from crawlstream.urls import canonicalize, url_key
from tests.events.event_samples import sample_events

PARTITIONS = 2
TIMEOUT_S = 90.0


def garbage_for(topic: str, codec: EventCodec) -> list[bytes | None]:
    """Values no reader of ``topic`` can decode: every way a foreign producer gets it wrong."""
    samples = sample_events()
    wrong_type = samples[URLS_DISCOVERED] if topic == CONTENT_STORED else samples[CONTENT_STORED]
    sample = samples[URLS_DISCOVERED] if topic == URLS_FRONTIER else samples[topic]  # same event type
    right = codec.encode(sample, topic)  # type: ignore[arg-type]
    return [
        b"",  # empty
        None,  # a tombstone
        b"plain text, no header",
        b"\x01" + right[1:],  # wrong magic byte
        b"\x00\x7f\xff\xff\xff" + right[5:],  # an id no registry issued
        right[: len(right) // 2],  # cut short
        right[:5] + bytes(reversed(right[5:])),  # a body that is not this schema's
        codec.encode(wrong_type, None),  # a valid event of another type  # type: ignore[arg-type]
        b"\x00" + os.urandom(64),
    ]


def _wait(condition: object, what: str, processes: dict[str, subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():  # type: ignore[operator]
        dead = {n: p.returncode for n, p in processes.items() if p.poll() is not None}
        assert not dead, f"services exited while waiting until {what}: {dead}\n" + _tails(logs)
        assert time.monotonic() < deadline, f"timed out waiting until {what}\n" + _tails(logs)
        time.sleep(0.3)


def _tails(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(logs.glob("*.log")))


def _read_all(bootstrap: str, topic: str, expected: int) -> list[object]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{os.urandom(4).hex()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[object] = []
    deadline = time.monotonic() + 10
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, 0.2) if m.error() is None]
        got += [m for m in consumer.consume(500, 0.5) if m.error() is None]  # nothing beyond
    finally:
        consumer.close()
    return got


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with LocalKafka(brokers=1, partitions=PARTITIONS, data_dir=tmp_path_factory.mktemp("kafka")) as cluster:
        settings = load(
            {"KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap_servers, "CRAWLSTREAM_BUS_PARTITIONS": str(PARTITIONS)}
        )
        bus = KafkaBus.from_settings(settings)
        try:
            bus.create_topics([*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)], PARTITIONS)
        finally:
            bus.close()
        yield cluster


def test_every_service_dead_letters_garbage_on_every_topic_and_keeps_working(
    kafka: LocalKafka, tmp_path: Path
) -> None:
    codec = EventCodec(LocalSchemaIds.bundled())
    topics = sorted({t for _, consumed in GROUPS.values() for t in consumed})
    garbage = {t: garbage_for(t, codec) for t in topics}
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for topic, values in garbage.items():
        for i, value in enumerate(values):
            producer.produce(topic, value=value, key=b"example.com", partition=i % PARTITIONS)
    # After the garbage, one good seed: the deduper must still pass it on to the frontier.
    seed = canonicalize("http://still-working.example.org/")
    good = DiscoveredUrl(seed.url, seed.domain, url_key(seed), 0, 1_700_000_000_000, "seed")
    producer.produce(URLS_DISCOVERED, value=codec.encode(good, URLS_DISCOVERED), key=seed.domain.encode())
    assert producer.flush(10) == 0

    logs = tmp_path / "logs"
    logs.mkdir()
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in GROUPS:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k != "REDIS_URL"}
            env.update(
                crawl_env(
                    tmp_path / name,  # its own data dir: its own private Redis
                    CRAWLSTREAM_BUS_PARTITIONS=str(PARTITIONS),
                    CRAWLSTREAM_LOG_LEVEL="INFO",
                    KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
                )
            )
            with (logs / f"{name}.log").open("wb") as err:
                processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "crawlstream", "service", name],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
        readers = Counter(t for _, consumed in GROUPS.values() for t in consumed)
        dead: dict[str, list[object]] = {}

        def all_dead_lettered() -> bool:
            for topic in topics:
                dead[topic] = _read_all(kafka.bootstrap_servers, dlq_topic(topic), readers[topic] * len(garbage[topic]))
            return all(len(dead[t]) >= readers[t] * len(garbage[t]) for t in topics)

        _wait(all_dead_lettered, "every garbage message is dead-lettered", processes, logs)
        # urls.frontier holds the garbage sent to it and, after it, what the deduper passed on.
        frontier = _read_all(kafka.bootstrap_servers, URLS_FRONTIER, len(garbage[URLS_FRONTIER]) + 1)
        passed_on = [m.value() for m in frontier if m.value() not in garbage[URLS_FRONTIER]]  # type: ignore[attr-defined]
        assert [codec.decode(v).url for v in passed_on] == [seed.url]
        for topic in topics:
            # Each reading group dead-letters each garbage message exactly once, value intact,
            # with the error named in the headers.
            assert len(dead[topic]) == readers[topic] * len(garbage[topic]), topic
            # (The bus reads a tombstone as an empty value, so it is dead-lettered as one.)
            values = Counter(m.value() for m in dead[topic])  # type: ignore[attr-defined]
            assert values == Counter([v or b"" for v in garbage[topic]] * readers[topic]), topic
            for message in dead[topic]:
                headers = dict(message.headers())  # type: ignore[attr-defined]
                assert headers["error_type"] in (b"EventDecodeError", b"BadDataError"), headers
        alive = {n: p.poll() for n, p in processes.items()}
        assert alive == dict.fromkeys(GROUPS), "every service still running"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = {n: p.wait(30) for n, p in processes.items()}
    assert codes == dict.fromkeys(GROUPS, 0), _tails(logs)
    # Every group committed past the garbage: nothing left to consume.
    for name, (group, consumed) in GROUPS.items():
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group})
        try:
            parts = [TopicPartition(t, p) for t in consumed for p in range(PARTITIONS)]
            for tp in consumer.committed(parts, timeout=10):
                _, high = consumer.get_watermark_offsets(tp, timeout=10)
                assert tp.offset == high, (name, tp.topic, tp.partition, tp.offset, high)
        finally:
            consumer.close()
