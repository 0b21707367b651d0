"""The ``crawlstream`` command: the one entry point that reads the environment.

Each sub-command lives in its own module ``crawlstream.cli._<name>`` exposing
``register(subparsers, common)`` (``common``: the parent parser of the settings flags) and
``SETTINGS_SECTIONS``, the settings sections its ``--help`` lists (None: all; see
``crawlstream.cli._help``); the module sets ``func(args, settings) -> int`` as the parser
default. ``main`` parses flags, builds the process's one ``Settings`` (flags > env >
defaults), configures logging, and runs the command. Errors of the ``CrawlstreamError``
family end the process with a one-line message and exit code 2 (bad usage/config) or 1.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from crawlstream.cli._help import CommandParser, show_sections
from crawlstream.errors import ConfigError, CrawlstreamError
from crawlstream.logs import configure_logging
from crawlstream.settings import Settings, add_arguments, describe, load

__all__ = ["SETTINGS_SECTIONS", "main"]

logger = logging.getLogger(__name__)

# Sub-command modules, in --help order.
_COMMANDS = (
    "_run",
    "_seed",
    "_exclude",
    "_refetch",
    "_domain",
    "_service",
    "_ingest",
    "_spark_ingest",
    "_index",
    "_serve",
    "_tokens",
    "_store",
    "_export_warc",
    "_demo",
    "_demo_web",
    "_local_kafka",
    "_local_s3",
    "_topics",
    "_replay",
    "_migrate",
    "_settings",
)


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="crawlstream",
        description="Polite streaming crawler, compact content store and domain -> datasets -> URLs index.",
    )
    common = argparse.ArgumentParser(add_help=False)
    add_arguments(common, Settings)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"crawlstream.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"crawlstream.cli.{name}":
                raise
            continue
        before = set(sub.choices)
        module.register(sub, common)
        added = [p for name, p in sub.choices.items() if name not in before]
        show_sections(added, module.SETTINGS_SECTIONS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = load(os.environ, args)
    except ConfigError as exc:
        parser.exit(2, f"crawlstream: configuration error: {exc}\n")
    configure_logging(settings.log_level, fmt=settings.log_format)
    logger.debug("effective settings: %s", describe(settings))
    try:
        return int(args.func(args, settings) or 0)
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        print(f"crawlstream: configuration error: {exc}", file=sys.stderr)
        return 2
    except CrawlstreamError as exc:
        print(f"crawlstream: {exc}", file=sys.stderr)
        return 1
