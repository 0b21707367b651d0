"""Migration of a crawl's state from the seed crawler's PostgreSQL tables (``crawlstream migrate``).

``PostgresSource`` streams ``visited_urls``, ``frontier`` and ``domain_metadata`` with
server-side cursors; ``PostgresMigrator`` turns each row into crawlstream state through the
component that owns it (dedupe, frontier/scheduler, lake, content store, robots, controls),
checkpointed per table so it resumes after a crash and runs a second time as a no-op.
See docs/decisions/017-postgres-migration.md.
"""

from crawlstream.migrate._migrator import (
    CHECKPOINT_VERSION,
    MigrationReport,
    PostgresMigrator,
    few_collections,
    finished_report,
)
from crawlstream.migrate._source import SEED_SCHEMA_SQL, TABLES, PostgresSource, SourceUnavailable, TableSpec
from crawlstream.migrate._values import TableReport, epoch_ms, flag, frontier_depth, http_status, robots_bytes

__all__ = [
    "CHECKPOINT_VERSION",
    "SEED_SCHEMA_SQL",
    "TABLES",
    "MigrationReport",
    "PostgresMigrator",
    "PostgresSource",
    "SourceUnavailable",
    "TableReport",
    "TableSpec",
    "epoch_ms",
    "few_collections",
    "finished_report",
    "flag",
    "frontier_depth",
    "http_status",
    "robots_bytes",
]
