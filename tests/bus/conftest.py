"""The ``bus`` fixture: one contract suite, run against every backend.

``embedded`` is an EmbeddedBus on ``tmp_path``; ``kafka`` is a KafkaBus on librdkafka's
mock cluster (one per session: it starts in a second or two, and every test uses fresh
topic and group names). The fixture yields a ``BusUnderTest`` whose ``reopen()`` closes the
bus and opens a new one on the same storage, which is how tests simulate a restart.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlstream.bus import Bus, EmbeddedBus

_KAFKA_TEST_CONFIG = {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "500"}


class BusUnderTest:
    """A bus plus the means to restart it on the same storage (files or cluster)."""

    def __init__(self, backend: str, factory: Callable[[], Bus]) -> None:
        self.backend = backend
        self._factory = factory
        self.bus = factory()

    def reopen(self) -> Bus:
        """Close the bus (its producers and consumers must be closed) and open it again."""
        self.bus.close()
        self.bus = self._factory()
        return self.bus

    def close(self) -> None:
        self.bus.close()


def _kafka_names() -> tuple[Any, Any]:
    """KafkaBus and MockKafkaCluster, or a skip if the Kafka backend is not there yet."""
    try:
        bus_module = importlib.import_module("crawlstream.bus")
        testing = importlib.import_module("crawlstream.bus.testing")
    except ImportError as exc:
        pytest.skip(f"Kafka backend not importable: {exc}")
    kafka_bus = getattr(bus_module, "KafkaBus", None)
    cluster = getattr(testing, "MockKafkaCluster", None)
    if kafka_bus is None or cluster is None:
        pytest.skip("crawlstream.bus.KafkaBus / crawlstream.bus.testing.MockKafkaCluster missing")
    return kafka_bus, cluster


@pytest.fixture(scope="session")
def mock_kafka_cluster() -> Iterator[Any]:
    """librdkafka's mock cluster on loopback (topics auto-created with 4 partitions)."""
    _, cluster_class = _kafka_names()
    with cluster_class() as cluster:
        yield cluster


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def bus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BusUnderTest]:
    if request.param == "embedded":
        root = tmp_path / "bus"
        handle = BusUnderTest("embedded", lambda: EmbeddedBus(root, default_partitions=4))
    else:
        kafka_bus, _ = _kafka_names()
        cluster = request.getfixturevalue("mock_kafka_cluster")
        # A member that closed is only dropped from its group by the mock cluster when its
        # session times out (45 s by default), so a restarted member of the same group
        # would wait that long: keep sessions short, as a real deployment's tests would.
        handle = BusUnderTest(
            "kafka", lambda: kafka_bus(cluster.bootstrap_servers, extra_config=_KAFKA_TEST_CONFIG)
        )
    try:
        yield handle
    finally:
        handle.close()
