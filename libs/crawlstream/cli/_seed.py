"""``crawlstream seed``: stream seed URLs onto ``urls.discovered`` of the configured bus.

How a distributed crawl starts (services running as processes against
``KAFKA_BOOTSTRAP_SERVERS`` and ``REDIS_URL``), and how seeds join a running one: seeds pass
through dedupe like any discovered URL, so seeding a URL twice crawls it once. Inputs are
URLs, files of one URL per line (gzip detected by content) and ``-`` for stdin, streamed
(millions of lines in bounded memory); progress goes to stderr, and one JSON line of counts
by outcome (invalid lines by reason) to stdout. ``--priority N`` marks every seed as fetched
before its domain's other URLs (and its domain before domains without such URLs), a line
``URL N`` marks one; higher first, 0 = normal (ADR 016).
"""

from __future__ import annotations

import argparse
import json
import sys

from crawlstream.bus import EmbeddedBus
from crawlstream.crawl import SeedIntake, SeedProgress, open_seed_sources
from crawlstream.errors import ConfigError
from crawlstream.frontier import MAX_PRIORITY
from crawlstream.runtime import open_host
from crawlstream.settings import Settings

__all__ = ["SETTINGS_SECTIONS", "register", "run"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("bus", "crawl", "metrics")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "seed",
        parents=[common],
        help="send seed URLs to urls.discovered (Kafka when KAFKA_BOOTSTRAP_SERVERS is set, else the embedded log)",
        description="Stream seed URLs onto urls.discovered: URL arguments, files of one URL per line "
        "(plain or gzip) and '-' for stdin. Blank lines and '#' comments are skipped; invalid lines are "
        "counted by reason, not fatal. A line 'URL N' (whitespace, then an integer) gives that URL priority "
        "N, overriding --priority. Progress on stderr; a JSON line of counts on stdout.",
    )
    p.add_argument("inputs", nargs="*", metavar="FILE_OR_URL", help="seed files (gzip allowed), URLs, or - for stdin")
    p.add_argument(
        "--seeds",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE_OR_URL",
        help="the same as the positional inputs (repeatable)",
    )
    p.add_argument(
        "--priority",
        type=_priority,
        default=None,
        metavar="N",
        help="scheduling priority of every seed, 0..2147483647, higher first (default 0 = normal): a "
        "domain fetches its prioritised URLs before the others, within its politeness delay",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    p.set_defaults(func=run)


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer 0..{MAX_PRIORITY}, found {text!r}") from None
    if not 0 <= value <= MAX_PRIORITY:
        raise argparse.ArgumentTypeError(f"expected an integer 0..{MAX_PRIORITY} (0 = normal), found {value}")
    return value


def run(args: argparse.Namespace, settings: Settings) -> int:
    specs = [*args.seeds, *args.inputs]
    if not specs:
        raise ConfigError(
            "crawlstream seed needs inputs: URLs, files of one URL per line (gzip allowed) or - for stdin"
        )
    sources = open_seed_sources(specs)
    sizes = [s.size_bytes for s in sources if not s.is_url]
    total = sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None
    progress = None if args.no_progress else SeedProgress(sys.stderr, total or None)
    with open_host(settings) as host:
        # The embedded producer holds what it is given until flush: flush every 50k. Kafka's
        # bounds its own queue, and a flush there waits for the broker: only at the end.
        flush_every = 50_000 if isinstance(host.bus, EmbeddedBus) else 0
        intake = SeedIntake(
            host.event_producer(),
            host.codec,
            settings.crawl.dataset_id,
            flush_every=flush_every,
            priority=getattr(args, "priority", None),
        )
        report = intake.run(sources, progress)
    sys.stdout.write(json.dumps(report.to_json()) + "\n")
    if not report.sent and not report.duplicate:
        raise ConfigError(
            f"seed inputs {' '.join(specs)!r} named no valid URL ({report.lines} lines, invalid by reason: "
            f"{dict(report.invalid_by_reason)}); give URLs or files of URLs"
        )
    return 0
