"""The url index on disk: one SQLite database per store root, ``index.sqlite`` (WAL), and its reads.

ADR 036: the index left memory (~1.2 KB of Python heap per page, O(pages) RSS) for a database
beside the segments; memory is SQLite's page cache (``store.index_cache_bytes``, allocated by
SQLite, not Python) and what a query returns. Tables::

    entries(url, url_key, domain, seq, segment, position, length, dict_id, tier, member,
            content_hash, raw_size, fetched_at_ms, content_type, title, status,
            record_segment, record_bytes, tags)    one row per live URL
    tags(tag, url, url_key)                        the same tags, found by tag
    segment_ends(segment, indexed_end)             where each segment's indexed records end
    meta(key, value)                               "seq": the last sequence number committed
    sealed_blocks, sealed_keys, sealed_bodies      archive-tier entries folded into zstd blocks
                                                   (``_index_sealed``: ~110 B a page, not ~400)

``entries`` is a rowid table: rows are appended in put order, and each secondary index holds
its column and the rowid only (a table keyed by the URL would copy the URL into every index).
``url_key`` finds a URL (the URL itself resolves 56-bit collisions); ``content_hash`` finds a
stored body (dedupe); ``(segment, position)`` one segment's records (garbage collection,
compaction, damaged regions); ``(tier, fetched_at_ms)`` the pages due for a deeper tier;
``domain`` and ``dict_id`` the pages a dictionary serves. ``tags`` is the entry's tags as a
sorted JSON list (NULL: none).

Every read sees both kinds of entry: a URL, a body or a segment probes the rows and then the
blocks that can hold it; a query over every entry reads the rows and the sealed entries
together (``_all``: the sealed ones materialized in a temp table once per sealed state).

``IndexQueries`` holds every read over one connection: the writer's (``_index.UrlIndex``,
under the store lock) and a snapshot's (``IndexSnapshot``: a read transaction on its own
connection, consistent while puts go on, used without the store lock). A query returns one
URL, one segment's or region's entries, an aggregate, or a stream read in chunks; none builds
the whole index in Python. SQLite's errors stop here: damage is ``IndexDamaged`` (bad data:
``crawlstream store rebuild-index``), anything else ``StorageUnavailable``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.store._index_sealed import SEALED_SCHEMA, Block, body_slot, decode_block, key_slot
from crawlstream.store._maintenance import TIER_RANK
from crawlstream.store._model import Entry, Location
from crawlstream.store._segments import ARCHIVE_TIER
from crawlstream.store._urls import path_of

__all__ = ["DAMAGED", "INDEX_FILE", "IndexDamaged", "IndexQueries", "IndexSnapshot", "connect", "entry_row", "is_text"]

INDEX_FILE = "index.sqlite"
DAMAGED = ".damaged"  # beside the database: a process found it damaged; the next open sets it aside
SCHEMA_VERSION = 2  # 2: sealed blocks (archive-tier entries folded into zstd blocks)
_CHUNK = 256  # rows fetched at a time by a stream
_DAY_MS = 86_400_000  # batch order: oldest day first (``_maintenance.batch_order``)
# SQLite errors that say nothing about the file's content (the disk, a lock, memory): transient.
# Any other error of a statement this module wrote is damage (a mutated schema: SQLITE_ERROR).
_TRANSIENT = ("SQLITE_IOERR", "SQLITE_FULL", "SQLITE_CANTOPEN", "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY",
              "SQLITE_NOMEM", "SQLITE_PROTOCOL", "SQLITE_INTERRUPT", "SQLITE_PERM", "SQLITE_ABORT")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS entries (
    url TEXT NOT NULL, url_key INTEGER NOT NULL, domain TEXT NOT NULL, seq INTEGER NOT NULL,
    segment TEXT NOT NULL, position INTEGER NOT NULL, length INTEGER NOT NULL,
    dict_id INTEGER NOT NULL, tier TEXT NOT NULL, member INTEGER NOT NULL,
    content_hash BLOB NOT NULL, raw_size INTEGER NOT NULL, fetched_at_ms INTEGER NOT NULL,
    content_type TEXT, title TEXT, status INTEGER,
    record_segment TEXT, record_bytes INTEGER NOT NULL, tags TEXT
);
CREATE INDEX IF NOT EXISTS entries_key ON entries(url_key);
CREATE INDEX IF NOT EXISTS entries_body ON entries(content_hash);
CREATE INDEX IF NOT EXISTS entries_segment ON entries(segment, position);
CREATE INDEX IF NOT EXISTS entries_age ON entries(tier, fetched_at_ms);
CREATE INDEX IF NOT EXISTS entries_domain ON entries(domain);
CREATE INDEX IF NOT EXISTS entries_dict ON entries(dict_id);
CREATE INDEX IF NOT EXISTS entries_record ON entries(record_segment) WHERE record_segment IS NOT NULL;
CREATE TABLE IF NOT EXISTS tags (
    tag TEXT NOT NULL, url TEXT NOT NULL, url_key INTEGER NOT NULL, PRIMARY KEY (tag, url)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS segment_ends (segment TEXT PRIMARY KEY, indexed_end INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta VALUES ('schema', {SCHEMA_VERSION});
{SEALED_SCHEMA}"""

