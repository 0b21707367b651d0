"""``crawlstream store verify | rebuild-index | stats | maintain | tag``: integrity, repair, space and tags
of the content store."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import TextIO

from crawlstream.settings import Settings
from crawlstream.store import RecompressReport, open_store

# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("store",)


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
    stats = actions.add_parser(
        "stats",
        parents=[common],
        help="print counts, live and dead bytes, records per tier, the on-disk ratio (raw bytes / every byte "
        "the store keeps) and quarantined URLs as JSON",
    )
    stats.set_defaults(func=run_stats)
    maintain = actions.add_parser(
        "maintain",
        parents=[common],
        help="move pages down the tiers by age and compact dead space, in bounded steps until nothing is due "
        "(progress on stderr, summary as JSON); stop the bucket compressor first (one writer per store)",
    )
    maintain.add_argument(
        "--now", action="store_true", help="treat every tier age as zero: everything moves to the archive tier"
    )
    maintain.add_argument("--no-compact", action="store_true", help="only move pages between tiers")
    maintain.set_defaults(func=run_maintain)
    tag = actions.add_parser(
        "tag", parents=[common], help="add (or with --remove, remove) tags of a stored page; prints its tags"
    )
    tag.add_argument("url", help="the page's URL (any spelling of it)")
    tag.add_argument("tags", nargs="+", metavar="TAG", help="tags to add or remove")
    tag.add_argument("--remove", action="store_true", help="remove the tags instead of adding them")
    tag.set_defaults(func=run_tag)


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings) as store:
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
    with open_store(settings) as store:
        count = store.rebuild_index()
        sys.stdout.write(json.dumps({"index_entries": count, "live_urls": len(store)}) + "\n")
    return 0


def run_stats(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.status import save_store_stats

    with open_store(settings) as store:
        st = store.stats()
    save_store_stats(settings.data_dir, st)  # the status page's last known numbers
    out = asdict(st) | {"stored_bytes": st.stored_bytes, "ratio": round(st.ratio, 3)}
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0


class MaintainProgress:
    """One stderr line per step (rewritten in place on a terminal): bytes moved, MB/s, ETA."""

    def __init__(self, total_bytes: int, stream: TextIO) -> None:
        self.total_bytes = total_bytes
        self.done_bytes = 0
        self.steps = 0
        self._stream = stream
        self._tty = stream.isatty()
        self._started = time.monotonic()

    def __call__(self, report: RecompressReport) -> None:
        self.steps += 1
        self.done_bytes += report.raw_bytes
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = self.done_bytes / elapsed
        left = max(self.total_bytes - self.done_bytes, 0)
        eta = f"{left / rate:.0f} s" if rate > 0 and left else "-"
        line = (
            f"store maintain: step {self.steps} ({report.kind} -> {report.tier}): "
            f"{self.done_bytes / 1e6:.1f} / {self.total_bytes / 1e6:.1f} MB moved, {rate / 1e6:.2f} MB/s, ETA {eta}"
        )
        self._stream.write(("\r" + line + "\x1b[K") if self._tty else line + "\n")
        self._stream.flush()

    def finish(self) -> None:
        if self._tty and self.steps:
            self._stream.write("\n")
            self._stream.flush()


def run_maintain(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.status import save_store_stats

    started = time.monotonic()
    with open_store(settings) as store:
        backlog = store.maintenance_backlog(ages_zero=args.now)
        progress = MaintainProgress(backlog["tier_bytes"] + backlog["compact_bytes"], sys.stderr)
        try:
            report = store.maintain(ages_zero=args.now, compact=not args.no_compact, progress=progress)
        finally:
            progress.finish()
        st = store.stats()
    save_store_stats(settings.data_dir, st)  # the status page's last known numbers
    elapsed = time.monotonic() - started
    out = {
        "steps": progress.steps,
        "moved_urls": report.moved_urls,
        "moved_bytes": report.raw_bytes,
        "mb_per_s": round(report.raw_bytes / 1e6 / elapsed, 2) if elapsed else 0.0,
        "dictionaries_trained": report.dictionaries_trained,
        "dictionaries_retrained": report.retrained,  # "domain:reason" ("*": the global one)
        "segments_written": len(report.segments_written),
        "segments_removed": len(report.segments_removed),
        "freed_bytes": report.freed_bytes,
        "skipped_corrupt": report.skipped_corrupt,
        "skipped_changed": report.skipped_changed,
        "stored_bytes": st.stored_bytes,
        "dead_bytes": st.dead_bytes,
        "ratio": round(st.ratio, 3),
        "seconds": round(elapsed, 1),
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def run_tag(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.api._inputs import has_control_chars
    from crawlstream.errors import BadDataError

    bad = [t for t in args.tags if not t or has_control_chars(t)]
    if bad:
        raise BadDataError(f"tags must be non-empty printable text, found {bad[0]!r}")
    with open_store(settings) as store:
        try:
            (store.untag if args.remove else store.tag)(args.url, *args.tags)
        except KeyError:
            sys.stderr.write(f"crawlstream store tag: {args.url} is not stored\n")
            return 1
        entry = store.entry(args.url)
        assert entry is not None
        sys.stdout.write(json.dumps({"url": entry.url, "tags": sorted(entry.tags)}) + "\n")
    return 0
