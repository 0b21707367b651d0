"""``crawlstream store verify | rebuild-index | stats``: integrity and repair of the content store."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from crawlstream.settings import Settings
from crawlstream.store import ContentStore


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("store", help="verify, repair and describe the content store")
    actions = p.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify", parents=[common], help="check every record's checksums; quarantine and report damage (exit 1 if any)"
    )
    verify.set_defaults(func=run_verify)
    rebuild = actions.add_parser(
        "rebuild-index",
        parents=[common],
        help="rewrite the index from the segment record headers (tombstones and tags kept)",
    )
    rebuild.set_defaults(func=run_rebuild)
    stats = actions.add_parser("stats", parents=[common], help="print counts, sizes and the compression ratio as JSON")
    stats.set_defaults(func=run_stats)


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    with ContentStore.from_settings(settings) as store:
        report = store.verify()
    out = {
        "segments": report.segments,
        "records": report.records,
        "bodies_checked": report.bodies_checked,
        "problems": [asdict(p) for p in report.problems],
        "ok": report.ok,
    }
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0 if report.ok else 1


def run_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    with ContentStore.from_settings(settings) as store:
        count = store.rebuild_index()
        sys.stdout.write(json.dumps({"index_entries": count, "live_urls": len(store)}) + "\n")
    return 0


def run_stats(args: argparse.Namespace, settings: Settings) -> int:
    with ContentStore.from_settings(settings) as store:
        st = store.stats()
    out = asdict(st) | {"stored_bytes": st.stored_bytes, "ratio": round(st.ratio, 3)}
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0
