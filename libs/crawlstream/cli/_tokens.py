"""``crawlstream tokens init | add | list | revoke``: the query API's bearer tokens.

The file is ``--api-tokens-file`` / ``CRAWLSTREAM_API_TOKENS_FILE`` if set, else the one the API
creates in ``<data_dir>/api/tokens.json``. A running API picks changes up within a second, so a
token rotates without a restart: add the new one, move clients to it, revoke the old one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from crawlstream.errors import ConfigError
from crawlstream.settings import Settings

# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("api",)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tokens", help="add, list and revoke the query API's bearer tokens")
    actions = p.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init", parents=[common], help="create the tokens file with one admin token unless it exists (deployments)"
    )
    init.set_defaults(func=run_init)
    add = actions.add_parser(
        "add", parents=[common], help="create a token and print it (once: only its fingerprint is kept visible)"
    )
    add.add_argument(
        "--datasets",
        default="*",
        help="dataset ids the token may read, comma-separated, or '*' for every dataset (default)",
    )
    add.add_argument("--delete", action="store_true", help="also allow deleting stored content")
    add.set_defaults(func=run_add)
    listing = actions.add_parser("list", parents=[common], help="print each token's fingerprint and rights as JSON")
    listing.set_defaults(func=run_list)
    revoke = actions.add_parser("revoke", parents=[common], help="remove the token with this fingerprint")
    revoke.add_argument("fingerprint", help="the 8-hex-digit fingerprint `tokens list` shows")
    revoke.set_defaults(func=run_revoke)


def tokens_path(settings: Settings) -> Path:
    from crawlstream.api import default_tokens_path

    return settings.api.tokens_file or default_tokens_path(settings.data_dir)


def _datasets(raw: str) -> list[int] | None:
    if raw.strip() == "*":
        return None
    try:
        ids = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--datasets: expected '*' or comma-separated dataset ids, found {raw!r}") from None
    if not ids or any(not 0 <= d < 2**32 for d in ids):
        raise ConfigError(f"--datasets: expected '*' or dataset ids in 0..2^32-1, found {raw!r}")
    return ids


def run_init(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api import ensure_tokens_file

    path = tokens_path(settings)
    created = ensure_tokens_file(path)
    sys.stderr.write(f"{'created' if created else 'kept the existing'} tokens file {path}\n")
    return 0


def run_add(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api import add_token

    path = tokens_path(settings)
    token = add_token(path, _datasets(args.datasets), delete=args.delete)
    sys.stderr.write(f"added to {path}; a running API uses it within a second\n")
    sys.stdout.write(token + "\n")
    return 0


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api import describe_tokens

    path = tokens_path(settings)
    rows = [{"fingerprint": t.fingerprint, "datasets": t.datasets, "delete": t.delete} for t in describe_tokens(path)]
    sys.stdout.write(json.dumps({"file": str(path), "tokens": rows}, indent=2) + "\n")
    return 0


def run_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api import revoke_token

    path = tokens_path(settings)
    revoke_token(path, args.fingerprint)
    sys.stderr.write(f"revoked {args.fingerprint} in {path}; a running API refuses it within a second\n")
    return 0