COLUMNS = (
    "url, url_key, domain, seq, segment, position, length, dict_id, tier, member, content_hash, raw_size, "
    "fetched_at_ms, content_type, title, status, record_segment, record_bytes, tags"
)
_MARKS = ", ".join("?" * len(COLUMNS.split(", ")))
_SELECT = f"SELECT {COLUMNS} FROM entries"
_LOCATION = "segment, position, length, dict_id, tier, member"  # a Location's fields
_E_COLUMNS = ", ".join(f"e.{c}" for c in COLUMNS.split(", "))


class IndexDamaged(ChecksumMismatch):
    """The index database is damaged: rebuild it from the segments (``crawlstream store rebuild-index``)."""


def translate(exc: sqlite3.Error, path: Path) -> Exception:
    """The store's error for a SQLite error on ``path``: damage is bad data, the disk or a lock transient,
    a misuse of the module (no SQLite error code) itself."""
    name = getattr(exc, "sqlite_errorname", None)
    if name is None:
        return exc
    if not name.startswith(_TRANSIENT):
        return IndexDamaged(
            f"the url index {path} is damaged ({exc}): run `crawlstream store rebuild-index`, which rewrites "
            "it from the segments (tombstones and tags are kept in ops.log)"
        )
    return StorageUnavailable(f"url index {path}: {exc}")


