"""``crawlstream export-warc [--domain D] OUT.warc.gz``: stored pages as WARC/1.1 response records."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from crawlstream.errors import StorageUnavailable
from crawlstream.settings import Settings
from crawlstream.store import ContentStore, export_warc


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "export-warc", parents=[common], help="write stored pages as a gzipped WARC/1.1 file (warcio-readable)"
    )
    p.add_argument("out", type=Path, metavar="OUT.warc.gz", help="file to write (replaced atomically)")
    p.add_argument("--domain", default=None, help="only this registered domain (default: everything)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    out: Path = args.out
    tmp = out.with_name(out.name + ".tmp")
    with ContentStore.from_settings(settings) as store:
        try:
            with open(tmp, "wb") as fh:
                written, skipped = export_warc(store, fh, domain=args.domain)
            os.replace(tmp, out)
        except OSError as exc:
            raise StorageUnavailable(f"could not write {out}: {exc}") from exc
    sys.stdout.write(json.dumps({"out": str(out), "records": written, "skipped_corrupt": skipped}) + "\n")
    return 0 if not skipped else 1
