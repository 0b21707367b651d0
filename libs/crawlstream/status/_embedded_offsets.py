"""End and committed offsets of an embedded bus, read from its files without opening it.

``EmbeddedBus`` takes an exclusive lock on its directory (one process per log), so the query
API, a separate process, cannot open the bus a crawl is running on. This module reads the
few files that hold what a status page needs, read-only, and never takes the lock:

* ``topics/<topic>/meta.json`` (``{"partitions": N}``);
* each partition's newest segment ``topics/<topic>/<p>/<base:020d>.log``: its end offset is
  the offset after the last complete record. Records are framed ``length u32 | crc u32 |
  offset i64 | ...`` (``length`` counts the bytes after the crc); the walk starts at the
  newest entry of the segment's sparse index ``<base>.idx`` (24-byte ``<qQq`` entries:
  offset, byte position, timestamp) and hops from one length prefix to the next. A record
  that runs past the end of the file is being written (or torn): the end is before it.
  The last position reached is remembered, so the next read only walks what was appended;
* ``groups/<group>/offsets.json`` (``{"<topic>": {"<partition>": next_offset}}``), or one
  ``offsets.<i>-of-<n>.json`` per member process of a shared log (ADR 025);
* a shared log's ``head`` (``crawlstream run --processes N``, ADR 025: 36 bytes, active
  segment base, published size, next offset, max timestamp, crc32 of those), when present
  with a valid crc: the end its writers published, read instead of walking the segment.

Tolerant by design: a missing or unreadable file, or one written in a format this reader
does not know, gives no value for that part (``None`` / left out), never an error, because
the bus may be starting, being written, or changed by a newer version. It does not verify
checksums: an estimate for a status page, not a reader of messages.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EmbeddedOffsets"]

logger = logging.getLogger(__name__)

_LENGTH_CRC_OFFSET = struct.Struct("<IIq")
_INDEX_ENTRY = struct.Struct("<qQq")
_HEAD_BODY = struct.Struct("<qQqq")
_HEAD_BYTES = _HEAD_BODY.size + 4
_MAX_RECORD_BYTES = 1 << 30  # a larger length field is corrupt: stop there


@dataclass
class _Cursor:
    """Where the last walk of one partition's newest segment stopped."""

    segment: Path
    position: int
    end_offset: int


class EmbeddedOffsets:
    """Reads end offsets and group commits of the embedded bus under ``root`` (``<data_dir>/bus``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cursors: dict[tuple[str, int], _Cursor] = {}

    def available(self) -> bool:
        return (self.root / "topics").is_dir()

    def topics(self) -> list[str]:
        """Topics with a readable ``meta.json``, sorted."""
        try:
            return sorted(p.parent.name for p in (self.root / "topics").glob("*/meta.json"))
        except OSError:
            return []

    def partition_count(self, topic: str) -> int | None:
        try:
            meta = json.loads((self.root / "topics" / topic / "meta.json").read_text(encoding="utf-8"))
            return int(meta["partitions"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def end_offsets(self, topic: str) -> list[int] | None:
        """Each partition's end offset (0 for a partition with no segment yet); None if the
        topic does not exist or is unreadable."""
        count = self.partition_count(topic)
        if count is None:
            return None
        return [self._end_offset(topic, p) for p in range(count)]

    def groups(self) -> list[str]:
        try:
            return sorted({p.parent.name for p in (self.root / "groups").glob("*/offsets*.json")})
        except OSError:
            return []

    def committed(self, group: str) -> dict[str, dict[int, int]]:
        """``{topic: {partition: next_offset}}`` as last committed by ``group`` ({} if none).

        A group run by several processes (``crawlstream run --processes N``) has one file per
        member, ``offsets.<i>-of-<n>.json``, beside or instead of ``offsets.json``; a partition's
        offset is the one in the most recently written file that has it, as the bus reads them.
        """
        try:
            files = sorted(
                (p.stat().st_mtime_ns, p.name, p) for p in (self.root / "groups" / group).glob("offsets*.json")
            )
        except OSError:
            return {}
        out: dict[str, dict[int, int]] = {}
        for _mtime, _name, path in files:
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                parsed = {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # being replaced, or damaged: the others still count
            for topic, parts in parsed.items():
                out.setdefault(topic, {}).update(parts)
        return out

    def close(self) -> None:
        """Nothing to release: every read opens and closes its file."""

    # -- one partition's end -------------------------------------------------------------

    def _end_offset(self, topic: str, partition: int) -> int:
        directory = self.root / "topics" / topic / str(partition)
        published = self._head(directory)
        if published is not None:
            return published
        try:
            bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
        except OSError:
            bases = []
        if not bases:
            return 0
        segment = directory / f"{bases[-1]:020d}.log"
        cursor = self._cursors.get((topic, partition))
        if cursor is None or cursor.segment != segment:
            cursor = _Cursor(segment, *self._index_start(segment, bases[-1]))
        self._walk(cursor)
        self._cursors[(topic, partition)] = cursor
        return cursor.end_offset

    @staticmethod
    def _head(directory: Path) -> int | None:
        """The next offset a shared log's ``head`` publishes, or None (no file, torn, bad crc)."""
        try:
            raw = (directory / "head").read_bytes()
        except OSError:
            return None
        if len(raw) != _HEAD_BYTES or zlib.crc32(raw[: _HEAD_BODY.size]) != int.from_bytes(raw[-4:], "little"):
            return None
        return int(_HEAD_BODY.unpack_from(raw, 0)[2])

    @staticmethod
    def _index_start(segment: Path, base: int) -> tuple[int, int]:
        """(position, offset) of the newest index entry of ``segment``, else its start."""
        try:
            raw = segment.with_suffix(".idx").read_bytes()
        except OSError:
            return 0, base
        usable = len(raw) - len(raw) % _INDEX_ENTRY.size
        if usable <= 0:
            return 0, base
        offset, position, _ts = _INDEX_ENTRY.unpack_from(raw, usable - _INDEX_ENTRY.size)
        return int(position), int(offset)

    @staticmethod
    def _walk(cursor: _Cursor) -> None:
        """Advance ``cursor`` over the complete records appended since it was last read."""
        try:
            fd = os.open(cursor.segment, os.O_RDONLY)
        except OSError:
            return
        try:
            size = os.fstat(fd).st_size
            if size < cursor.position:  # truncated (recovery) or replaced: start over
                cursor.position, cursor.end_offset = 0, int(cursor.segment.stem)
            while cursor.position + _LENGTH_CRC_OFFSET.size <= size:
                head = os.pread(fd, _LENGTH_CRC_OFFSET.size, cursor.position)
                if len(head) < _LENGTH_CRC_OFFSET.size:
                    break
                length, _crc, offset = _LENGTH_CRC_OFFSET.unpack(head)
                record_end = cursor.position + 8 + length
                if length < _LENGTH_CRC_OFFSET.size - 8 or length > _MAX_RECORD_BYTES or record_end > size:
                    break  # being written, torn, or not a record: the end is before it
                cursor.position = record_end
                cursor.end_offset = offset + 1
        except OSError as exc:
            logger.debug("cannot read %s: %s", cursor.segment, exc)
        finally:
            os.close(fd)
