"""The url index on disk: ``index-<gen>.snap`` (the live index compacted) + ``index.log`` (puts since).

``index.log`` starts with ``{"snap": gen}`` naming the snapshot, then CRC-framed put records
(``put_record``) and end marks (``{"e": [segment, end]}``: everything of a segment a
maintenance step wrote is indexed). ``indexed_end`` is, per segment, where the indexed
records end: start-up re-indexes complete records past it (a crash between a segment write
and its index entry). Both files are rebuildable from the segments (``rebuild-index``).
Callers hold the store lock, except where a method says otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawlstream.durable import write_atomically
from crawlstream.errors import ChecksumMismatch
from crawlstream.store._codec import (
    KIND_BODY,
    RecordHeader,
    UnsupportedFormat,
    decode_index_snapshot,
    encode_index_snapshot,
    encode_log_record,
)
from crawlstream.store._config import StoreConfig
from crawlstream.store._files import AppendFile
from crawlstream.store._index import UrlIndex
from crawlstream.store._logs import read_log
from crawlstream.store._model import Entry, Location
from crawlstream.store._segments import Segments

__all__ = ["IndexLog", "entry_record", "moved_record", "put_record"]

logger = logging.getLogger(__name__)

SNAPSHOT_LOG_BYTES = 4 * 1024 * 1024  # a maintenance step snapshots the index once index.log is this large


class IndexLog:
    def __init__(self, root: Path, segments: Segments, config: StoreConfig, key_of: Callable[[str], int]) -> None:
        self._root = root
        self._segments = segments
        self._fsync_each = config.fsync_each
        self._key_of = key_of
        self.path = root / "index.log"
        self.snap_gen = 0
        self.indexed_end: dict[str, int] = {}
        self._log: AppendFile | None = None

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        """Put records of the snapshot named by index.log, then of the log; (records, snapshot ok).

        Also fills ``indexed_end`` and removes snapshot files a crash left behind (written,
        but never named by the log). Call once, before ``open``.
        """
        log = read_log(self.path)
        puts: list[dict[str, Any]] = []
        ok = True
        if log and "snap" in log[0]:
            self.snap_gen = int(log[0]["snap"])
            log = log[1:]
            path = self.snapshot_path
            try:
                _, puts, ends = decode_index_snapshot(path.read_bytes(), self._key_of)
                self.indexed_end.update(ends)
            except (OSError, ChecksumMismatch, UnsupportedFormat) as exc:
                logger.error("index snapshot %s unreadable (%s): rebuilding the index from the segments", path, exc)
                ok = False
        for stray in self._root.glob("index-*.snap*"):
            if stray.name != self.snapshot_path.name:
                stray.unlink()
        for rec in log:
            self._note(rec)
            if "e" not in rec:
                puts.append(rec)
        return puts, ok

    def open(self) -> None:
        self._log = AppendFile(self.path, fsync_each=self._fsync_each)

    @property
    def snapshot_path(self) -> Path:
        return self._root / f"index-{self.snap_gen}.snap"

    @property
    def size(self) -> int:
        return self._writer.size

    @property
    def _writer(self) -> AppendFile:
        assert self._log is not None, "open() first"
        return self._log

    def append(self, rec: dict[str, Any]) -> None:
        self._writer.append(encode_log_record(rec))
        self._note(rec)

    def _note(self, rec: dict[str, Any]) -> None:
        if "e" in rec:
            seg, end = str(rec["e"][0]), int(rec["e"][1])
            self.indexed_end[seg] = max(end, self.indexed_end.get(seg, 0))
            return
        for key in ("l", "r"):
            if key in rec:
                seg, off, length = rec[key][0], rec[key][1], rec[key][2]
                if off + length > self.indexed_end.get(seg, 0):
                    self.indexed_end[seg] = off + length

    def forget_segment(self, name: str) -> None:
        self.indexed_end.pop(name, None)

    def snapshot_due(self) -> bool:
        """True once index.log has outgrown max(4 MiB, the snapshot): time to compact it."""
        snap = self.snapshot_path
        snap_bytes = snap.stat().st_size if snap.exists() else 0
        return self.size >= max(SNAPSHOT_LOG_BYTES, snap_bytes)

    def _live_ends(self) -> dict[str, int]:
        return {seg: end for seg, end in self.indexed_end.items() if self._segments.exists(seg)}

    def snapshot(self, index: UrlIndex) -> None:
        """Compact the index: live entries -> ``index-<gen+1>.snap``, then a fresh index.log naming it.

        Crash-safe: the snapshot is written and fsynced under a new name first; the log swap
        is one atomic rename (write_atomically). A kill before the rename leaves the old log
        (and old snapshot) authoritative, the new file is a stray removed at start-up.
        """
        gen = self.snap_gen + 1
        records = [entry_record(e) for e in index.entries()]
        ends = self._live_ends()
        write_atomically(self._root / f"index-{gen}.snap", encode_index_snapshot(gen, records, ends, self._key_of))
        self._writer.close()
        write_atomically(self.path, encode_log_record({"snap": gen}))
        self._log = AppendFile(self.path, fsync_each=self._fsync_each)
        self.snapshot_path.unlink(missing_ok=True)
        self.snap_gen = gen
        self.indexed_end = ends

    def snapshot_beside_puts(self, index: UrlIndex, lock: threading.RLock) -> None:
        """``snapshot`` that holds ``lock`` only to copy the index and to swap the log (call without it).

        Under the lock: the live entries and the index.log length (mark). Outside: encode and
        write + fsync ``index-<gen+1>.snap``. Under the lock again: the new index.log is the
        snapshot record followed by the log records appended since the mark (puts made
        meanwhile), replaced atomically. Same crash states as ``snapshot``. The caller holds
        the maintenance lock (only one snapshot at a time).
        """
        with lock:
            gen = self.snap_gen + 1
            records = [entry_record(e) for e in index.entries()]
            ends = self._live_ends()
            mark = self.size
        write_atomically(self._root / f"index-{gen}.snap", encode_index_snapshot(gen, records, ends, self._key_of))
        del records
        with lock:
            with open(self.path, "rb") as fh:
                fh.seek(mark)
                tail = fh.read()
            self._writer.close()
            write_atomically(self.path, encode_log_record({"snap": gen}) + tail)
            self._log = AppendFile(self.path, fsync_each=self._fsync_each)
            self.snapshot_path.unlink(missing_ok=True)
            self.snap_gen = gen
            self.indexed_end = self._live_ends()

    def files(self) -> list[Path]:
        """The index files that count as index bytes (with ops.log, which the url index owns)."""
        return [self.path, self._root / "ops.log", self.snapshot_path]

    def sync(self) -> None:
        self._writer.sync()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()


def entry_record(e: Entry) -> dict[str, Any]:
    """The snapshot record of a live entry."""
    rec: dict[str, Any] = {
        "u": e.url,
        "k": e.url_key,
        "q": e.seq,
        "l": e.location.to_list(),
        "h": e.content_hash.hex(),
        "z": e.raw_size,
        "f": e.fetched_at_ms,
        "t": e.content_type,
        "n": e.title,
        "s": e.status,
    }
    if e.record_segment:
        rec["r"] = [e.record_segment, 0, e.record_bytes]
    return rec


def put_record(header: RecordHeader, loc: Location, rec_loc: Location | None) -> dict[str, Any]:
    """The index.log put record of a stored record: its body at ``loc``, its own reference record at ``rec_loc``."""
    m = header.meta
    rec: dict[str, Any] = {
        "u": m.get("u", ""),
        "k": header.url_key,
        "q": header.seq,
        "l": loc.to_list(),
        "h": header.content_hash.hex(),
        "z": header.raw_size,
        "f": header.fetched_at_ms,
        "t": m.get("t"),
        "n": m.get("n"),
        "s": m.get("s"),
    }
    if rec_loc is not None:
        rec["r"] = rec_loc.to_list()[:3]
    return rec


def moved_record(entry: Entry, loc: Location, rec_loc: Location | None, record_bytes: int = 0) -> dict[str, Any]:
    """The index put record of ``entry`` at its new location (``rec_loc``: its own ref record,
    ``record_bytes`` what that record costs: its length, or a group member's share)."""
    meta = {"u": entry.url, "t": entry.content_type, "n": entry.title, "s": entry.status}
    header = RecordHeader(
        KIND_BODY,
        loc.dict_id,
        entry.url_key,
        entry.seq,
        entry.fetched_at_ms,
        entry.raw_size,
        0,
        entry.content_hash,
        0,
        meta=meta,
    )
    rec = put_record(header, loc, rec_loc)
    if rec_loc is not None:
        rec["rb"] = record_bytes
    return rec
