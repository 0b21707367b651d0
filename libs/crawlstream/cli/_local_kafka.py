"""``crawlstream local-kafka``: a real Apache Kafka (KRaft) cluster on loopback, until Ctrl-C.

What the README's "distributed crawl, locally" runs instead of Docker: N brokers on free
ports of 127.0.0.1 (kept in ``<data dir>/kafka`` when ``--data-dir`` is given), the crawl's
topics created with ``--partitions`` partitions (and the replication the cluster's size
allows), then one line on stdout, ``KAFKA_BOOTSTRAP_SERVERS=host:port,...``, once every
broker answers. SIGTERM or Ctrl-C stops every broker cleanly. The jars come from
``make kafka``; nothing is downloaded here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from typing import Any

from crawlstream.settings import Settings

__all__ = ["SETTINGS_SECTIONS", "register", "run"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("bus",)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "local-kafka",
        parents=[common],
        help="run a real Kafka cluster (KRaft) on 127.0.0.1 until Ctrl-C; prints KAFKA_BOOTSTRAP_SERVERS=...",
    )
    p.add_argument(
        "--brokers", type=int, default=1, help="brokers (each also a KRaft controller); 3 tolerates one failure"
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of the crawl's topics, created at start "
        "(a divisor of 128; default CRAWLSTREAM_BUS_PARTITIONS)",
    )
    p.add_argument("--no-topics", action="store_true", help="do not create the crawl's topics at start")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.bus import KafkaBus
    from crawlstream.devtools.localkafka import LocalKafka
    from crawlstream.errors import ConfigError
    from crawlstream.topics import ALL_TOPICS, dlq_topic

    partitions = args.partitions if args.partitions is not None else settings.bus.partitions
    if partitions < 1 or 128 % partitions:
        raise ConfigError(f"--partitions: expected a divisor of 128 (1, 2, 4, ..., 128), found {partitions}")
    # --data-dir (or CRAWLSTREAM_DATA_DIR) keeps the cluster in <data dir>/kafka across runs;
    # without either it lives in a temp dir removed on exit.
    given = args.data_dir is not None or "CRAWLSTREAM_DATA_DIR" in os.environ
    kafka_dir = settings.data_dir / "kafka" if given else None
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with LocalKafka(brokers=args.brokers, data_dir=kafka_dir, partitions=partitions) as kafka:
        if not args.no_topics:
            topic_settings = dataclasses.replace(
                settings,
                kafka_bootstrap_servers=kafka.bootstrap_servers,
                bus=dataclasses.replace(settings.bus, partitions=partitions),
            )
            bus = KafkaBus.from_settings(topic_settings)
            try:
                bus.create_topics([*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)], partitions)
            finally:
                bus.close()
        sys.stdout.write(f"KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}\n")
        sys.stdout.flush()
        sys.stderr.write(
            f"Kafka: {args.brokers} broker(s), topics with {partitions} partitions; logs in "
            f"{kafka.log_file(kafka.node_ids[0]).parent.parent}. Ctrl-C stops it.\n"
        )
        while not stop.wait(1.0):
            for node_id in kafka.node_ids:
                if kafka.pid_of(node_id) is None:
                    sys.stderr.write(f"Kafka node {node_id} exited; see {kafka.log_file(node_id)}\n")
                    return 1
    return 0
