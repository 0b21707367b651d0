"""The ``bus`` fixture: one contract suite, run against every backend.

``embedded`` is an EmbeddedBus on ``tmp_path``; ``kafka`` is a KafkaBus on the session's
real Kafka broker (every test uses fresh topic and group names). The fixture yields a
``BusUnderTest`` whose ``reopen()`` closes the bus and opens a new one on the same storage,
which is how tests simulate a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawlstream.bus import Bus, EmbeddedBus, KafkaBus

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


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def bus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BusUnderTest]:
    if request.param == "embedded":
        root = tmp_path / "bus"
        handle = BusUnderTest("embedded", lambda: EmbeddedBus(root, default_partitions=4))
    else:
        cluster = request.getfixturevalue("kafka_cluster")
        # A member that crashed is only dropped from its group when its session times out
        # (45 s by default): keep sessions short, as a deployment's tests would.
        handle = BusUnderTest(
            "kafka", lambda: KafkaBus(cluster.bootstrap_servers, extra_config=_KAFKA_TEST_CONFIG)
        )
    try:
        yield handle
    finally:
        handle.close()
