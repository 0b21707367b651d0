"""A throw-away PostgreSQL server on loopback for tests and benchmarks (``initdb``/``pg_ctl``)."""

from crawlstream.devtools.localpg._server import LocalPostgres, find_pg_bin

__all__ = ["LocalPostgres", "find_pg_bin"]
