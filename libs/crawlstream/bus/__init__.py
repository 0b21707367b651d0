"""The event bus: one interface, an embedded durable log and a Kafka backend.

``KafkaBus`` is imported on first use (module ``__getattr__``): confluent-kafka and its
librdkafka take ~25 ms to import, which every embedded-log process (``crawlstream run``
and its workers) would otherwise pay for a backend it never opens (ADR 009).
"""

from typing import TYPE_CHECKING, Any

from crawlstream.bus._base import (
    Bus,
    Consumer,
    Message,
    PartitionsCallback,
    Producer,
    TopicPartition,
    TransactionalProducer,
)
from crawlstream.bus._factory import open_bus
from crawlstream.bus._kafka_config import parse_kafka_extra_config, scope_kafka_extra_config

if TYPE_CHECKING:
    from crawlstream.bus._kafka import KafkaBus

__all__ = ["Bus", "Consumer", "Message", "PartitionsCallback", "Producer", "TopicPartition", "TransactionalProducer"]
__all__ += ["KafkaBus", "open_bus", "parse_kafka_extra_config", "scope_kafka_extra_config"]
from crawlstream.bus._embedded import EmbeddedBus  # noqa: E402

__all__ += ["EmbeddedBus"]


def __getattr__(name: str) -> Any:
    if name == "KafkaBus":
        from crawlstream.bus._kafka import KafkaBus

        return KafkaBus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
