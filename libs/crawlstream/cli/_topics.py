"""``crawlstream topics create``: create every topic of the crawl, then exit.

The step a deployment runs before its services start (docker-compose's one-shot ``topics``
service; on Kubernetes, Strimzi ``KafkaTopic`` resources do the same): the six topics and
their dead-letter topics, with ``--partitions`` partitions and ``TopicPolicy``'s replicas,
retention and limits (ADR 011). Services also create missing topics when they start, but
only the six (dead-letter topics appear on their first message), and several services
racing to create them is what this step avoids. Existing topics are left as they are. One
JSON line on stdout: each topic with the partition count it has.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from crawlstream.bus._factory import open_bus
from crawlstream.errors import ConfigError
from crawlstream.settings import Settings
from crawlstream.topics import ALL_TOPICS, dlq_topic

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "topics",
        parents=[common],
        help="create every topic of the crawl and its dead-letter topic (before the services start)",
    )
    p.add_argument("action", choices=["create"], help="create: the missing topics; existing ones are left alone")
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of each topic (a divisor of 128; default CRAWLSTREAM_BUS_PARTITIONS)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
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
