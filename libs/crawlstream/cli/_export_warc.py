"""``crawlstream export-warc [--domain D] [--max-file-bytes N] OUT.warc.gz``: stored pages as WARC/1.1
(response, request and metadata records per page; ``crawlstream.store._warc``), in one file or in
parts ``OUT-00000.warc.gz`` ... of about N bytes each."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from crawlstream.durable import atomic_file
from crawlstream.errors import ConfigError
from crawlstream.settings import Settings
from crawlstream.store import export_warc, open_store
from crawlstream.store._warc import export_warc_files

# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("store",)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "export-warc", parents=[common], help="write stored pages as a gzipped WARC/1.1 file (warcio-readable)"
    )
    p.add_argument("out", type=Path, metavar="OUT.warc.gz", help="file to write (replaced atomically)")
    p.add_argument("--domain", default=None, help="only this registered domain (default: everything)")
    p.add_argument(
        "--max-file-bytes",
        type=int,
        default=0,
        metavar="N",
        help="write parts OUT-00000.warc.gz ... and begin a new one once a part reaches N bytes (default: one file)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    out: Path = args.out
    if args.max_file_bytes < 0:
        raise ConfigError(f"--max-file-bytes must be positive (or 0 for one file), got {args.max_file_bytes}")
    if args.max_file_bytes:
        with open_store(settings) as store:
            files, written, skipped = export_warc_files(store, out, args.max_file_bytes, domain=args.domain)
        report = {"out": [str(f) for f in files], "records": written, "skipped_corrupt": skipped}
        sys.stdout.write(json.dumps(report) + "\n")
        return 0 if not skipped else 1
    with open_store(settings) as store, atomic_file(out) as fh:
        written, skipped = export_warc(store, fh, domain=args.domain)
    sys.stdout.write(json.dumps({"out": str(out), "records": written, "skipped_corrupt": skipped}) + "\n")
    return 0 if not skipped else 1
