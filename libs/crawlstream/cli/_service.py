"""``crawlstream service <name>``: run one service against the configured bus and Redis.

The process serves its Prometheus registry (``prometheus_client.REGISTRY``: the service's
families, plus the client's process and Python ones) on ``metrics.host``, port
``metrics.port`` or the service's own (``crawlstream.metrics.SERVICE_METRICS_PORTS``).
"""

from __future__ import annotations

import argparse
import logging

from prometheus_client import REGISTRY

from crawlstream.logs import set_default_service
from crawlstream.metrics import metrics_port, serve_metrics
from crawlstream.roles import SERVICE_NAMES, role
from crawlstream.runtime import limit_malloc_arenas
from crawlstream.settings import Settings, describe

logger = logging.getLogger(__name__)


# The settings sections `--help` lists (crawlstream.cli._help): None = every one.
SETTINGS_SECTIONS: tuple[str, ...] | None = None


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "service",
        parents=[common],
        help="run one service (Kafka when KAFKA_BOOTSTRAP_SERVERS is set, else the embedded log)",
    )
    p.add_argument("name", choices=SERVICE_NAMES, help="the service to run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    # First: glibc fixes its arena limit when the first thread (the metrics server's) allocates.
    limit_malloc_arenas(settings.memory_malloc_arenas)
    module = role(args.name).module()
    set_default_service(args.name)
    logger.info("starting service %s with %s", args.name, describe(settings))
    with serve_metrics(REGISTRY, settings.metrics.host, metrics_port(settings.metrics.port, args.name)):
        return int(module.run(settings) or 0)
