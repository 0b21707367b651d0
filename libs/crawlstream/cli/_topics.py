"""``crawlstream topics create | add-partitions``: create every topic of the crawl, or grow them.

The step a deployment runs before its services start (docker-compose's one-shot ``topics``
service; on Kubernetes, Strimzi ``KafkaTopic`` resources do the same): the six topics and
their dead-letter topics, with ``--partitions`` partitions and ``TopicPolicy``'s replicas,
retention and limits (ADR 011). Services also create missing topics when they start, but
only the six (dead-letter topics appear on their first message), and several services
racing to create them is what this step avoids. Existing topics are left as they are. One
JSON line on stdout: each topic with the partition count it has.

``add-partitions --partitions N`` (Kafka only) grows every topic of the crawl and its
dead-letter topic to N partitions, all together, so the co-partitioned topics stay aligned
(partition p of ``urls.frontier``, ``fetch.requests`` and ``fetch.results`` holds the same
domains). N must be a divisor of 128 above the current count: a domain's partition is
``checksum mod N``, so each old partition p splits into p, p + P, p + 2P, ... (whole checksum
classes move; none merge). What it does not do (docs/RUNBOOK.md, "Add partitions"):
producers keep the partition count they read at start (restart every service afterwards),
and per-partition state (Bloom snapshots, frontier files, scheduler state in Redis) stays
with the old partition: a moved domain's queued URLs drain from there, and URLs it had seen
before may be fetched once more. The embedded bus's count is fixed when its data dir is
created: refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING

from crawlstream.bus._factory import open_bus
from crawlstream.errors import BusUnavailable, ConfigError
from crawlstream.settings import Settings
from crawlstream.topics import ALL_TOPICS, dlq_topic

if TYPE_CHECKING:
    from crawlstream.bus import KafkaBus

__all__ = ["SETTINGS_SECTIONS", "register", "run"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("bus",)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "topics",
        parents=[common],
        help="create every topic of the crawl and its dead-letter topic (before the services start)",
    )
    p.add_argument(
        "action",
        choices=["create", "add-partitions"],
        help="create: the missing topics, existing ones are left alone; add-partitions: grow every topic "
        "to --partitions (Kafka only; restart the services afterwards, see docs/RUNBOOK.md)",
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of each topic (a divisor of 128; default CRAWLSTREAM_BUS_PARTITIONS; required by "
        "add-partitions)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "add-partitions":
        return _add_partitions(args, settings)
    partitions = args.partitions if args.partitions is not None else settings.bus.partitions
    if partitions < 1 or 128 % partitions:
        raise ConfigError(f"--partitions: expected a divisor of 128 (1, 2, 4, ..., 128), found {partitions}")
    settings = dataclasses.replace(settings, bus=dataclasses.replace(settings.bus, partitions=partitions))
    names = [*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)]
    bus = open_bus(settings)
    try:
        bus.create_topics(names, partitions)
        counts = {name: bus.partition_count(name) for name in names}
    finally:
        bus.close()
    sys.stdout.write(json.dumps({"topics": counts}) + "\n")
    return 0


def _add_partitions(args: argparse.Namespace, settings: Settings) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    from crawlstream.bus import KafkaBus

    wanted = args.partitions
    if wanted is None or wanted < 1 or 128 % wanted:
        raise ConfigError(f"--partitions: expected a divisor of 128 (1, 2, 4, ..., 128), found {wanted}")
    if not settings.kafka_bootstrap_servers:
        raise ConfigError(
            "topics add-partitions: the embedded bus's partition count is fixed when its data dir is created "
            "(CRAWLSTREAM_BUS_PARTITIONS); set KAFKA_BOOTSTRAP_SERVERS to grow a Kafka cluster's topics"
        )
    names = [*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)]
    bus = KafkaBus.from_settings(settings)
    try:
        bus.create_topics(names, settings.bus.partitions)  # a missing topic first gets the configured count
        before = {name: bus.partition_count(name) for name in names}
        too_many = {name: n for name, n in before.items() if n > wanted}
        if too_many:
            raise ConfigError(
                f"--partitions {wanted}: Kafka cannot remove partitions, and these topics have more: {too_many}"
            )
        grow = [name for name, n in before.items() if n < wanted]
        if grow:
            # The bus's own admin client (same connection settings); adding partitions is the one
            # admin call the bus interface does not have, and only this command makes it.
            admin = bus._admin_client()
            futures = admin.create_partitions([NewPartitions(name, wanted) for name in grow], request_timeout=30)
            for name, future in futures.items():
                try:
                    future.result(35)
                except KafkaException as exc:
                    raise BusUnavailable(
                        f"adding partitions to {name!r} ({before[name]} -> {wanted}) failed: {exc}"
                    ) from exc
            _wait_for_counts(bus, grow, wanted)
        after = {name: bus.partition_count(name) for name in names}
    finally:
        bus.close()
    out = {"topics": after, "grown": {name: [before[name], after[name]] for name in grow}}
    sys.stdout.write(json.dumps(out) + "\n")
    if grow:
        sys.stderr.write(
            "crawlstream topics: partitions added; restart every service so producers route by the new count "
            "(docs/RUNBOOK.md, Add partitions)\n"
        )
    return 0


def _wait_for_counts(bus: KafkaBus, topics: list[str], wanted: int, timeout_s: float = 30.0) -> dict[str, int]:
    """Until the cluster's metadata shows ``wanted`` partitions, each with a leader, for every
    topic: CreatePartitions returns before the controller's change reaches every broker."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = {name: bus.partition_count(name) for name in topics}
        if all(n == wanted for n in counts.values()):
            bus._wait_for_leaders(topics)
            return counts
        if time.monotonic() > deadline:
            raise BusUnavailable(f"partitions added, but after {timeout_s:.0f} s the metadata still shows {counts}")
        time.sleep(0.1)
