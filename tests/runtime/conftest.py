"""The loop tests run on real buses: the embedded log, and Kafka via librdkafka's mock cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.bus import Bus
from crawlstream.bus._embedded import EmbeddedBus
from crawlstream.bus._kafka import KafkaBus
from crawlstream.bus.testing import MockKafkaCluster
from crawlstream.events import EventCodec, LocalSchemaIds

PARTITIONS = 4  # what the mock cluster auto-creates; the embedded bus is told the same


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[Bus]:
    """The embedded log: what most loop tests run on (fast, and the single-machine default)."""
    with EmbeddedBus(tmp_path / "bus", default_partitions=PARTITIONS, fsync="never") as embedded:
        yield embedded


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def any_bus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bus]:
    """Each backend in turn (Kafka: the mock cluster in this process; group joins take seconds)."""
    if request.param == "embedded":
        with EmbeddedBus(tmp_path / "bus", default_partitions=PARTITIONS, fsync="never") as embedded:
            yield embedded
        return
    with MockKafkaCluster(in_process=True) as cluster:
        kafka = KafkaBus(cluster.bootstrap_servers, linger_ms=1)
        try:
            yield kafka
        finally:
            kafka.close()


@pytest.fixture
def codec() -> EventCodec:
    return EventCodec(LocalSchemaIds.bundled())
