"""``crawlstream index build|compact|gc|info``: maintain index versions; JSON on stdout."""

from __future__ import annotations

import argparse
import json
import sys

from crawlstream.index import IndexBuilder
from crawlstream.settings import Settings

# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("index", "lake")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("index", help="build, compact, garbage-collect and describe index versions")
    actions = p.add_subparsers(dest="index_action", metavar="ACTION", required=True)
    b = actions.add_parser("build", parents=[common], help="index new lake files (incremental) and flip the manifest")
    b.add_argument("--full", action="store_true", help="rescan every lake file instead of only new ones")
    b.set_defaults(func=run)
    c = actions.add_parser("compact", parents=[common], help="merge fragmented lake partitions, then build")
    c.add_argument("--min-files", type=int, default=2, help="compact partitions with at least this many files")
    c.set_defaults(func=run)
    g = actions.add_parser("gc", parents=[common], help="remove old unpinned versions and retired lake files")
    g.add_argument("--keep", type=int, default=None, help="versions to keep (default: --index-keep-versions)")
    g.set_defaults(func=run)
    i = actions.add_parser("info", parents=[common], help="describe the current and kept versions")
    i.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    builder = IndexBuilder.from_settings(settings)
    action = args.index_action
    if action in ("build", "compact"):  # a whole version is written before the flip: refuse up front
        from crawlstream.index.service import check_disk_floor

        check_disk_floor(settings, builder, f"crawlstream index {action}")
    if action == "build":
        out = builder.build(full=args.full).to_json()
    elif action == "compact":
        out = builder.compact(min_files=args.min_files).to_json()
    elif action == "gc":
        out = builder.gc(keep_versions=args.keep).to_json()
    else:
        out = builder.info()
    sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
    return 0
