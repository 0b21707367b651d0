"""The event bus: one interface, an embedded durable log and a Kafka backend."""

from crawlstream.bus._base import Bus, Consumer, Message, PartitionsCallback, Producer, TopicPartition
from crawlstream.bus._factory import open_bus
from crawlstream.bus._kafka import KafkaBus

__all__ = ["Bus", "Consumer", "Message", "PartitionsCallback", "Producer", "TopicPartition"]
__all__ += ["KafkaBus", "open_bus"]
from crawlstream.bus._embedded import EmbeddedBus  # noqa: E402

__all__ += ["EmbeddedBus"]
