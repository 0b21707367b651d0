"""End and committed offsets of a Kafka bus, for the status page: admin calls with short timeouts.

The same four questions as ``_embedded_offsets`` (topics, each partition's end, the consumer
groups, what each group committed), answered by the cluster: metadata for the topics and
their partition counts, ``ListOffsets`` (latest) for the ends, ``ListGroups`` for the
groups, and a group consumer's ``committed`` (one per group, kept) for their offsets. Only
groups named ``crawlstream.*`` are reported (the services' and ``crawlstream run``'s own).
Every call is bounded by ``timeout_s`` (a status page must answer while the cluster is
down), and a ``KafkaException`` stops here: that part is reported as unavailable (None),
never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec

__all__ = ["GROUP_PREFIX", "KafkaOffsets"]

logger = logging.getLogger(__name__)

GROUP_PREFIX = "crawlstream."


class KafkaOffsets:
    """Reads topics, end offsets and group commits from the cluster ``admin_config`` names."""

    def __init__(self, admin_config: Mapping[str, Any], *, timeout_s: float = 2.0) -> None:
        self._config = dict(admin_config)
        self._admin_client: AdminClient | None = None  # made at the first question, released by close
        self.timeout_s = timeout_s
        self._partitions: dict[str, int] = {}
        self._consumers: dict[str, confluent_kafka.Consumer] = {}

    @classmethod
    def from_settings(cls, settings: Any) -> KafkaOffsets:
        # The extra librdkafka keys for every client (not the consumer./producer. ones), as
        # the bus gives them to its own admin client.
        from crawlstream.bus import parse_kafka_extra_config, scope_kafka_extra_config

        extra = parse_kafka_extra_config(getattr(settings.bus, "kafka_extra_config", ""))
        common, _consumer, _producer = scope_kafka_extra_config(extra)
        return cls({"bootstrap.servers": settings.kafka_bootstrap_servers, "client.id": "crawlstream-status", **common})

    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            self._admin_client = AdminClient(self._config)
        return self._admin_client

    def available(self) -> bool:
        return bool(self.topics())

    def topics(self) -> list[str]:
        """Topics of the cluster (internal ``__*`` topics left out), sorted; [] if unreachable."""
        try:
            metadata = self._admin().list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            logger.debug("status: topic metadata unavailable: %s", exc)
            return []
        self._partitions = {
            name: len(t.partitions)
            for name, t in metadata.topics.items()
            if t.error is None and t.partitions and not name.startswith("__")
        }
        return sorted(self._partitions)

    def partition_count(self, topic: str) -> int | None:
        if topic not in self._partitions:
            self.topics()
        return self._partitions.get(topic)

    def end_offsets(self, topic: str) -> list[int] | None:
        count = self.partition_count(topic)
        if count is None:
            return None
        request = {confluent_kafka.TopicPartition(topic, p): OffsetSpec.latest() for p in range(count)}
        try:
            futures = self._admin().list_offsets(request, request_timeout=self.timeout_s)
            found = {tp.partition: int(f.result(timeout=self.timeout_s).offset) for tp, f in futures.items()}
        except (KafkaException, TimeoutError) as exc:
            logger.debug("status: end offsets of %s unavailable: %s", topic, exc)
            return None
        return [max(0, found.get(p, 0)) for p in range(count)]

    def groups(self) -> list[str]:
        try:
            listed = self._admin().list_consumer_groups(request_timeout=self.timeout_s).result(timeout=self.timeout_s)
        except (KafkaException, TimeoutError) as exc:
            logger.debug("status: consumer groups unavailable: %s", exc)
            return []
        return sorted(g.group_id for g in listed.valid if g.group_id.startswith(GROUP_PREFIX))

    def committed(self, group: str) -> dict[str, dict[int, int]]:
        """``{topic: {partition: next_offset}}`` committed by ``group`` ({} if none or unreachable).

        Asked through a consumer of the group that never subscribes (as ``LagProbe`` does), not
        the admin API's OffsetFetch: librdkafka's admin client crashes the process when the
        group's coordinator answers NOT_COORDINATOR (a group not loaded yet; seen on 2.16.1,
        confluent-kafka-python issue 1982), which a consumer's group handle handles.
        """
        tps = [
            confluent_kafka.TopicPartition(topic, p)
            for topic, count in sorted(self._partitions.items())
            for p in range(count)
        ]
        if not tps:
            return {}
        consumer = self._consumers.get(group)
        try:
            if consumer is None:
                consumer = confluent_kafka.Consumer({**self._config, "group.id": group, "enable.auto.commit": False})
                self._consumers[group] = consumer
            answer = consumer.committed(tps, timeout=self.timeout_s)
        except KafkaException as exc:
            logger.debug("status: offsets of group %s unavailable: %s", group, exc)
            return {}
        out: dict[str, dict[int, int]] = {}
        for tp in answer:
            if tp.error is None and tp.offset >= 0:
                out.setdefault(tp.topic, {})[tp.partition] = int(tp.offset)
        return out

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
        # librdkafka's admin handle keeps reconnecting on its own thread until it is freed
        self._admin_client = None
