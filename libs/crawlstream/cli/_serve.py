"""``crawlstream serve``: the query API on ``--api-host``/``--api-port`` (same code as the
``query-api`` service)."""

from __future__ import annotations

import argparse

from crawlstream.settings import Settings

# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("api", "index", "store", "bus", "metrics")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "serve",
        parents=[common],
        help="serve the query API (domain -> datasets -> URLs) from the index under the data dir",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api import serve

    return serve(settings)
