"""The event bus: one interface, an embedded durable log and a Kafka backend."""

from crawlstream.bus._base import Bus, Consumer, Message, PartitionsCallback, Producer, TopicPartition

__all__ = ["Bus", "Consumer", "Message", "PartitionsCallback", "Producer", "TopicPartition"]
