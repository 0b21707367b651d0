"""``crawlstream seed``: send seed URLs to ``urls.discovered`` on the configured bus.

How a distributed crawl starts (services running as processes against
``KAFKA_BOOTSTRAP_SERVERS`` and ``REDIS_URL``), and how seeds join a running one: seeds pass
through dedupe like any discovered URL, so seeding a URL twice crawls it once. The count
sent goes to stdout as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys

from crawlstream.crawl import read_seeds, send_seeds
from crawlstream.errors import ConfigError
from crawlstream.services._host import open_host
from crawlstream.settings import Settings

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "seed",
        parents=[common],
        help="send seed URLs to urls.discovered (Kafka when KAFKA_BOOTSTRAP_SERVERS is set, else the embedded log)",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        action="extend",
        required=True,
        metavar="FILE_OR_URL",
        help="seed URLs, or files of one URL per line (repeatable)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    urls = read_seeds(args.seeds)
    if not urls:
        raise ConfigError(f"--seeds {' '.join(args.seeds)!r} named no valid URL; give URLs or files of URLs")
    with open_host(settings) as host:
        send_seeds(host.event_producer(), urls, settings.crawl.dataset_id)
    sys.stdout.write(json.dumps({"seeded": len(urls)}) + "\n")
    return 0
