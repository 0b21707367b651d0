"""The url index's changes (``index.sqlite``, ADR 036), and the tombstones and tags of ``ops.log``.

Durability (ADR 002's order, unchanged): a page's segment record is written first, its index
row second. Rows go into an open transaction, committed every ``COMMIT_EVERY`` changes, at
``sync`` and ``close``, before a snapshot, and before maintenance deletes a segment (a
relocation must be on disk before the old copy goes). A kill loses only the uncommitted tail:
the committed ``segment_ends`` say where the indexed records of each segment end, and start-up
re-indexes the records past them (``_recovery``). The global sequence number orders puts
against tombstones and tag operations; ``meta.seq`` is the last one committed. ``ops.log`` is
not rebuildable from the segments and stays the source of truth for deletes and tags: an
operation is appended there before the row changes, and start-up applies those past
``meta.seq``. With ``fsync`` other than "never" every commit is fsynced (``synchronous=FULL``:
one fsync per few thousand puts, or per ``sync``).

Callers hold the store lock. Reads are ``IndexQueries``' (``_index_db``); ``snapshot`` commits
and opens a read transaction for reads made without the lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any

from crawlstream.store._codec import encode_log_record
from crawlstream.store._config import StoreConfig
from crawlstream.store._files import AppendFile
from crawlstream.store._index_db import (
    ARCHIVE_TIER,
    COLUMNS,
    DAMAGED,
    INDEX_FILE,
    IndexQueries,
    IndexSnapshot,
    connect,
    entry_of,
    entry_row,
    tags_text,
)
from crawlstream.store._index_sealed import BLOCK_ENTRIES, body_slot, encode_block, key_slot, sealable
from crawlstream.store._model import Entry, Location

__all__ = ["COMMIT_EVERY", "UrlIndex"]

COMMIT_EVERY = 4096  # changes per transaction at most: what a kill can leave for start-up to re-index
_MARKS = ", ".join("?" * len(COLUMNS.split(", ")))
_INSERT = f"INSERT INTO entries ({COLUMNS}) VALUES ({_MARKS})"
_REPLACE = f"UPDATE entries SET ({COLUMNS}) = ({_MARKS}) WHERE url_key = ? AND url = ?"
_ADD_TAG = "INSERT OR IGNORE INTO tags VALUES (?, ?, ?)"
_RELOCATE = (
    "UPDATE entries SET segment = ?, position = ?, length = ?, dict_id = ?, tier = ?, member = ?, "
    "record_segment = ?, record_bytes = ? WHERE url_key = ? AND url = ?"
)


class UrlIndex(IndexQueries):
    def __init__(self, root: Path, config: StoreConfig, *, path: Path | None = None) -> None:
        """``path``: the database (``<root>/index.sqlite`` when None)."""
        db_path = path or root / INDEX_FILE
        self._cache_bytes = config.index_cache_bytes
        super().__init__(connect(db_path, cache_bytes=self._cache_bytes), db_path)
        self._q(f"PRAGMA synchronous = {'FULL' if config.fsyncs else 'OFF'}")
        self.seq = self.committed_seq()
        self._ends: dict[str, int] = {}  # indexed ends not committed yet
        self._changes = 0
        self._in_txn = False
        self._count: int | None = None  # live URLs, counted once when first asked
        self.ops_path = root / "ops.log"
        self._ops_log: AppendFile | None = None
        self._ops_fsync_each = config.fsync_each

    def _mark_damaged(self) -> None:
        self.path.with_name(self.path.name + DAMAGED).touch()  # the next open sets it aside, re-indexes

    def open_ops_log(self) -> None:
        """Start appending to ops.log (after start-up has read it and truncated a torn tail)."""
        self._ops_log = AppendFile(self.ops_path, fsync_each=self._ops_fsync_each)

    def __len__(self) -> int:
        if self._count is None:
            self._count = self.count()
        return self._count

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # ------------------------------------------------------------------ changes

    def _begin(self) -> None:
        if not self._in_txn:
            self._q("BEGIN")
            self._in_txn = True

    def _changed(self) -> None:
        self._changes += 1
        if self._changes >= COMMIT_EVERY:
            self.commit()

    def insert(self, entry: Entry, replacing: Entry | None) -> None:
        """Add ``entry``; ``replacing``: the entry of the same URL it replaces (looked up by the caller)."""
        self._begin()
        if replacing is not None:
            self.unseal(replacing)
        row = entry_row(entry)
        if replacing is None:
            self._q(_INSERT, row)
            if self._count is not None:
                self._count += 1
        else:
            self._q(_REPLACE, (*row, entry.url_key, entry.url))
        self._write_tags(entry, replacing.tags if replacing is not None else set(), entry.tags)
        self._changed()

    def load(self, entries: Iterable[Entry]) -> None:
        """Insert ``entries``, URLs the index does not hold, in bulk (a migration fills a new index)."""
        self._begin()
        it = iter(entries)
        while chunk := list(islice(it, 1024)):
            self._many(_INSERT, map(entry_row, chunk))
            self._many(_ADD_TAG, [(t, e.url, e.url_key) for e in chunk for t in e.tags])
        self._count = None

    def relocate(self, entry: Entry, location: Location, record_segment: str, record_bytes: int) -> None:
        """``entry``'s body (and its own reference record) moved by maintenance; the body is found there now."""
        self._begin()
        self.unseal(entry)
        loc = location
        self._q(
            _RELOCATE,
            (loc.segment, loc.offset, loc.length, loc.dict_id, loc.tier, loc.member, record_segment or None,
             record_bytes, entry.url_key, entry.url),
        )
        entry.location = location
        entry.record_segment = record_segment
        entry.record_bytes = record_bytes
        self._changed()

    def remove(self, entry: Entry) -> None:
        self._begin()
        self.unseal(entry)
        if self._q("DELETE FROM entries WHERE url_key = ? AND url = ?", (entry.url_key, entry.url)).rowcount:
            if self._count is not None:
                self._count -= 1
            self._write_tags(entry, entry.tags, set())
        self._changed()

    def delete(self, entry: Entry) -> None:
        """Tombstone ``entry``: the ops.log record first, then the index."""
        self._append_op({"op": "del", "u": entry.url, "k": entry.url_key, "q": self.next_seq()})
        self.remove(entry)

    def tag(self, entry: Entry, tags: list[str], op: str) -> None:
        """Add (``op="tag"``) or remove (``"untag"``) ``tags``: the ops.log record first, then the index."""
        if not tags:
            return
        self._append_op({"op": op, "u": entry.url, "k": entry.url_key, "q": self.next_seq(), "tags": tags})
        self.restore_tags(entry, entry.tags | set(tags) if op == "tag" else entry.tags - set(tags))

    def restore_tags(self, entry: Entry, tags: set[str]) -> None:
        """Set ``entry``'s tags as ops.log has them (start-up; ``tag`` after its log record)."""
        if tags == entry.tags:
            return
        self._begin()
        self.unseal(entry)
        self._q(
            "UPDATE entries SET tags = ? WHERE url_key = ? AND url = ?", (tags_text(tags), entry.url_key, entry.url)
        )
        self._write_tags(entry, entry.tags, tags)
        entry.tags = set(tags)
        self._changed()

    def _write_tags(self, entry: Entry, old: set[str], new: set[str]) -> None:
        """Bring the ``tags`` table of ``entry``'s URL from ``old`` to ``new``."""
        for tag in old - new:
            self._q("DELETE FROM tags WHERE tag = ? AND url = ?", (tag, entry.url))
        for tag in new - old:
            self._q(_ADD_TAG, (tag, entry.url, entry.url_key))

    def _append_op(self, rec: dict[str, Any]) -> None:
        assert self._ops_log is not None, "open_ops_log() first"
        self._ops_log.append(encode_log_record(rec))

    def indexed(self, segment: str, end: int) -> None:
        """Every record of ``segment`` before ``end`` is indexed (or dead): start-up re-indexes past it."""
        if end > self._ends.get(segment, 0):
            self._ends[segment] = end

    def forget_segment(self, name: str) -> None:
        """``name`` was deleted (garbage): its indexed end goes with it."""
        self._ends.pop(name, None)
        self._begin()
        self._q("DELETE FROM segment_ends WHERE segment = ?", (name,))
        self._changed()

    def clear(self) -> None:
        """Empty the index (``rebuild-index`` fills it again from the segments and ops.log)."""
        self._begin()
        for table in ("entries", "tags", "segment_ends", "sealed_blocks", "sealed_keys", "sealed_bodies"):
            self._q(f"DELETE FROM {table}")
        self._q("DELETE FROM meta WHERE key = 'seq'")
        self._ends.clear()
        self.seq = 0
        self._count = 0

    # ------------------------------------------------------------------ sealed blocks (``_index_sealed``)

    def unseal(self, entry: Entry) -> None:
        """If ``entry``'s URL is sealed, make it a row again (a block never changes); a block with no
        live entry left goes, with the body keys that name it."""
        found = self.sealed_lookup(entry.url_key, entry.url)
        if found is None:
            return
        block, sealed = found
        self._begin()
        self._q(_INSERT, entry_row(sealed))
        self._q("DELETE FROM sealed_keys WHERE slot = ?", (key_slot(entry.url_key),))
        (live,) = self._q(
            "UPDATE sealed_blocks SET live = live - 1 WHERE block = ? RETURNING live", (block,)
        ).fetchone()
        if live <= 0:
            row = self._q("SELECT segment, data FROM sealed_blocks WHERE block = ?", (block,)).fetchone()
            slots = {body_slot(e.content_hash) for e in self._block(block, row[0], row[1]).entries()}
            self._many("DELETE FROM sealed_bodies WHERE slot = ? AND block = ?", ((h, block) for h in slots))
            self._q("DELETE FROM sealed_blocks WHERE block = ?", (block,))
        self._changed()

    def seal(self, limit: int = BLOCK_ENTRIES) -> int:
        """Fold up to ``limit`` archive-tier rows into sealed blocks, a segment's at a time; the number
        sealed (0: nothing left to seal). Commits, and gives the freed pages back to the file system."""
        segments = [
            r[0]
            for r in self._q(
                f"SELECT DISTINCT segment FROM entries WHERE tier = '{ARCHIVE_TIER}' AND record_segment IS NULL "
                "AND tags IS NULL"
            ).fetchall()
        ]
        sealed = 0
        for segment in segments:
            if sealed >= limit:
                break
            wanted = -(-(limit - sealed) // BLOCK_ENTRIES) * BLOCK_ENTRIES
            chosen = self._choose_sealable(segment, wanted)
            for start in range(0, len(chosen), BLOCK_ENTRIES):  # a step holds the store lock for its blocks only
                sealed += self._seal_block(segment, chosen[start : start + BLOCK_ENTRIES])
        if sealed:
            self.commit()
            try:  # a statement that frees one page a step: sqlite3_exec steps it to the end, execute() once
                self._db.executescript("PRAGMA incremental_vacuum;")
            except sqlite3.Error as exc:
                self._raise(exc)
        return sealed

    def _choose_sealable(self, segment: str, wanted: int) -> list[tuple[int, Entry]]:
        """Up to ``wanted`` of ``segment``'s sealable rows, in url order, each with its rowid.

        Only the blocks this step seals are chosen, and the rows are streamed: a step bounded to one
        block must neither probe nor hold every row of a large segment (the rest wait for the next
        step). Nothing is written while the rows are read: the step's deletes come after."""
        rows = self._q(
            f"SELECT rowid, {COLUMNS} FROM entries WHERE segment = ? AND record_segment IS NULL AND tags IS NULL "
            "ORDER BY url",
            (segment,),
        )
        chosen: list[tuple[int, Entry]] = []
        slots: set[int] = set()
        try:
            while len(chosen) < wanted and (batch := rows.fetchmany(1024)):
                for r in batch:
                    e = entry_of(r[1:])
                    slot = key_slot(e.url_key)
                    if not sealable(e) or slot in slots:
                        continue
                    if self._q("SELECT 1 FROM sealed_keys WHERE slot = ?", (slot,)).fetchone() is None:
                        # (a slot another URL has: this one stays a row)
                        slots.add(slot)
                        chosen.append((r[0], e))
                        if len(chosen) >= wanted:
                            break
        finally:
            rows.close()
        return chosen

    def _seal_block(self, segment: str, chosen: list[tuple[int, Entry]]) -> int:
        self._begin()
        entries = [e for _, e in chosen]
        block = self._q(
            "INSERT INTO sealed_blocks (segment, entries, live, data) VALUES (?, ?, ?, ?) RETURNING block",
            (segment, len(entries), len(entries), encode_block(entries)),
        ).fetchone()[0]
        self._many("INSERT INTO sealed_keys VALUES (?, ?)", ((key_slot(e.url_key), block) for e in entries))
        bodies = ((body_slot(e.content_hash), block) for e in entries)
        self._many("INSERT OR IGNORE INTO sealed_bodies VALUES (?, ?)", bodies)
        self._many("DELETE FROM entries WHERE rowid = ?", ((rowid,) for rowid, _ in chosen))
        return len(entries)

    # ------------------------------------------------------------------ transactions

    def commit(self) -> None:
        """Commit the open transaction with the indexed ends and the sequence number it reached."""
        if not self._in_txn and not self._ends and self.seq == self.committed_seq():
            return
        self._begin()
        self._many(
            "INSERT INTO segment_ends VALUES (?, ?) ON CONFLICT (segment) "
            "DO UPDATE SET indexed_end = max(indexed_end, excluded.indexed_end)",
            self._ends.items(),
        )
        self._q("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (self.seq,))
        self._q("COMMIT")
        self._in_txn = False
        self._ends.clear()
        self._changes = 0

    def checkpoint(self) -> list[Path]:
        """Commit and fold the WAL into the database file (emptied unless a snapshot is being read);
        the files that hold the index now (``-shm`` is shared memory, not data)."""
        self.commit()
        self._q("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return [self.path, self.path.with_name(self.path.name + "-wal"), self.ops_path]

    def snapshot(self) -> IndexSnapshot:
        """Commit, then a read transaction of its own (``IndexSnapshot``) for reads made without the store lock."""
        self.commit()
        return IndexSnapshot(self.path, cache_bytes=self._cache_bytes)

    def sync(self) -> None:
        self.commit()
        if self._ops_log is not None:
            self._ops_log.sync()

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self._db.close()
            if self._ops_log is not None:
                self._ops_log.close()
