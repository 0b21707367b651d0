"""A real Apache Kafka (KRaft) cluster on loopback, for laptops, tests and benchmarks."""

from crawlstream.devtools.localkafka._cluster import KAFKA_VERSION, LocalKafka, find_kafka_libs

__all__ = ["KAFKA_VERSION", "LocalKafka", "find_kafka_libs"]
