"""``extra_config`` of the Kafka backend: librdkafka properties given by the operator
(``bus.kafka_extra_config``, ``"k=v,k2=v2"``), scoped to every client or one kind of client.

Imported without confluent-kafka: the status page reads them to build its own admin client.
"""

from __future__ import annotations

from collections.abc import Mapping

from crawlstream.errors import ConfigError

__all__ = ["parse_kafka_extra_config", "scope_kafka_extra_config"]

def scope_kafka_extra_config(extra: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """``extra_config`` split into (every client, consumers only, producers only)."""
    common: dict[str, str] = {}
    consumer: dict[str, str] = {}
    producer: dict[str, str] = {}
    for key, value in extra.items():
        if key.startswith("consumer."):
            consumer[key.removeprefix("consumer.")] = value
        elif key.startswith("producer."):
            producer[key.removeprefix("producer.")] = value
        else:
            common[key] = value
    return common, consumer, producer


def parse_kafka_extra_config(text: str) -> dict[str, str]:
    """``"k=v,k2=v2"`` -> dict (the form of CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG)."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG: expected key=value items, found {item!r}")
        out[key.strip()] = value.strip()
    return out
