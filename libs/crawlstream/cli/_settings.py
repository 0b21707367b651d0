"""``crawlstream settings``: print the effective settings, or the README table of them."""

from __future__ import annotations

import argparse
import json
import sys

from crawlstream.settings import Settings, describe, iter_specs


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("settings", parents=[common], help="print the effective settings (secrets redacted)")
    p.add_argument("--markdown", action="store_true", help="print the documentation table of every setting")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.markdown:
        sys.stdout.write("| variable | flag | default | meaning |\n|---|---|---|---|\n")
        for spec in iter_specs(Settings):
            default = "unset" if spec.default is None else spec.default
            sys.stdout.write(f"| `{spec.env}` | `{spec.flag}` | `{default}` | {spec.help} |\n")
        return 0
    sys.stdout.write(json.dumps(describe(settings), indent=2, default=str) + "\n")
    return 0
