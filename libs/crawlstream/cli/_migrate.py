"""``crawlstream migrate postgres --dsn DSN``: move the seed crawler's state into this data dir.

Streams ``domain_metadata``, ``visited_urls`` and ``frontier`` (server-side cursors) and
writes each row's state through ``crawlstream.migrate.PostgresMigrator``: visited URLs are
never fetched again and land in the lake as dataset ``--dataset-id`` (default: the crawl's),
frontier URLs wait in their domains' frontier files, robots.txt bodies, exclusions and next
fetch times go to the scheduler's Redis. Progress goes to stderr, the report (rows by
outcome per table, invalid rows by reason) to stdout as JSON. Running it again resumes an
interrupted migration, and does nothing after a finished one (``--restart`` starts over).

Embedded mode (the data dir's bus and Redis) refuses while ``crawlstream run`` holds the data
dir. With ``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL`` the rows are published to that Kafka and
the domain state goes to that Redis, but the Bloom filters and frontier files are still
written under ``--data-dir``: run it with the data dir of the deduper and scheduler, stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from crawlstream.dedupe import Deduper
from crawlstream.durable import try_lock_exclusive
from crawlstream.errors import ConfigError
from crawlstream.events import UrlRecordPublisher
from crawlstream.lake import LakeWriter
from crawlstream.migrate import (
    MigrationReport,
    PostgresMigrator,
    PostgresSource,
    TableReport,
    finished_report,
)
from crawlstream.politeness import Controls, Scheduler
from crawlstream.redisconn import attach_redis
from crawlstream.robots import ImportedRobots
from crawlstream.settings import Settings
from crawlstream.topics import IN_LAKE_HEADER, URLS_DISCOVERED, URLS_FRONTIER

__all__ = ["SETTINGS_SECTIONS", "migrate_postgres", "register", "run_postgres"]


# The settings sections `--help` lists (crawlstream.cli._help): those this command reads.
SETTINGS_SECTIONS: tuple[str, ...] | None = ("bus", "dedupe", "scheduler", "fetch", "store", "lake", "crawl", "metrics")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("migrate", help="move a crawl's state from another crawler into this data dir")
    sources = p.add_subparsers(dest="migrate_source", metavar="SOURCE", required=True)
    q = sources.add_parser(
        "postgres",
        parents=[common],
        help="the seed crawler's PostgreSQL tables (visited_urls, frontier, domain_metadata)",
        epilog=(
            "Idempotent and resumable: the checkpoint lives in <data dir>/migrate/. The JSON report on stdout "
            "counts every row of each table under one outcome; invalid rows also by reason."
        ),
    )
    q.add_argument("--dsn", required=True, help="libpq connection string or URI of the source database")
    q.add_argument(
        "--dataset-id", type=int, default=None, help="lake dataset of the visited URLs (default: the crawl dataset id)"
    )
    q.add_argument(
        "--content-root",
        type=Path,
        default=None,
        help="directory content_storage_path values are relative to (bodies are imported only with it)",
    )
    q.add_argument("--batch-rows", type=int, default=5000, help="rows per cursor fetch (default: %(default)s)")
    q.add_argument(
        "--checkpoint-rows",
        type=int,
        default=250_000,
        help="checkpoint at least every N rows: what a crash costs again, and the lake rows held in memory",
    )
    q.add_argument("--checkpoint-interval-s", type=float, default=60.0, help="checkpoint at least this often")
    q.add_argument("--restart", action="store_true", help="forget the checkpoint and migrate every row again")
    q.add_argument("--no-publish", action="store_true", help="do not also send the lake rows to urls.records")
    q.set_defaults(func=run_postgres)


class _Progress:
    """Rate-limited progress line on stderr (rewritten in place on a terminal)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.last = 0.0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.rows_before: dict[str, int] = {}

    def __call__(self, table_name: str, table: TableReport, estimate: int) -> None:
        now = time.monotonic()
        if not table.done and now - self.last < self.interval_s:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        share = f" ({100 * table.rows / estimate:.0f}% of ~{estimate:,})" if estimate > 0 else ""
        invalid = sum(table.invalid_by_reason.values())
        line = (
            f"migrate {table_name}: {table.rows:,} rows{share}, {table.rows / elapsed:,.0f} rows/s, "
            f"invalid {invalid:,}{' done' if table.done else ''}"
        )
        sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        if table.done:
            if self.tty:
                sys.stderr.write("\n")
            self.started = time.monotonic()
        sys.stderr.flush()


