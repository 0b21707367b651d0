"""The seed crawler's PostgreSQL database as a stream of row batches (the psycopg edge).

Each table is read in one ``REPEATABLE READ READ ONLY`` transaction through a named (server-side)
cursor in binary mode, so the client holds one batch at a time and the server never rescans
(no ``OFFSET``). Rows come in a total order by a key that the checkpoint records, and a
resumed read starts after it (``WHERE key > last``):

* ``visited_urls`` and ``domain_metadata`` by ``ctid`` (their physical order: a TID range
  scan, no sort; the seed declares no primary key, and duplicate rows must still be told
  apart). A ``ctid`` changes when a table is rewritten (``VACUUM FULL``, ``CLUSTER``): the
  table's ``pg_relation_filenode`` is recorded with the checkpoint and a changed one refuses
  to resume.
* ``frontier`` by (priority descending, added time ascending, ``ctid``): the frontier file
  record has no priority field, so priority becomes the order of each domain's file (a
  domain's URLs are fetched highest priority first, then oldest first). NULLs sort last.

psycopg's exceptions stop here: a server that cannot be reached is ``SourceUnavailable``
(transient), a schema that is not the seed's is ``ConfigError``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from crawlstream.errors import ConfigError, TransientError

__all__ = ["SEED_SCHEMA_SQL", "TABLES", "PostgresSource", "SourceUnavailable", "TableSpec"]

logger = logging.getLogger(__name__)


SEED_SCHEMA_SQL = """
CREATE TABLE visited_urls (
    url TEXT,
    url_sha256 TEXT,
    crawled_timestamp BIGINT,
    http_status_code INTEGER,
    content_storage_path TEXT,
    redirected_to_url TEXT
);
CREATE TABLE frontier (
    url TEXT,
    domain TEXT,
    depth INTEGER,
    priority REAL,
    added_timestamp BIGINT
);
CREATE TABLE domain_metadata (
    domain TEXT,
    robots_txt_content TEXT,
    robots_txt_expires_timestamp BIGINT,
    is_manually_excluded BOOLEAN,
    last_scheduled_fetch_timestamp BIGINT
);
"""
"""The seed's three tables as its migration script reads them ("Migration from PostgreSQL": the
column names; Unix-second timestamps, as its Redis scores; ``priority`` a float as in its frontier
lines). No keys or constraints, so duplicate and NULL rows are possible. Other column types
work too: timestamps may be ``timestamp[tz]``, flags integers, robots.txt ``bytea``."""


class SourceUnavailable(TransientError):
    """The source PostgreSQL server refused or dropped the connection; running again resumes."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[str, ...]
    required: tuple[str, ...]
    by_priority: bool = False

    @property
    def key_width(self) -> int:
        return 3 if self.by_priority else 1


DOMAIN_METADATA = TableSpec(
    "domain_metadata",
    (
        "domain",
        "robots_txt_content",
        "robots_txt_expires_timestamp",
        "is_manually_excluded",
        "last_scheduled_fetch_timestamp",
    ),
    ("domain",),
)
VISITED_URLS = TableSpec(
    "visited_urls",
    ("url", "crawled_timestamp", "http_status_code", "content_storage_path", "redirected_to_url"),
    ("url",),
)
FRONTIER = TableSpec("frontier", ("url", "depth", "priority", "added_timestamp"), ("url",), by_priority=True)
TABLES = (DOMAIN_METADATA, VISITED_URLS, FRONTIER)
"""In migration order: domain state first (exclusions, robots, next fetch times), then visited
URLs (so a URL both visited and queued counts as visited), then the frontier."""

_NUMERIC = frozenset({"smallint", "integer", "bigint", "real", "double precision", "numeric"})
_TIMESTAMPS = frozenset({"timestamp without time zone", "timestamp with time zone", "date"})
Key = tuple[Any, ...]


