"""The service loop's metrics over HTTP: consumer lag per partition, events in/out/dead-lettered,
on the embedded log and on a real Kafka broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from metrics_support import scrape
from prometheus_client import CollectorRegistry

from crawlstream.bus import Bus, Message
from crawlstream.bus._embedded import EmbeddedBus
from crawlstream.bus._kafka import KafkaBus
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer, LocalSchemaIds
from crawlstream.metrics import MetricsServer
from crawlstream.runtime import EventHandler, ServiceLoop
from crawlstream.urls import partition_for

PARTITIONS = 4
WAIT_S = 30.0


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def bus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bus]:
    if request.param == "embedded":
        with EmbeddedBus(tmp_path / "bus", default_partitions=PARTITIONS, fsync="never") as embedded:
            yield embedded
        return
    cluster = request.getfixturevalue("kafka_cluster")
    kafka = KafkaBus(cluster.bootstrap_servers, linger_ms=1, policy=TopicPolicy(partitions=PARTITIONS))
    try:
        yield kafka
    finally:
        kafka.close()


class Recording(EventHandler):
    def __init__(self) -> None:
        self.handled: list[Any] = []

    def handle(self, event: Any, message: Message) -> None:
        self.handled.append(event)


def _url(n: int, domain: str) -> DiscoveredUrl:
    return DiscoveredUrl(
        url=f"https://{domain}/{n}",
        domain=domain,
        url_key=n,
        depth=0,
        discovered_at_ms=1_700_000_000_000,
        source="seed",
    )


def _lag(url: str, group: str) -> dict[str, float]:
    return scrape(url).by("crawlstream_consumer_lag", "partition", group=group)


def test_lag_per_partition_counts_what_the_group_has_not_committed_and_goes_to_zero(bus: Bus) -> None:
    codec = EventCodec(LocalSchemaIds.bundled())
    topic, group = f"metrics.lag.{uuid.uuid4().hex[:8]}", f"metrics.group.{uuid.uuid4().hex[:8]}"
    bus.create_topics([topic], PARTITIONS)
    domains = ["a.example", "c.example"]
    assert len({partition_for(d, PARTITIONS) for d in domains}) == 2
    producer = bus.producer()
    out = EventProducer(producer, codec)
    for n in range(12):
        out.send(topic, _url(n, domains[n % 2]))
    out.flush()
    producer.close()
    ends = bus.end_offsets(topic)
    assert sum(ends) == 12

    registry = CollectorRegistry()
    with MetricsServer(registry, "127.0.0.1", 0) as server:
        _consume_and_watch_the_lag(bus, codec, registry, server, topic, group, ends)


def _consume_and_watch_the_lag(
    bus: Bus,
    codec: EventCodec,
    registry: CollectorRegistry,
    server: MetricsServer,
    topic: str,
    group: str,
    ends: list[int],
) -> None:
    handler = Recording()
    loop = ServiceLoop(
        service="test",
        consumer=bus.consumer(group),
        topics=[topic],
        codec=codec,
        handler=handler,
        dlq_producer=bus.producer(),
        batch_size=2,
        poll_timeout_s=0.1,
        registry=registry,
        group=group,
        end_offsets=bus.end_offsets,
        lag_interval_s=0.0,  # sample every iteration
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not handler.handled and time.monotonic() < deadline:
            loop.run_once()
        assert 0 < len(handler.handled) <= 2
        lag = _lag(server.url, group)
        assert set(lag) == {str(p) for p in range(PARTITIONS)}  # every owned partition, idle ones at 0
        assert sum(lag.values()) == 12 - len(handler.handled)
        assert {p: v for p, v in lag.items() if v} == {
            str(p): ends[p] - sum(1 for e in handler.handled if partition_for(e.domain, PARTITIONS) == p)
            for p in range(PARTITIONS)
            if ends[p] - sum(1 for e in handler.handled if partition_for(e.domain, PARTITIONS) == p)
        }

        while len(handler.handled) < 12 and time.monotonic() < deadline:
            loop.run_once()
        loop.run_once()  # an idle poll: commits and samples again
        after = scrape(server.url)
        assert after.by("crawlstream_consumer_lag", "partition", group=group) == {str(p): 0.0 for p in range(4)}
        assert after.total("crawlstream_events_processed_total", service="test", topic=topic) == 12
        assert after.total("crawlstream_events_dead_lettered_total") == 0
        assert after.types["crawlstream_consumer_lag"] == "gauge"
    finally:
        loop.close()
    assert _lag(server.url, group) == {}, "a member that left reports no lag for partitions it gave up"


def test_lag_samples_stay_off_without_end_offsets(bus: Bus) -> None:
    """A loop built without the bus's end offsets (tests, tools) samples nothing."""
    codec = EventCodec(LocalSchemaIds.bundled())
    topic = f"metrics.nolag.{uuid.uuid4().hex[:8]}"
    bus.create_topics([topic], PARTITIONS)
    registry = CollectorRegistry()
    loop = ServiceLoop(
        service="test",
        consumer=bus.consumer(f"g.{topic}"),
        topics=[topic],
        codec=codec,
        handler=Recording(),
        dlq_producer=bus.producer(),
        poll_timeout_s=0.05,
        registry=registry,
        lag_interval_s=0.0,
    )
    try:
        for _ in range(3):
            loop.run_once()
    finally:
        loop.close()
    assert (
        registry.get_sample_value("crawlstream_consumer_lag", {"group": "test", "topic": topic, "partition": "0"})
        is None
    )