def run_postgres(args: argparse.Namespace, settings: Settings) -> int:
    for name in ("batch_rows", "checkpoint_rows"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    state_dir = settings.data_dir / "migrate"
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = try_lock_exclusive(state_dir / "postgres.lock")
    if lock is None:
        raise ConfigError(f"another `crawlstream migrate` runs on {settings.data_dir}; wait for it to finish")
    try:
        report = migrate_postgres(settings, args)
    finally:
        os.close(lock)
    sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    return 0


def migrate_postgres(
    settings: Settings, args: argparse.Namespace, *, on_batch: Callable[[str, int], None] | None = None
) -> MigrationReport:
    """Build the migrator from ``settings`` and run it (the command without its lock and output);
    ``on_batch`` is the migrator's test hook."""
    from crawlstream.runtime import open_host
    from crawlstream.store import open_store

    dataset_id = settings.crawl.dataset_id if args.dataset_id is None else args.dataset_id
    state_dir = settings.data_dir / "migrate"
    with ExitStack() as stack:
        source = stack.enter_context(PostgresSource(args.dsn, batch_rows=args.batch_rows))
        if not args.restart:
            done = finished_report(state_dir, source.identity, dataset_id)
            if done is not None:  # nothing to do: open no store, bus or Redis
                return done
        handle = stack.enter_context(attach_redis(settings.redis_url, settings.data_dir))
        if settings.redis_url is None and not handle.embedded:
            raise ConfigError(
                f"a crawl is running on {settings.data_dir} (its Redis is up): stop `crawlstream run`, then migrate"
            )
        client = handle.client
        host = stack.enter_context(open_host(settings))
        events = host.event_producer()
        publish = published = publish_visited = None
        if not args.no_publish:
            # Precompiled UrlRecord values (ADR 017: ~5x cheaper than EventProducer.send per row).
            publisher = UrlRecordPublisher(events, host.codec, [(IN_LAKE_HEADER, b"1")])
            publish, published, publish_visited = publisher, publisher.flush, publisher.visited
        migrator = PostgresMigrator(
            source,
            state_dir=state_dir,
            dataset_id=dataset_id,
            deduper=Deduper.from_settings(settings),
            scheduler=Scheduler.from_settings(settings, client),
            # The sink's fast level: a migration writes a file per prefix per checkpoint, which
            # `index compact` merges and rewrites at lake.zstd_level (ADR 017: zstd 19 was ~1.2 s per 100k rows).
            lake=LakeWriter.from_settings(settings, zstd_level=settings.lake.sink_zstd_level),
            robots=ImportedRobots(lambda: client),
            controls=Controls(client),
            dedupe_partitions=events.partition_count(URLS_DISCOVERED),
            scheduler_partitions=events.partition_count(URLS_FRONTIER),
            content_root=args.content_root,
            open_store=lambda: open_store(settings),
            publish=publish,
            published=published,
            publish_visited=publish_visited,
            max_body_bytes=settings.fetch.max_body_bytes,
            checkpoint_rows=args.checkpoint_rows,
            checkpoint_interval_s=args.checkpoint_interval_s,
            progress=_Progress(settings.crawl.progress_interval_s),
            on_batch=on_batch,
        )
        stack.callback(migrator.close)
        return migrator.run(restart=args.restart)