class PostgresSource:
    """A connection to the source database; ``stream`` each of ``TABLES`` in turn."""

    def __init__(self, dsn: str, *, batch_rows: int = 5000) -> None:
        self.batch_rows = batch_rows
        try:
            self._conn = psycopg.connect(dsn, autocommit=False)
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"cannot connect to the PostgreSQL source ({_first_line(exc)})") from exc
        self._conn.read_only = True
        self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self._types: dict[str, dict[str, str]] = {}

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PostgresSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- facts ----------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        """``host:port/dbname``: the checkpoint of one source database is kept apart from another's."""
        info = self._conn.info
        return f"{info.host}:{info.port}/{info.dbname}"

    def columns(self, spec: TableSpec) -> dict[str, str]:
        """The table's columns -> data types; ``ConfigError`` if it or a required column is missing."""
        found = self._types.get(spec.name)
        if found is None:
            rows = self._query(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = %s AND table_schema = ANY (current_schemas(false)) ORDER BY ordinal_position",
                (spec.name,),
            )
            found = {str(name): str(kind) for name, kind in rows}
            if not found:
                raise ConfigError(
                    f"the source database has no table {spec.name!r} (expected the seed's visited_urls, frontier "
                    "and domain_metadata); check --dsn"
                )
            missing = [c for c in spec.required if c not in found]
            if missing:
                raise ConfigError(f"table {spec.name!r} has no column {', '.join(missing)}; found {sorted(found)}")
            self._types[spec.name] = found
        return found

    def missing_columns(self, spec: TableSpec) -> list[str]:
        """Optional columns the table lacks (read as NULL)."""
        types = self.columns(spec)
        return [c for c in spec.columns if c not in types]

    def estimate_rows(self, spec: TableSpec) -> int:
        """The planner's row estimate (no scan), or an exact count when the table was never analyzed."""
        self.columns(spec)
        rows = self._query("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)", (spec.name,))
        estimate = int(rows[0][0]) if rows and rows[0][0] is not None else -1
        if estimate < 0:
            table = sql.Identifier(spec.name)
            estimate = int(self._query(sql.SQL("SELECT count(*) FROM {}").format(table))[0][0])
        return estimate

    def filenode(self, spec: TableSpec) -> int:
        """The table's storage file number: it changes when the table is rewritten (ctids with it)."""
        rows = self._query("SELECT pg_relation_filenode(to_regclass(%s))", (spec.name,))
        return int(rows[0][0] or 0)

    # -- streaming ------------------------------------------------------------------------

    def stream(self, spec: TableSpec, after: Key | None) -> Iterator[tuple[list[tuple[Any, ...]], Key]]:
        """Batches of rows in key order, starting after ``after``, each with the key of its last
        row (what a checkpoint records); a row has ``spec.columns`` in order (NULL for a missing
        optional column). Only the last row's key is built: one slice per row, not two tuples."""
        query, params = self._select(spec, after)
        width = spec.key_width
        name = f"crawlstream_migrate_{spec.name}"
        try:
            with self._conn.cursor(name=name, binary=True) as cur:
                cur.itersize = self.batch_rows
                cur.execute(query, params)
                while True:
                    rows = cur.fetchmany(self.batch_rows)
                    if not rows:
                        break
                    yield [r[width:] for r in rows], tuple(rows[-1][:width])
            self._conn.commit()
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"reading {spec.name} failed ({_first_line(exc)}); run again to resume") from exc
        except psycopg.Error as exc:
            self._rollback()
            raise ConfigError(f"reading {spec.name} failed: {_first_line(exc)}") from exc

    def _select(self, spec: TableSpec, after: Key | None) -> tuple[sql.Composed, Sequence[Any]]:
        types = self.columns(spec)
        table = sql.Identifier(spec.name)
        cols = sql.SQL(", ").join(
            sql.Identifier(c) if c in types else sql.SQL("NULL AS {}").format(sql.Identifier(c)) for c in spec.columns
        )
        if not spec.by_priority:
            where = sql.SQL("WHERE ctid > %s::tid") if after is not None else sql.SQL("")
            query = sql.SQL("SELECT ctid::text, {cols} FROM {table} {where} ORDER BY ctid").format(
                cols=cols, table=table, where=where
            )
            return query, ([after[0]] if after is not None else [])
        k1 = _number_expr("priority", types, negate=True)
        k2 = _epoch_expr("added_timestamp", types)
        inner = sql.SQL(
            "SELECT coalesce({k1}, 'Infinity'::float8) AS k1, coalesce({k2}, 'Infinity'::float8) AS k2, "
            "ctid AS row_id, {cols} FROM {table}"
        ).format(k1=k1, k2=k2, cols=cols, table=table)
        where = sql.SQL("")
        if after is not None:
            where = sql.SQL("WHERE (k1, k2, row_id) > (%s::float8, %s::float8, %s::tid)")
        outer = "SELECT k1, k2, row_id::text, {names} FROM ({inner}) AS s {where} ORDER BY k1, k2, row_id"
        query = sql.SQL(outer).format(
            names=sql.SQL(", ").join(sql.Identifier(c) for c in spec.columns), inner=inner, where=where
        )
        return query, (list(after) if after is not None else [])

    def _query(self, query: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._conn.cursor() as cur:
                cur.execute(query, params)
                rows = cur.fetchall()
            self._conn.commit()
            return rows
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"the PostgreSQL source failed ({_first_line(exc)})") from exc
        except psycopg.Error as exc:
            self._rollback()
            raise ConfigError(f"the PostgreSQL source refused a query: {_first_line(exc)}") from exc

    def _rollback(self) -> None:
        try:
            self._conn.rollback()
        except psycopg.Error:
            logger.debug("rollback after a failed query failed too", exc_info=True)


def _number_expr(column: str, types: dict[str, str], *, negate: bool) -> sql.Composable:
    if types.get(column) not in _NUMERIC:
        return sql.SQL("NULL::float8")  # absent or not a number: no order from it
    expr = sql.SQL("({}::float8)").format(sql.Identifier(column))
    return sql.SQL("-") + expr if negate else expr


def _epoch_expr(column: str, types: dict[str, str]) -> sql.Composable:
    kind = types.get(column)
    if kind in _NUMERIC:
        return sql.SQL("({}::float8)").format(sql.Identifier(column))
    if kind in _TIMESTAMPS:
        return sql.SQL("extract(epoch from {})::float8").format(sql.Identifier(column))
    return sql.SQL("NULL::float8")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
