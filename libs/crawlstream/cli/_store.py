"""``crawlstream store verify | rebuild-index | stats | tag``: integrity, repair and tags of the content store."""

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
    tag = actions.add_parser(
        "tag", parents=[common], help="add (or with --remove, remove) tags of a stored page; prints its tags"
    )
    tag.add_argument("url", help="the page's URL (any spelling of it)")
    tag.add_argument("tags", nargs="+", metavar="TAG", help="tags to add or remove")
    tag.add_argument("--remove", action="store_true", help="remove the tags instead of adding them")
    tag.set_defaults(func=run_tag)


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


def run_tag(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.errors import BadDataError

    bad = [t for t in args.tags if not t or any(ord(c) < 0x20 or c == "\x7f" for c in t)]
    if bad:
        raise BadDataError(f"tags must be non-empty printable text, found {bad[0]!r}")
    with ContentStore.from_settings(settings) as store:
        try:
            (store.untag if args.remove else store.tag)(args.url, *args.tags)
        except KeyError:
            sys.stderr.write(f"crawlstream store tag: {args.url} is not stored\n")
            return 1
        entry = store.entry(args.url)
        assert entry is not None
        sys.stdout.write(json.dumps({"url": entry.url, "tags": sorted(entry.tags)}) + "\n")
    return 0
