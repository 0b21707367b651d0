"""``crawlstream refetch URL_OR_FILE...``: fetch pages again, past dedupe (ADR 022).

For quarantined pages (``--quarantined`` takes every one the content store lists) and pages a
user wants fresh: the URLs go to ``urls.frontier`` marked ``refetch`` (Kafka when
``KAFKA_BOOTSTRAP_SERVERS`` is set, else the data dir's embedded log, which a running
``crawlstream run`` holds: send them before the next run, or run the crawl on Kafka). Each is
fetched once, politely, without validators; the new body replaces the stored one. Prints one
JSON line: URLs sent, lines read, duplicates, invalid lines by reason.

Who may run it: whoever can write to the bus (the data dir, or the Kafka cluster).
"""

from __future__ import annotations

import argparse
import json
import sys

from crawlstream.errors import ConfigError
from crawlstream.politeness import read_refetch_urls, send_refetch
from crawlstream.runtime import open_host
from crawlstream.settings import Settings

__all__ = ["SETTINGS_SECTIONS", "register", "run"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("bus", "crawl", "store", "metrics")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "refetch",
        parents=[common],
        help="fetch URLs again past dedupe (quarantined pages, pages wanted fresh); the new body replaces the old",
    )
    p.add_argument(
        "specs",
        nargs="*",
        metavar="URL_OR_FILE",
        help="URLs, files of one URL per line (gzip allowed), or - for stdin",
    )
    p.add_argument(
        "--quarantined",
        action="store_true",
        help="also every URL whose stored body is quarantined (from <data_dir>/store)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if not args.specs and not args.quarantined:
        raise ConfigError("refetch needs URLs, files of URLs, - (stdin) or --quarantined")
    batch = read_refetch_urls(args.specs)
    read = batch.summary()  # what the arguments named, before the store's quarantined URLs join
    quarantined = 0
    if args.quarantined:
        from crawlstream.store import open_store  # only this option needs the store

        with open_store(settings) as store:
            found = store.quarantined_urls()
        quarantined = len(found)
        known = set(batch.urls)
        batch.urls.extend(u for u in found if u not in known)
    if not batch.urls:
        sys.stdout.write(json.dumps({"sent": 0, "quarantined": quarantined, **read}) + "\n")
        if batch.invalid:
            raise ConfigError(f"no valid URL to refetch ({sum(batch.invalid.values())} invalid lines)")
        return 0
    with open_host(settings) as host:
        sent = send_refetch(host.event_producer(), batch.urls, settings.crawl.dataset_id)
    sys.stdout.write(json.dumps({"sent": sent, "quarantined": quarantined, **read}) + "\n")
    return 0
