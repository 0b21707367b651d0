"""Kafka backend throughput on a real Apache Kafka broker, beside the embedded log, in one run.

Both backends go through ``bench_bus.bench_backend`` (produce N incompressible values,
flushing every 10,000; then one consumer of a new group consumes batches of up to 10,000
and commits each), for ~100-byte and ~20 KB values, on 8 partitions. Kafka is one
``LocalKafka`` broker (KRaft, loopback, JVM on this machine) with the backend's real
producer settings (idempotent, ``acks=all``, zstd, ``linger.ms=20``); topics are created
explicitly, as auto-creation is off. The broker keeps every message, so both backends move
the same counts. A short warm-up run comes first (``kafka_warmup``): the first producer and
group on a fresh cluster wait while it creates its internal topics.

Reported per case: produce and consume events/s and MB/s by wall clock (consuming timed
from the group's first assignment; ``group_join_s`` is the join itself, and
``consume_events_per_s_incl_join`` counts it), this process's CPU rates (for Kafka the
broker's share is in ``broker_cpu_s``, the JVM's user+sys over the case), and the ratio
kafka/embedded of each rate. The broker shares the machine's cores with the client, so the
load average before and after is recorded.

``python -m bench bus_kafka [--quick]``
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import psutil

from bench._harness import main
from bench.bench_bus import PARTITIONS, SIZES, _embedded, bench_backend
from crawlstream.bus import Bus, KafkaBus
from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.devtools.localkafka import LocalKafka

_RATES = (
    "produce_events_per_s",
    "consume_events_per_s",
    "consume_events_per_s_incl_join",
    "combined_events_per_s",
    "produce_MB_per_s",
    "consume_MB_per_s",
)


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def run(quick: bool) -> dict[str, Any]:
    counts = {
        "discovered_url_100B": 50_000 if quick else 500_000,
        "fetch_result_20KB": 2_000 if quick else 20_000,
    }
    results: dict[str, Any] = {"loadavg_1_5_15_before": _loadavg()}
    with LocalKafka(brokers=1, partitions=PARTITIONS) as cluster:
        [node] = cluster.node_ids

        @contextlib.contextmanager
        def kafka() -> Iterator[Bus]:
            bus = KafkaBus(cluster.bootstrap_servers, policy=TopicPolicy(partitions=PARTITIONS))
            try:
                yield bus
            finally:
                bus.close()

        # A fresh cluster creates its internal topics (consumer offsets, producer ids) on
        # first use: a short run first, so the measured cases see a warm broker.
        warmup = bench_backend("kafka-warmup", kafka, count=1_000, value_bytes=100)
        results["kafka_warmup"] = {k: warmup[k] for k in ("messages", "produce_events_per_s", "group_join_s")}
        for size_name, value_bytes in SIZES.items():
            count = counts[size_name]
            embedded = bench_backend("embedded", _embedded, count=count, value_bytes=value_bytes)
            broker_cpu_before = _cpu_s(cluster.pid_of(node))
            on_kafka = bench_backend("kafka", kafka, count=count, value_bytes=value_bytes)
            on_kafka["broker_cpu_s"] = round(_cpu_s(cluster.pid_of(node)) - broker_cpu_before, 2)
            results[f"embedded/{size_name}"] = embedded
            results[f"kafka/{size_name}"] = on_kafka
            results[f"ratio_kafka_over_embedded/{size_name}"] = {
                k: round(on_kafka[k] / embedded[k], 3) if embedded[k] else None for k in _RATES
            }
    results["loadavg_1_5_15_after"] = _loadavg()
    results["note"] = (
        "one real Kafka broker (LocalKafka, KRaft, loopback) on this machine beside the client, "
        "vs. the embedded log (fsync=batch); same producer/consumer loop and counts for both"
    )
    return results


if __name__ == "__main__":
    main(run)
