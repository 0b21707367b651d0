"""The loop tests run on real buses: the embedded log, and a real Kafka broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.bus import Bus
from crawlstream.bus._embedded import EmbeddedBus
from crawlstream.bus._kafka import KafkaBus
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.events import EventCodec, LocalSchemaIds

PARTITIONS = 4  # each bus creates topics with this many


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[Bus]:
    """The embedded log: what most loop tests run on (fast, and the single-machine default)."""
    with EmbeddedBus(tmp_path / "bus", default_partitions=PARTITIONS, fsync="never") as embedded:
        yield embedded


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def any_bus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bus]:
    """Each backend in turn (Kafka: the session's real broker)."""
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


@pytest.fixture
def codec() -> EventCodec:
    return EventCodec(LocalSchemaIds.bundled())
