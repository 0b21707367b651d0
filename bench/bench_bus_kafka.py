"""Kafka backend throughput through librdkafka's mock cluster: produce+consume events/s.

Same method as ``bench_bus`` (produce N values, flushing every 10,000; then one consumer
consumes batches of up to 10,000 and commits each), with two differences forced by the mock
cluster, which is why this is its own module rather than a ``bench_bus`` backend entry:

* the mock keeps only ~15 MB per partition (older messages are deleted, the consumer then
  silently starts later), so the 20 KB case is capped at 2,000 messages (10 MB/partition);
* a new consumer group waits ~3 s (the mock's initial rebalance delay) before its first
  assignment, so consume rates are reported both including and excluding that join.

The mock broker is librdkafka itself in a child process on loopback, not a real broker (no
disk, no replication): the numbers are indicative of client-side cost only.

``python -m bench bus_kafka [--quick]``
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench._harness import main
from crawlstream.bus import KafkaBus
from crawlstream.localkafka import LocalKafka

SIZES = {"discovered_url_100B": 100, "fetch_result_20KB": 20_000}
BATCH = 10_000


def bench_kafka(*, count: int, value_bytes: int) -> dict[str, Any]:
    values = [os.urandom(value_bytes) for _ in range(64)]  # incompressible, like zstd output
    topic = f"bench.kafka.{value_bytes}"
    with LocalKafka(brokers=1) as cluster:
        bus = KafkaBus(cluster.bootstrap_servers)
        producer = bus.producer()
        bus.create_topics([topic], 8)
        partitions = producer.partition_count(topic)
        keys = [f"domain{p}.example".encode() for p in range(partitions)]
        started = time.perf_counter()
        for i in range(count):
            p = i % partitions
            producer.produce(topic, values[i & 63], partition=p, key=keys[p])
            if i % BATCH == BATCH - 1:
                producer.flush()
        producer.flush()
        produce_s = time.perf_counter() - started
        producer.close()

        consumer = bus.consumer("bench-kafka")
        assigned_at: list[float] = []
        consumer.subscribe([topic], on_assign=lambda _parts: assigned_at.append(time.perf_counter()))
        got = 0
        started = time.perf_counter()
        while got < count and time.perf_counter() - started < 300:
            # Ask only for what remains: consume() waits its full timeout for a batch to fill.
            got += len(consumer.consume(min(BATCH, count - got), 1.0))
            consumer.commit()
        ended = time.perf_counter()
        consumer.close()
        bus.close()
    if got != count:
        raise RuntimeError(f"kafka: consumed {got} of {count} messages")
    # Fetching starts when the partitions are assigned: that is where consuming begins.
    first_s = assigned_at[0]
    consume_s = ended - first_s
    return {
        "messages": count,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "produce_events_per_s": round(count / produce_s),
        "group_join_s": round(first_s - started, 2),
        "consume_events_per_s": round(count / consume_s),
        "consume_events_per_s_incl_join": round(count / (ended - started)),
        "combined_events_per_s": round(count / (produce_s + consume_s)),
        "produce_MB_per_s": round(count * value_bytes / produce_s / 1e6, 1),
        "consume_MB_per_s": round(count * value_bytes / consume_s / 1e6, 1),
    }


def run(quick: bool) -> dict[str, Any]:
    counts = {
        "discovered_url_100B": 50_000 if quick else 400_000,
        "fetch_result_20KB": 1_000 if quick else 2_000,
    }
    results: dict[str, Any] = {
        f"kafka/{name}": bench_kafka(count=counts[name], value_bytes=size) for name, size in SIZES.items()
    }
    return {**results, "note": "librdkafka mock cluster (in a child process, loopback), not a real broker"}


if __name__ == "__main__":
    main(run)
