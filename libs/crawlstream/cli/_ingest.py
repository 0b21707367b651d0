"""``crawlstream ingest FILE... --dataset-id N``: bulk-import a URL dataset into the lake.

Progress (rows, rate, invalid by reason) goes to stderr; the final JSON summary to stdout, in
which ``rows == valid + invalid`` and ``invalid`` is the sum of ``invalid_by_reason``, for the
whole run and for each entry of ``files``. Exit codes: 0 imported (rejected rows are counted,
not an error); 1 an input cannot be read as a whole (checked for every file before any row is
read, so nothing was imported); 3 imported, but a file was damaged part-way (a truncated
gzip/zstd stream, a Parquet row group that does not decode): its readable rows are in, the rest
is counted as ``truncated`` / ``parquet_row_group`` and the file is listed in ``damaged_files``.
As with ``crawlstream run``, log lines go to ``<data_dir>/logs/crawlstream.log`` unless
``--log-level`` is given: the terminal keeps the progress line and the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from crawlstream.events import EventProducer, UrlRecord
from crawlstream.ingest import FORMATS, FileStats, IngestStats, ingest_files
from crawlstream.lake import LakeWriter
from crawlstream.settings import Settings
from crawlstream.topics import IN_LAKE_HEADER, URLS_RECORDS

EXIT_DAMAGED = 3  # imported, but an input was damaged part-way (its readable rows are in)


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("lake", "bus", "metrics")


def add_input_arguments(p: argparse.ArgumentParser, *, metavar: str) -> None:
    """The inputs and read options `ingest` and `spark-ingest` share (one reader, one meaning)."""
    p.add_argument("files", nargs="+", type=Path, metavar=metavar)
    p.add_argument("--dataset-id", type=int, required=True, help="dataset id the rows are recorded under")
    p.add_argument("--format", choices=FORMATS, default="auto", help="input format (auto: by name, then content)")
    p.add_argument("--url-field", default="url", help="CSV column / JSON field / Parquet column of the URL")
    p.add_argument("--ts-field", default=None, help="optional timestamp field (epoch ms or ISO-8601)")
    p.add_argument("--no-extras", action="store_true", help="do not keep the other fields as JSON extras")
    p.add_argument("--no-rejects", action="store_true", help="do not write rejects/dataset_id=N/<file>.jsonl")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "ingest",
        parents=[common],
        help="import URL files (text/CSV/JSONL/Parquet, gz/zst) into the lake",
        epilog=(
            "Every row is counted: a JSON summary on stdout has rows = valid + invalid, invalid by reason, "
            "per file; each rejected row goes with its row number and reason to "
            "<data dir>/rejects/dataset_id=N/<file>.jsonl. Exit status: 0 imported; 1 an input cannot be "
            "read at all (nothing imported); 3 imported, but a file was damaged part-way (see damaged_files)."
        ),
    )
    add_input_arguments(p, metavar="FILE")
    p.add_argument(
        "--no-publish",
        action="store_true",
        help="do not also send the rows to urls.records (faster, but `crawlstream replay` cannot rebuild them)",
    )
    p.set_defaults(func=run)


class _Progress:
    """Rate-limited progress line on stderr (rewritten in place on a terminal)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.last = 0.0
        self.tty = sys.stderr.isatty()

    def __call__(self, stats: IngestStats, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < self.interval_s:
            return
        self.last = now
        reasons = ", ".join(f"{k}={v}" for k, v in stats.invalid.most_common(5)) or "none"
        line = (f"ingest dataset {stats.dataset_id}: {stats.rows:,} rows, {stats.rows_per_s:,.0f} rows/s, "
                f"invalid {sum(stats.invalid.values()):,} ({reasons})")
        sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        if final and self.tty:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _publisher(events: EventProducer) -> Callable[[int, str, str, int | None, str | None], None]:
    """Each lake row as a ``UrlRecord`` on ``urls.records``, marked as already in the lake:
    the live sink skips it, replay rebuilds it. Extras become the record's string map (a
    non-string value as its JSON text)."""
    header = [(IN_LAKE_HEADER, b"1")]

    def publish(dataset_id: int, url: str, domain: str, ts_ms: int | None, extras: str | None) -> None:
        parsed = json.loads(extras) if extras else {}
        fields = {k: v if isinstance(v, str) else json.dumps(v) for k, v in parsed.items()}
        events.send(URLS_RECORDS, UrlRecord(dataset_id, url, ts_ms, fields, domain), headers=header)

    return publish


def run(args: argparse.Namespace, settings: Settings) -> int:
    from crawlstream.cli._run import log_to_data_dir

    log_to_data_dir(args, settings, "ingest")
    progress = _Progress()
    writer = LakeWriter.from_settings(settings)
    rejects = None if args.no_rejects else settings.data_dir / "rejects" / f"dataset_id={args.dataset_id}"
    with ExitStack() as stack:
        publish = published = None
        if not args.no_publish:
            from crawlstream.runtime import open_host

            events = stack.enter_context(open_host(settings)).event_producer()
            publish, published = _publisher(events), events.flush
        stats = ingest_files(
            args.files,
            args.dataset_id,
            writer,
            fmt=args.format,
            url_field=args.url_field,
            ts_field=args.ts_field,
            keep_extras=not args.no_extras,
            rejects_dir=rejects,
            progress=progress,
            publish=publish,
            published=published,
        )
    progress(stats, final=True)
    return report(stats.to_json(), stats.damaged)


def report(summary: dict[str, Any], damaged: Sequence[FileStats]) -> int:
    """Print the run's JSON summary, name each file damaged part-way; the exit status."""
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    for file in damaged:
        damage = file.damage or {}
        sys.stderr.write(f"crawlstream: {file.path} is damaged from row {damage.get('row')}: "
                         f"{damage.get('error')}\n")
    return EXIT_DAMAGED if damaged else 0
