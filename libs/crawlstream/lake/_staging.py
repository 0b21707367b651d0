"""The sink's staging log: rows made durable per batch, published as lake files in bulk.

Why it exists: the service loop commits its offsets after every batch, but a lake file per
batch would mean thousands of tiny files. So each batch's rows are appended here (one
CRC-framed record per batch, fsynced) before the commit, and published as Parquet only
when enough rows or enough time have gathered; the log is then truncated. After a crash
the log is replayed at start-up. A crash between publishing and truncating republishes
those rows: the lake tolerates duplicates across files (readers keep one row per
(dataset_id, url)), so this costs bytes, never answers.

Record: a big-endian ``crawlstream.durable`` frame (``>II``: payload length, crc32 of the
payload) + payload (UTF-8 JSON list of rows). A torn tail (a crash during append), and a record
failing its CRC, end the good records: ``replay`` truncates the log at the last good one.

Each sink member owns one directory and holds an exclusive ``flock`` on its ``LOCK`` file
while open (the kernel drops it when the process dies): :func:`claim_staging` gives a member
its host's name, or the first free ``<name>.<n>`` when other members on the same host hold it
(``--scale`` on one machine); :func:`orphaned_logs` finds sibling directories nobody holds, so
a surviving member adopts the rows of one that crashed and never came back (ADR 028).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crawlstream.durable import encode_frame, iter_frames, try_lock_exclusive
from crawlstream.errors import StorageUnavailable

__all__ = ["MAX_MEMBERS", "Row", "StagingLog", "claim_staging", "orphaned_logs"]

logger = logging.getLogger(__name__)

Row = tuple[int, str, str, int | None, str | None]
"""(dataset_id, canonical url, domain, ts_ms, extras JSON text): ``LakeWriter.add``'s arguments."""

LOG_NAME = "rows.log"
LOCK_NAME = "LOCK"
# Members of one group never exceed the partitions (128 at most): a slot past it is a leak.
MAX_MEMBERS = 128


class StagingLog:
    """An append-only, fsynced log of row batches in ``directory`` (locked while open)."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = try_lock_exclusive(self.directory / LOCK_NAME)
        except OSError as exc:
            raise StorageUnavailable(f"cannot open staging directory {self.directory}: {exc}") from exc
        if fd is None:
            raise StorageUnavailable(
                f"staging directory {self.directory} is locked by another parquet-sink process; "
                "give each instance its own directory"
            )
        self._lock_fd: int = fd
        self._open()

    @classmethod
    def try_open(cls, directory: Path, *, fsync: bool = True) -> StagingLog | None:
        """The log of ``directory`` (created if missing) if no other process holds it, else None."""
        try:
            Path(directory).mkdir(parents=True, exist_ok=True)
            fd = try_lock_exclusive(Path(directory) / LOCK_NAME)
        except OSError as exc:
            raise StorageUnavailable(f"cannot open staging directory {directory}: {exc}") from exc
        if fd is None:
            return None
        log = cls.__new__(cls)
        log.directory = Path(directory)
        log.fsync = fsync
        log._lock_fd = fd
        log._open()
        return log

    def _open(self) -> None:
        self._path = self.directory / LOG_NAME
        self._fh = open(self._path, "ab")  # noqa: SIM115 - closed in close()
        self.rows = 0

    def replay(self) -> list[Row]:
        """Every row of the log (call once, at start-up); truncates a torn tail."""
        rows = list(_read(self._path))
        self.rows = len(rows)
        return rows

    def append(self, rows: list[Row]) -> None:
        """Durably append one batch (fsynced before returning when ``fsync``)."""
        if not rows:
            return
        payload = json.dumps(rows, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        try:
            self._fh.write(encode_frame(payload, byteorder="big"))
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
        except OSError as exc:
            raise StorageUnavailable(f"cannot append to staging log {self._path}: {exc}") from exc
        self.rows += len(rows)

    def clear(self) -> None:
        """Forget every row: call only after they were published as lake files."""
        try:
            self._fh.truncate(0)
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
        except OSError as exc:
            raise StorageUnavailable(f"cannot truncate staging log {self._path}: {exc}") from exc
        self.rows = 0

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.close()
        os.close(self._lock_fd)


def _read(path: Path) -> Iterator[Row]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    pos = 0
    for frame in iter_frames(data, byteorder="big"):
        if not frame.intact:
            break  # damage ends the good batches, as a torn tail does
        batch: list[Any] = json.loads(bytes(frame.payload))
        for r in batch:
            if len(r) == 6:  # staged before the lake derived url_key (ADR 007): drop the key
                r = r[:3] + r[4:]
            yield (int(r[0]), str(r[1]), str(r[2]), r[3], r[4])
        pos = frame.end
    if pos < len(data):
        logger.warning("staging log %s: torn tail of %d bytes truncated (crash during append)", path, len(data) - pos)
        with open(path, "r+b") as fh:
            fh.truncate(pos)
            os.fsync(fh.fileno())


def claim_staging(parent: Path, name: str, *, fsync: bool = True) -> StagingLog:
    """This member's staging log: ``parent/name`` when free, else the first free ``name.2``,
    ``name.3``... A member restarted on its host takes its old directory back when it is the
    first free one; any other directory's rows are adopted, never lost (``orphaned_logs``)."""
    for slot in range(1, MAX_MEMBERS + 1):
        log = StagingLog.try_open(parent / (name if slot == 1 else f"{name}.{slot}"), fsync=fsync)
        if log is not None:
            if slot > 1:
                logger.info("parquet-sink: staging in %s (%s is held by another member)", log.directory, name)
            return log
    raise StorageUnavailable(
        f"every staging directory {name} .. {name}.{MAX_MEMBERS} under {parent} is held by a live "
        f"parquet-sink process: a group has at most {MAX_MEMBERS} members (one per partition)"
    )


def orphaned_logs(parent: Path, own: Path) -> Iterator[Path]:
    """Sibling staging directories under ``parent`` holding rows (open them with ``try_open``)."""
    if not parent.is_dir():
        return
    for d in sorted(parent.iterdir()):
        log = d / LOG_NAME
        if d != own and d.is_dir() and log.is_file() and log.stat().st_size > 0:
            yield d
