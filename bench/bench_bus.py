"""Bus throughput: produce N messages + flush, then one consumer consumes all + commits.

Reported per backend and message size, in events/s for each phase and combined
(N / (produce time + consume time)), by wall clock and per CPU-second of this process (for
a backend that works in other processes, such as Kafka, only wall clock is meaningful).
Sizes: ~100-byte values (a DiscoveredUrl) and ~20 KB values (a FetchResult with its
compressed body). Each phase runs on one thread, so the
figures are per core. ``embedded_shared`` is the log as a member of ``crawlstream run
--processes N`` (the append lock and the published end on every append). Backends are
entries of ``BACKENDS``: a name and a context manager
factory yielding a ready ``Bus``; ``bench_bus_kafka`` runs ``bench_backend`` on a real Kafka
broker beside the embedded log.

``python -m bench bus [--quick]``
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from bench._harness import main
from crawlstream.bus import Bus, EmbeddedBus

MakeBus = Callable[[], AbstractContextManager[Bus]]

SIZES = {"discovered_url_100B": 100, "fetch_result_20KB": 20_000}
PARTITIONS = 8


@contextlib.contextmanager
def _embedded(fsync: str = "batch") -> Iterator[Bus]:
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as tmp:
        bus = EmbeddedBus(Path(tmp), default_partitions=PARTITIONS, fsync=fsync)
        try:
            yield bus
        finally:
            bus.close()


@contextlib.contextmanager
def _embedded_shared(fsync: str = "batch") -> Iterator[Bus]:
    """The log as one member of a multi-process run (ADR 025): every append takes the
    cross-process append lock and publishes the partition's end."""
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as tmp:
        bus = EmbeddedBus(Path(tmp), default_partitions=PARTITIONS, fsync=fsync, member=(0, 1), first=True)
        try:
            yield bus
        finally:
            bus.close()


BACKENDS: dict[str, MakeBus] = {
    "embedded": _embedded,
    "embedded_shared": _embedded_shared,
}


def bench_backend(
    name: str, make_bus: MakeBus, *, count: int, value_bytes: int, batch: int = 10_000
) -> dict[str, Any]:
    """Produce ``count`` values of ``value_bytes`` (flushing every ``batch``), then consume
    and commit them all with one consumer (batches of up to ``batch``, a commit after each).
    Returns events/s per phase and combined; consuming is timed from the group's first
    assignment, the time to it is ``group_join_s``."""
    values = [os.urandom(value_bytes) for _ in range(64)]  # incompressible, like zstd output
    keys = [f"domain{i}.example".encode() for i in range(PARTITIONS)]
    topic = f"bench.{name}.{value_bytes}.{time.monotonic_ns()}"
    with make_bus() as bus:
        bus.create_topics([topic], PARTITIONS)
        producer = bus.producer()
        partitions = producer.partition_count(topic)
        started, cpu_started = time.perf_counter(), time.process_time()
        for i in range(count):
            p = i % partitions
            producer.produce(topic, values[i & 63], partition=p, key=keys[p % len(keys)])
            if i % batch == batch - 1:
                producer.flush()
        producer.flush()
        produce_s = time.perf_counter() - started
        produce_cpu_s = time.process_time() - cpu_started
        producer.close()

        consumer = bus.consumer(f"bench-{name}")
        assigned_at: list[float] = []
        consumer.subscribe([topic], on_assign=lambda _parts: assigned_at.append(time.perf_counter()))
        got = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        deadline = started + 300
        while got < count and time.perf_counter() < deadline:
            # Ask only for what remains: a backend may wait its full timeout for a batch to fill.
            got += len(consumer.consume(min(batch, count - got), 1.0))
            consumer.commit()
        ended = time.perf_counter()
        consume_cpu_s = time.process_time() - cpu_started
        consumer.close()
    if got != count:
        raise RuntimeError(f"{name}: consumed {got} of {count} messages")
    # Fetching starts when the partitions are assigned (a Kafka group join takes a moment):
    # consuming is timed from there, the join is reported on its own.
    joined = assigned_at[0] if assigned_at else started
    consume_s = ended - joined
    return {
        "messages": count,
        "value_bytes": value_bytes,
        "produce_events_per_s": round(count / produce_s),
        "group_join_s": round(joined - started, 3),
        "consume_events_per_s": round(count / consume_s),
        "consume_events_per_s_incl_join": round(count / (ended - started)),
        "combined_events_per_s": round(count / (produce_s + consume_s)),
        # Per CPU-second of this process: what one core does, less noisy on a shared machine.
        "produce_events_per_cpu_s": round(count / max(produce_cpu_s, 1e-9)),
        "consume_events_per_cpu_s": round(count / max(consume_cpu_s, 1e-9)),
        "produce_MB_per_s": round(count * value_bytes / produce_s / 1e6, 1),
        "consume_MB_per_s": round(count * value_bytes / consume_s / 1e6, 1),
    }


def run(quick: bool) -> dict[str, Any]:
    counts = {
        "discovered_url_100B": 50_000 if quick else 500_000,
        "fetch_result_20KB": 2_000 if quick else 20_000,
    }
    results: dict[str, Any] = {}
    for name, make_bus in BACKENDS.items():
        for size_name, value_bytes in SIZES.items():
            results[f"{name}/{size_name}"] = bench_backend(
                name, make_bus, count=counts[size_name], value_bytes=value_bytes
            )
    # The durability policies on small events (the one the 200k/s target is about).
    for fsync in ("always", "never"):
        results[f"embedded-fsync-{fsync}/discovered_url_100B"] = bench_backend(
            f"embedded-{fsync}", lambda fsync=fsync: _embedded(fsync),  # type: ignore[misc]
            count=counts["discovered_url_100B"], value_bytes=100,
        )
    return {**results, "target": ">= 200,000 small events/s produced and consumed per core (embedded)"}


if __name__ == "__main__":
    main(run)