def connect(path: Path, *, cache_bytes: int, read_only: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, ``cache_bytes`` of page cache.

    The writer's creates the schema; a read-only one is a snapshot's. No memory map: mapped pages
    would count in RSS, the curve ADR 036 flattens.
    """
    try:
        target = f"{path.resolve().as_uri()}?mode=ro" if read_only else str(path)
        db = sqlite3.connect(target, uri=read_only, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA cache_size = -{max(64, cache_bytes // 1024)}")
        db.execute("PRAGMA mmap_size = 0")
        if not read_only:
            # A new database only (both are fixed once a table exists). 512-byte pages: every table
            # and index costs a page even when empty, and a crawl's store is 128 shards, most of them
            # small (an empty database is 11.8 KB at 512 B, 21.5 KB at 1 KiB, ~80 KB at 4 KiB); a
            # row insert costs ~15% more CPU than at 1 KiB, under 1% of a real page's put.
            db.execute("PRAGMA page_size = 512")
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA journal_size_limit = 16777216")  # the WAL shrinks back after a burst
            db.executescript(_SCHEMA)
            if _schema_of(db) != _expected_schema():
                db.close()
                raise IndexDamaged(f"the url index {path} does not have this build's tables: rebuild it (segments)")
    except sqlite3.Error as exc:
        error = translate(exc, path)
        if error is exc:
            raise
        raise error from exc
    return db


def _schema_of(db: sqlite3.Connection) -> dict[str, str]:
    return dict(db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall())


@functools.cache
def _expected_schema() -> dict[str, str]:
    """The tables and indexes as ``_SCHEMA`` creates them (a damaged one reads differently)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.executescript(_SCHEMA)
        return _schema_of(db)


def entry_of(r: tuple[Any, ...]) -> Entry:
    """The entry of one ``entries`` row (columns in ``COLUMNS`` order)."""
    return Entry(
        r[0],
        r[1],
        Location(r[4], r[5], r[6], r[7], r[8], r[9]),
        r[10],
        r[11],
        r[3],
        r[12],
        r[2],
        path_of(r[0]),
        r[13],
        r[14],
        r[15],
        set(json.loads(r[18])) if r[18] else set(),
        r[16] or "",
        r[17],
    )


def entry_row(e: Entry) -> tuple[Any, ...]:
    """The ``entries`` row of ``e`` (``COLUMNS`` order)."""
    loc = e.location
    return (
        e.url,
        e.url_key,
        e.domain,
        e.seq,
        loc.segment,
        loc.offset,
        loc.length,
        loc.dict_id,
        loc.tier,
        loc.member,
        e.content_hash,
        e.raw_size,
        e.fetched_at_ms,
        e.content_type,
        e.title,
        e.status,
        e.record_segment or None,
        e.record_bytes,
        tags_text(e.tags),
    )


def is_text(value: str | None) -> bool:
    """Whether ``value`` can be a TEXT value (UTF-8: no lone surrogates); None can."""
    if value is None:
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def tags_text(tags: Collection[str]) -> str | None:
    return json.dumps(sorted(tags), ensure_ascii=False) if tags else None


class _Rows:
    """A cursor whose fetches raise the store's errors (SQLite reports most damage while stepping)."""

    def __init__(self, cursor: sqlite3.Cursor, owner: IndexQueries) -> None:
        self._cursor = cursor
        self._owner = owner
        self.rowcount = cursor.rowcount

    def fetchone(self) -> Any:
        try:
            return self._cursor.fetchone()
        except sqlite3.Error as exc:
            self._owner._raise(exc)

    def fetchall(self) -> list[Any]:
        try:
            return self._cursor.fetchall()
        except sqlite3.Error as exc:
            self._owner._raise(exc)

    def fetchmany(self, size: int) -> list[Any]:
        try:
            return self._cursor.fetchmany(size)
        except sqlite3.Error as exc:
            self._owner._raise(exc)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # its snapshot may be closed already (a stream left unread)
            self._cursor.close()


class IndexQueries:
    """Reads of the url index over one connection (see the module docstring)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self.path = path
        self._sealed_stamp: tuple[int, ...] | None = None  # the sealed state ``temp.sealed_rows`` holds
        self._last_block: tuple[int, Block] | None = None

    def _q(self, sql: str, params: Iterable[Any] = ()) -> _Rows:
        try:
            return _Rows(self._db.execute(sql, tuple(params)), self)
        except sqlite3.Error as exc:
            self._raise(exc)

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            self._db.executemany(sql, rows)
        except sqlite3.Error as exc:
            self._raise(exc)

    def _raise(self, exc: sqlite3.Error) -> NoReturn:
        error = self._failed(exc)
        if error is exc:
            raise exc
        raise error from exc

    def _failed(self, exc: sqlite3.Error) -> Exception:
        """The error to raise for ``exc`` (the writer also marks a damaged database for the next open)."""
        error = translate(exc, self.path)
        if isinstance(error, IndexDamaged):
            self._mark_damaged()
        return error

    def _mark_damaged(self) -> None:
        """The writer marks the database for the next open (which sets it aside and re-indexes); a reader
        has nothing to mark."""

    def _stream(self, sql: str, params: Iterable[Any] = ()) -> Iterator[Entry]:
        rows = self._q(sql, params)
        try:
            while chunk := rows.fetchmany(_CHUNK):
                yield from map(entry_of, chunk)
        finally:
            rows.close()

    # ------------------------------------------------------------------ sealed blocks (``_index_sealed``)

    def _block(self, block: int, segment: str, data: bytes) -> Block:
        """Block ``block`` decoded (the last one is kept: a block's ids are never reused)."""
        if self._last_block is not None and self._last_block[0] == block:
            return self._last_block[1]
        try:
            decoded = decode_block(data, segment)
        except ChecksumMismatch as exc:
            self._mark_damaged()
            raise IndexDamaged(
                f"the url index {self.path}: block {block}: {exc}; run `crawlstream store rebuild-index`"
            ) from exc
        self._last_block = (block, decoded)
        return decoded

    def _live_block(self, block: int, segment: str, entries: int, live: int, data: bytes) -> list[Entry]:
        """The entries of a block still sealed there (the others went back to rows, or were removed)."""
        found = self._block(block, segment, data).entries()
        if live == entries:
            return found
        return [
            e for e in found
            if (row := self._q("SELECT block FROM sealed_keys WHERE slot = ?", (key_slot(e.url_key),)).fetchone())
            and row[0] == block
        ]

    def _sealed_blocks(self, where: str = "", params: Iterable[Any] = ()) -> Iterator[list[Entry]]:
        """The live entries of each block (``where``: a condition on ``sealed_blocks``), a block at a time."""
        ids = [r[0] for r in self._q(f"SELECT block FROM sealed_blocks {where} ORDER BY block", params).fetchall()]
        for block in ids:
            row = self._q("SELECT block, segment, entries, live, data FROM sealed_blocks WHERE block = ?", (block,))
            if (r := row.fetchone()) is not None:
                yield self._live_block(*r)

    def sealed_lookup(self, url_key: int, url: str) -> tuple[int, Entry] | None:
        """(block, entry) of a sealed URL."""
        row = self._q(
            "SELECT b.block, b.segment, b.data FROM sealed_keys AS k JOIN sealed_blocks AS b ON b.block = k.block "
            "WHERE k.slot = ?",
            (key_slot(url_key),),
        ).fetchone()
        if row is None:
            return None
        entry = self._block(*row).find(url)
        return None if entry is None or entry.url_key != url_key else (row[0], entry)

    def _all(self) -> str:
        """What a query over every live entry reads: ``entries``, and while any block is sealed, the
        sealed entries beside them (materialized once per state in a temp table, on disk past the cache)."""
        stamp = tuple(
            self._q("SELECT COUNT(*), COALESCE(SUM(live), 0), COALESCE(MAX(block), 0) FROM sealed_blocks").fetchone()
        )
        if stamp[0] == 0:
            return "entries"
        if stamp != self._sealed_stamp:
            self._q(f"CREATE TEMP TABLE IF NOT EXISTS sealed_rows ({COLUMNS})")
            self._q("DELETE FROM temp.sealed_rows")
            for entries in self._sealed_blocks():
                self._many(f"INSERT INTO temp.sealed_rows VALUES ({_MARKS})", map(entry_row, entries))
            self._sealed_stamp = stamp
        return f"(SELECT {COLUMNS} FROM main.entries UNION ALL SELECT {COLUMNS} FROM temp.sealed_rows)"

    # ------------------------------------------------------------------ one URL, one body

    def lookup(self, url_key: int, url: str) -> Entry | None:
        row = self._q(f"{_SELECT} WHERE url_key = ? AND url = ?", (url_key, url)).fetchone()
        if row is not None:
            return entry_of(row)
        sealed = self.sealed_lookup(url_key, url)
        return None if sealed is None else sealed[1]

    def body_location(self, content_hash: bytes) -> Location | None:
        """Where the body with ``content_hash`` is stored, if a live URL has it (its deepest copy)."""
        rows = self._q(  # the URLs sharing a body: one or a few (no ORDER BY: a sorter costs more than this)
            f"SELECT {_LOCATION} FROM entries WHERE content_hash = ?",
            (content_hash,),
        ).fetchall()
        best = max(rows, key=lambda r: TIER_RANK.get(r[4], 0)) if rows else None
        if best is not None and best[4] == ARCHIVE_TIER:
            return Location(*best)
        row = self._q(
            "SELECT b.block, b.segment, b.data FROM sealed_bodies AS h JOIN sealed_blocks AS b ON b.block = h.block "
            "WHERE h.slot = ?",
            (body_slot(content_hash),),
        ).fetchone()
        if row is not None:
            block = self._block(*row)
            for i in block.with_body(content_hash):
                e = block.entry(i)
                sealed = self.sealed_lookup(e.url_key, e.url)
                if sealed is not None and sealed[0] == row[0]:  # still sealed there, not changed since
                    return e.location
        return None if best is None else Location(*best)

    def count(self) -> int:
        return int(self._q("SELECT COUNT(*) FROM entries").fetchone()[0]) + self.sealed_count()

    def sealed_count(self) -> int:
        """Live entries in sealed blocks (the others are rows)."""
        return int(self._q("SELECT COALESCE(SUM(live), 0) FROM sealed_blocks").fetchone()[0])

    def committed_seq(self) -> int:
        row = self._q("SELECT value FROM meta WHERE key = 'seq'").fetchone()
        return 0 if row is None else int(row[0])

    def segment_ends(self) -> dict[str, int]:
        return dict(self._q("SELECT segment, indexed_end FROM segment_ends").fetchall())

    # ------------------------------------------------------------------ streams

    def search(self, domain: str | None, tag: str | None) -> Iterator[Entry]:
        """Entries of ``domain`` (else with ``tag``, else all), sorted by URL (SQLite sorts, on disk when large)."""
        if not all(is_text(v) for v in (domain, tag)):
            return iter(())  # (lone surrogates from a file name or a URL: nothing stored can match)
        if tag is not None and domain is None:  # a tagged entry is never sealed
            return self._stream(
                f"SELECT {_E_COLUMNS} FROM tags AS t JOIN entries AS e ON e.url_key = t.url_key AND e.url = t.url "
                "WHERE t.tag = ? ORDER BY t.url",
                (tag,),
            )
        if domain is not None:
            return self._stream(f"SELECT {COLUMNS} FROM {self._all()} WHERE domain = ? ORDER BY url", (domain,))
        return self._stream(f"SELECT {COLUMNS} FROM {self._all()} ORDER BY url")

    # ------------------------------------------------------------------ segments and regions

    def segment_in_use(self, segment: str) -> bool:
        """Whether a live entry points into ``segment``: its body's, or its own reference record's."""
        return (
            self._q("SELECT 1 FROM entries WHERE segment = ? LIMIT 1", (segment,)).fetchone() is not None
            or self._q("SELECT 1 FROM entries WHERE record_segment = ? LIMIT 1", (segment,)).fetchone() is not None
            or self._q("SELECT 1 FROM sealed_blocks WHERE segment = ? LIMIT 1", (segment,)).fetchone() is not None
        )

    def referenced_segments(self) -> set[str]:
        """Every segment a live entry points into (one index probe per segment, not a scan of the entries)."""
        found: set[str] = set()
        for table, column in (("entries", "segment"), ("entries", "record_segment"), ("sealed_blocks", "segment")):
            last = ""
            while True:
                row = self._q(
                    f"SELECT {column} FROM {table} WHERE {column} > ? ORDER BY {column} LIMIT 1", (last,)
                ).fetchone()
                if row is None:
                    break
                last = row[0]
                found.add(last)
        return found

    def segment_entries(self, segment: str) -> list[Entry]:
        """Entries whose body, or own reference record, is in ``segment`` (one segment's: bounded)."""
        rows = self._q(
            f"{_SELECT} WHERE segment = ? UNION {_SELECT} WHERE record_segment = ?", (segment, segment)
        ).fetchall()
        out = [entry_of(r) for r in rows]
        for entries in self._sealed_blocks("WHERE segment = ?", (segment,)):
            out.extend(entries)
        return out

    def entries_in(self, segment: str, start: int, end: int) -> list[Entry]:
        """Entries whose body record starts in ``[start, end)`` of ``segment`` (a damaged region)."""
        rows = self._q(
            f"{_SELECT} WHERE segment = ? AND position >= ? AND position < ?", (segment, start, end)
        ).fetchall()
        out = [entry_of(r) for r in rows]
        for entries in self._sealed_blocks("WHERE segment = ?", (segment,)):
            out.extend(e for e in entries if start <= e.location.offset < end)
        return out

    def dict_in_use(self, dict_id: int) -> bool:
        src = self._all()
        return self._q(f"SELECT 1 FROM {src} WHERE dict_id = ? LIMIT 1", (dict_id,)).fetchone() is not None

    def record_locations(self) -> Iterator[Location]:
        """The location of every live body, ordered by segment and position (a record shared by several
        URLs comes once per URL): what ``_maintenance.segment_live_bytes`` folds, in constant memory."""
        rows = self._q(f"SELECT {_LOCATION} FROM {self._all()} ORDER BY segment, position")
        try:
            while chunk := rows.fetchmany(_CHUNK * 4):
                for r in chunk:
                    yield Location(*r)
        finally:
            rows.close()

    def reference_bytes(self, estimate: int) -> dict[str, int]:
        """Bytes of the URLs' own reference records per segment (``estimate`` where the length is unknown).
        An entry with a reference record is never sealed."""
        return dict(
            self._q(
                "SELECT record_segment, SUM(CASE WHEN record_bytes > 0 THEN record_bytes ELSE ? END) FROM entries "
                "WHERE record_segment IS NOT NULL GROUP BY record_segment",
                (estimate,),
            ).fetchall()
        )

    # ------------------------------------------------------------------ domains (dictionaries)

    def domain_counts(self) -> dict[str, int]:
        """Live URLs per domain (domains with none left out)."""
        return dict(self._q(f"SELECT domain, COUNT(*) FROM {self._all()} GROUP BY domain").fetchall())

    def _pool(self, domain: str | None, own: Collection[str]) -> tuple[str, list[Any]]:
        """The WHERE clause of a dictionary's pool: ``domain``'s pages, or (None) every domain not in ``own``."""
        if domain is not None:
            return "domain = ?", [domain]
        self._q("CREATE TEMP TABLE IF NOT EXISTS own_dict (domain TEXT PRIMARY KEY) WITHOUT ROWID")
        self._q("DELETE FROM temp.own_dict")
        self._many("INSERT OR IGNORE INTO temp.own_dict VALUES (?)", ((d,) for d in own))
        return "domain NOT IN (SELECT domain FROM temp.own_dict)", []

    def pool_size(self, domain: str | None, own: Collection[str] = (), since_seq: int = 0) -> tuple[int, int]:
        """(distinct bodies, their raw bytes) of a dictionary's pool (pages put at ``since_seq`` or later)."""
        where, params = self._pool(domain, own)
        row = self._q(
            "SELECT COUNT(*), COALESCE(SUM(raw), 0) FROM "
            f"(SELECT MAX(raw_size) AS raw FROM {self._all()} WHERE {where} AND seq >= ? GROUP BY content_hash)",
            [*params, since_seq],
        ).fetchone()
        return int(row[0]), int(row[1])

    def pool_bodies(
        self, domain: str | None, own: Collection[str] = (), *, since_seq: int = 0, by_seq: bool = False,
        newest_first: bool = False,
    ) -> Iterator[Entry]:
        """One entry per distinct body of the pool: the first URL (by domain and URL) with it, or with
        ``by_seq`` the first put of it, in that order (``newest_first``: reversed). A stream."""
        where, params = self._pool(domain, own)
        # ' ' sorts before every character of a domain: the concatenation sorts as (domain, url)
        key = "seq" if by_seq else "domain || ' ' || url"
        direction = "DESC" if newest_first else "ASC"
        # SQLite takes a MIN() query's other columns from the row that has the minimum
        return self._stream(
            f"SELECT {COLUMNS} FROM (SELECT MIN({key}) AS first, {COLUMNS} FROM {self._all()} "
            f"WHERE {where} AND seq >= ? GROUP BY content_hash) ORDER BY first {direction}",
            [*params, since_seq],
        )

    # ------------------------------------------------------------------ maintenance plans

    def _due_source(self, cutoffs: Mapping[str, int]) -> str:
        """Rows only, unless the archive tier itself is asked for (no rule moves pages out of it)."""
        return self._all() if ARCHIVE_TIER in cutoffs else "entries"

    def tier_candidates(self, cutoffs: Mapping[str, int]) -> Iterator[Entry]:
        """Entries of each tier in ``cutoffs`` fetched at or before its cutoff, in batch order (oldest
        day, then domain and URL: ``_maintenance.batch_order``)."""
        if not cutoffs:
            return iter(())
        src = self._due_source(cutoffs)
        one = f"SELECT {COLUMNS} FROM {src} WHERE tier = ? AND fetched_at_ms <= ?"
        parts = " UNION ALL ".join(one for _ in cutoffs)
        params = [p for tier, cutoff in cutoffs.items() for p in (tier, cutoff)]
        return self._stream(f"SELECT * FROM ({parts}) ORDER BY fetched_at_ms / {_DAY_MS}, domain, url", params)

    def redict_candidates(self, dict_ids: Collection[int]) -> Iterator[Entry]:
        """Entries outside the hot tier compressed with one of ``dict_ids``, in batch order."""
        marks = ",".join("?" * len(dict_ids))
        return self._stream(
            f"SELECT {COLUMNS} FROM {self._all()} WHERE dict_id IN ({marks}) AND tier != 'hot' "
            f"ORDER BY fetched_at_ms / {_DAY_MS}, domain, url",
            list(dict_ids),
        )

    def due_body_bytes(self, cutoffs: Mapping[str, int]) -> int:
        """Raw bytes of the distinct bodies ``tier_candidates`` would return."""
        if not cutoffs:
            return 0
        parts = " OR ".join("(tier = ? AND fetched_at_ms <= ?)" for _ in cutoffs)
        params = [p for tier, cutoff in cutoffs.items() for p in (tier, cutoff)]
        row = self._q(
            f"SELECT COALESCE(SUM(raw), 0) FROM (SELECT MAX(raw_size) AS raw FROM {self._due_source(cutoffs)} "
            f"WHERE {parts} GROUP BY content_hash)",
            params,
        ).fetchone()
        return int(row[0])

    def redict_body_bytes(self, dict_ids: Collection[int]) -> int:
        marks = ",".join("?" * len(dict_ids))
        row = self._q(
            f"SELECT COALESCE(SUM(raw), 0) FROM (SELECT MAX(raw_size) AS raw FROM {self._all()} "
            f"WHERE dict_id IN ({marks}) AND tier != 'hot' GROUP BY content_hash)",
            list(dict_ids),
        ).fetchone()
        return int(row[0])

    def segment_raw_bytes(self, segment: str) -> int:
        row = self._q("SELECT COALESCE(SUM(raw_size), 0) FROM entries WHERE segment = ?", (segment,)).fetchone()
        sealed = sum(e.raw_size for entries in self._sealed_blocks("WHERE segment = ?", (segment,)) for e in entries)
        return int(row[0]) + sealed

    # ------------------------------------------------------------------ stats

    def tier_totals(self) -> dict[str, tuple[int, int, int]]:
        """tier -> (URLs, their raw bytes, distinct records)."""
        rows = self._q(
            "SELECT tier, COUNT(*), COALESCE(SUM(raw_size), 0), COUNT(DISTINCT segment || ':' || position) "
            f"FROM {self._all()} GROUP BY tier"
        ).fetchall()
        return {tier: (int(n), int(raw), int(records)) for tier, n, raw, records in rows}

    def distinct_bodies(self) -> int:
        return int(self._q(f"SELECT COUNT(DISTINCT content_hash) FROM {self._all()}").fetchone()[0])

    def dict_uses(self) -> dict[int, int]:
        """Live URLs per dictionary id."""
        return dict(self._q(f"SELECT dict_id, COUNT(*) FROM {self._all()} GROUP BY dict_id").fetchall())


class IndexSnapshot(IndexQueries):
    """A read transaction on a connection of its own: the index as committed when it began, however
    long its streams are read (WAL: one writer, many readers). ``close`` ends it."""

    def __init__(self, path: Path, *, cache_bytes: int) -> None:
        super().__init__(connect(path, cache_bytes=cache_bytes, read_only=True), path)
        self._q("BEGIN")
        self._q("SELECT value FROM meta LIMIT 1").fetchall()  # the snapshot is taken at the first read

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # a read-only connection has nothing to lose
            self._db.close()

    def __enter__(self) -> IndexSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
