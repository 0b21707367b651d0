"""What a Kafka e2e failure says about the cluster (``kafka_support``): the offsets an open
transaction holds, which a member stuck reading them cannot name itself (librdkafka reports
UNSTABLE_OFFSET_COMMIT as "Timed out")."""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import pytest
from kafka_support import held_offsets

from crawlstream.bus import KafkaBus, TopicPartition
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.devtools.localkafka import LocalKafka

pytestmark = pytest.mark.kafka


def test_a_failure_names_the_offsets_an_open_transaction_holds_and_not_once_it_committed(
    kafka_cluster: LocalKafka,
) -> None:
    bus = KafkaBus(kafka_cluster.bootstrap_servers, linger_ms=1, policy=TopicPolicy(partitions=2))
    source, out, group = (f"held-{what}-{uuid.uuid4().hex[:8]}" for what in ("in", "out", "g"))
    bus.create_topics([source, out], 2)
    member = bus.consumer(group)
    member.subscribe([source])
    deadline = time.monotonic() + 30
    while not member.assignment() and time.monotonic() < deadline:
        member.consume(1, 0.2)
    member.commit({TopicPartition(source, 0): 1, TopicPartition(source, 1): 1})
    producer = bus.transactional_producer(f"t-{group}")
    producer.produce(out, b"x", partition=0)
    held = [confluent_kafka.TopicPartition(source, 1, 4)]
    producer._producer.send_offsets_to_transaction(held, member.group_metadata(), 10)  # left open
    try:
        report = held_offsets(kafka_cluster)
        assert f"{group}: {source}[1] UNSTABLE_OFFSET_COMMIT" in report, report
        assert f"{source}[0]" not in report, report
        producer._producer.commit_transaction(10)
        deadline = time.monotonic() + 30  # the commit's markers reach the group's log after it returns
        while group in (report := held_offsets(kafka_cluster)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group not in report, report
    finally:
        member.close()
        producer.close()
        bus.close()
