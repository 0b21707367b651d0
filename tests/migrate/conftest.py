"""A real PostgreSQL server for the whole session (``initdb``/``pg_ctl`` in a temp dir, ~2 s),
and a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from pg_support import create_database

from crawlstream.devtools.localpg import LocalPostgres

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture
def database(postgres: LocalPostgres) -> str:
    """The DSN of an empty database of its own."""
    name = f"seed_{next(_names)}"
    create_database(postgres.dsn, name)
    return postgres.dsn_for(name)
