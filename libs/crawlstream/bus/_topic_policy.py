"""How the Kafka backend creates a topic: partitions, replicas and per-topic configuration.

Pure: the same settings give the same ``NewTopic`` arguments, so tests check the policy
without a broker and the broker tests check that the cluster applied it (ADR 011).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawlstream.errors import ConfigError
from crawlstream.topics import REPLAY_SOURCES

__all__ = ["TopicPolicy"]

_HOUR_MS = 3_600_000
_FOREVER = "-1"


@dataclass(frozen=True)
class TopicPolicy:
    """``replication_factor`` and ``min_insync_replicas`` 0 mean "derive from the cluster's
    size" (``resolve``): min(3, brokers) replicas, and 2 in sync once there are 3."""

    partitions: int = 8
    replication_factor: int = 0
    min_insync_replicas: int = 0
    work_retention_hours: float = 168.0
    dlq_retention_hours: float = 720.0
    max_message_bytes: int = 16 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Any) -> TopicPolicy:
        bus = settings.bus
        return cls(
            partitions=bus.partitions,
            replication_factor=bus.replication_factor,
            min_insync_replicas=bus.min_insync_replicas,
            work_retention_hours=bus.work_retention_hours,
            dlq_retention_hours=bus.dlq_retention_hours,
            max_message_bytes=bus.max_message_bytes,
        )

    def replicas(self, brokers: int) -> tuple[int, int]:
        """(replication factor, min.insync.replicas) on a cluster of ``brokers`` brokers."""
        replication = self.replication_factor or min(3, brokers)
        if replication > brokers:
            raise ConfigError(
                f"CRAWLSTREAM_BUS_REPLICATION_FACTOR={replication}, but the Kafka cluster has {brokers} "
                "broker(s): lower it (0 = min(3, brokers)) or add brokers"
            )
        in_sync = self.min_insync_replicas or (2 if replication >= 3 else 1)
        if in_sync > replication:
            raise ConfigError(
                f"CRAWLSTREAM_BUS_MIN_INSYNC_REPLICAS={in_sync} exceeds the replication factor {replication}: "
                "no write could ever be acknowledged"
            )
        return replication, in_sync

    def config_for(self, topic: str, *, min_insync_replicas: int) -> dict[str, str]:
        """The topic-level configuration Kafka is given at creation."""
        if topic.endswith(".dlq"):
            retention = str(int(self.dlq_retention_hours * _HOUR_MS))
        elif topic in REPLAY_SOURCES:
            retention = _FOREVER
        else:
            retention = str(int(self.work_retention_hours * _HOUR_MS))
        return {
            "retention.ms": retention,
            # Replay sources are never cut by size either; work topics are bounded by time only.
            "retention.bytes": _FOREVER,
            "min.insync.replicas": str(min_insync_replicas),
            "max.message.bytes": str(self.max_message_bytes),
            # Producers set zstd; the broker keeps their batches as they are.
            "compression.type": "producer",
            # An out-of-sync replica never becomes leader: acknowledged writes are never lost.
            "unclean.leader.election.enable": "false",
        }
