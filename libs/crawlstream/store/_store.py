"""The content store: append-only zstd segments, dictionaries, an index log and tiers.

Owns everything under its root directory::

    segments/<tier>/<n>.seg    records (see _codec): independently decompressible frames
    segments/<tier>/<n>.seg.invalid   copies of quarantined (damaged) regions
    dicts/                     zstd dictionaries + dicts.log
    FORMAT                     {"store_format": 3}: other layouts are refused, never misread
    index-<gen>.snap           compacted live index (zstd-compressed columns), named by index.log
    index.log                  {"snap": gen} then CRC-framed put entries since that snapshot:
                               url -> location (both rebuildable from segments)
    ops.log                    CRC-framed tombstones and tag operations (not rebuildable)
    quarantine.log             damaged regions: never served again

Durability contract (``fsync``): a record is *acknowledged* when ``put`` returns. With
"always" it is fsynced (segment then index) before that; with "batch" (default) it is in
the OS page cache (survives kill -9, not power loss) and fsynced by ``sync``/``close``/a
segment roll/``recompress``; "never" leaves even those to the OS.
Ordering on every write: segment record first, index entry second. Start-up truncates torn
tails and re-indexes complete records that a crash left unindexed, so an acknowledged
record is never lost and a torn one is never served.

Not thread-safe for concurrent writers across processes: one writer process per root
(the bucket compressor instance that owns the partition); threads share a lock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import zstandard as zstd

from crawlstream.durable import fsync_dir, write_atomically
from crawlstream.errors import BadDataError, ChecksumMismatch, ConfigError
from crawlstream.store._codec import (
    KIND_BODY,
    KIND_REF,
    MAX_GROUP_MEMBERS,
    VERSION,
    GroupHeader,
    Member,
    RecordHeader,
    ScanItem,
    TornRecord,
    UnsupportedFormat,
    content_hash,
    decode_index_snapshot,
    decode_log_records,
    decode_meta,
    decode_record_header,
    encode_group,
    encode_index_snapshot,
    encode_log_record,
    encode_meta,
    encode_record,
    frame_checksum,
    member_checksum,
    scan_records,
)
from crawlstream.store._dicts import GLOBAL_DOMAIN, DictCodecs, DictionaryStore
from crawlstream.store._files import AppendFile, ReadCache
from crawlstream.store._maintenance import (
    GROUP_TIERS,
    TIER_RANK,
    GroupShape,
    Move,
    batch_order,
    pick_batch,
    sample_evenly,
    segment_live_bytes,
    target_tier,
)
from crawlstream.store._model import TIERS, Entry, Location, Problem
from crawlstream.store._urls import UrlParts, describe_url

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["ContentStore", "RecompressReport", "StoreStats", "VerifyReport"]

logger = logging.getLogger(__name__)

_TIER_RANK = TIER_RANK
# fastCOVER segment size and scoring level: k=2048 beat 512/1024 (and tied 4096) on the same-site
# cluster with group frames; training at level 22 gave the same dictionary 3x slower (ADR 002).
_TRAIN_K = 2048
_TRAIN_LEVEL = 19
_GROUP_TIERS = GROUP_TIERS  # tiers written as group records (several pages per zstd frame)
_MAX_MEMBER_BODY = 0xFFFFFFFF  # a group member's body size is a u32; larger bodies stay single records
_SNAPSHOT_LOG_BYTES = 4 * 1024 * 1024  # a maintenance step snapshots the index once index.log is this large
_GROUP_READ_SLICE = 16 * 1024  # compressed bytes fed per step when salvaging the members of a damaged group frame


@dataclass
class VerifyReport:
    segments: int = 0
    records: int = 0
    bodies_checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class RecompressReport:
    """What one maintenance batch (or several, merged) did."""

    moved_urls: int = 0
    moved_bodies: int = 0
    dictionaries_trained: int = 0
    segments_written: list[str] = field(default_factory=list)
    segments_removed: list[str] = field(default_factory=list)
    skipped_corrupt: int = 0
    kind: str = "tier"  # "tier" (moved down by age), "compact" (dead space reclaimed), "maintain" (merged)
    tier: str = ""  # the tier written
    raw_bytes: int = 0  # raw content bytes read and rewritten
    skipped_changed: int = 0  # entries deleted or replaced while their batch was rewritten: left as they were
    cancelled: bool = False  # stopped before the swap: nothing of the batch was kept
    freed_bytes: int = 0  # bytes of the segment files removed

    def merge(self, other: RecompressReport) -> None:
        self.moved_urls += other.moved_urls
        self.moved_bodies += other.moved_bodies
        self.dictionaries_trained += other.dictionaries_trained
        self.segments_written += other.segments_written
        self.segments_removed += other.segments_removed
        self.skipped_corrupt += other.skipped_corrupt
        self.raw_bytes += other.raw_bytes
        self.skipped_changed += other.skipped_changed
        self.freed_bytes += other.freed_bytes
        self.cancelled = self.cancelled or other.cancelled


@dataclass
class StoreStats:
    urls: int
    bodies: int
    raw_bytes: int
    segment_bytes: int
    dict_bytes: int
    index_bytes: int
    dictionaries: int
    quarantined_regions: int
    by_tier: dict[str, dict[str, int]]
    live_bytes: int = 0  # segment bytes live entries use (group records: their live members' share)
    dead_bytes: int = 0  # segment bytes of deleted, replaced or moved records: what compaction can free
    other_bytes: int = 0  # quarantine log and copies of damaged regions, FORMAT
    quarantined_urls: list[str] = field(default_factory=list)  # live URLs whose body is quarantined

    @property
    def stored_bytes(self) -> int:
        """Every byte the store keeps on disk."""
        return self.segment_bytes + self.dict_bytes + self.index_bytes + self.other_bytes

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 0.0


class ContentStore:
    """Keeps every page compact and readable alone. See the module docstring for layout."""

    def __init__(
        self,
        root: Path,
        *,
        hot_level: int = 3,
        warm_level: int = 9,
        cold_level: int = 22,
        archive_level: int = 22,
        dict_min_samples: int = 64,
        dict_size_bytes: int = 1024 * 1024,
        global_dict_size_bytes: int = 8 * 1024 * 1024,
        dict_sample_divisor: int = 8,
        dict_preload_bytes: int = 64 * 1024 * 1024,
        global_dict_min_samples: int = 32,
        large_body_bytes: int = 4 * 1024 * 1024,
        group_bytes: int = 1024 * 1024,
        global_group_bytes: int = 640 * 1024,
        segment_bytes: int = 64 * 1024 * 1024,
        fsync: str = "batch",
        shards: int = 16,
        warm_after_s: float = 7 * 86400,
        cold_after_s: float = 30 * 86400,
        archive_after_s: float = 90 * 86400,
        maintenance_budget_bytes: int = 32 * 1024 * 1024,
        maintenance_memory_bytes: int = 256 * 1024 * 1024,
        compact_dead_ratio: float = 0.5,
        key_fn: Callable[[str], int] | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if fsync not in ("always", "batch", "never"):
            raise ConfigError(f"store fsync must be always, batch or never, got {fsync!r}")
        self.root = Path(root)
        self.levels = {"hot": hot_level, "warm": warm_level, "cold": cold_level, "archive": archive_level}
        self.dict_min_samples = dict_min_samples
        self.dict_size_bytes = dict_size_bytes
        self.global_dict_size_bytes = global_dict_size_bytes
        self.dict_sample_divisor = max(1, dict_sample_divisor)
        self.dict_preload_bytes = dict_preload_bytes
        self.global_dict_min_samples = global_dict_min_samples
        self.large_body_bytes = large_body_bytes
        self.group_bytes = group_bytes
        self.global_group_bytes = global_group_bytes
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.tier_after_s = {"warm": warm_after_s, "cold": cold_after_s, "archive": archive_after_s}
        self.maintenance_budget_bytes = max(1, maintenance_budget_bytes)
        self.maintenance_memory_bytes = max(1, maintenance_memory_bytes)
        self.compact_dead_ratio = compact_dead_ratio
        # Maintenance state: one step at a time (_maint_lock, taken before _lock, never after it);
        # segments being written by a step are not garbage yet; record shapes for space accounting.
        self._maint_lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._group_shapes: dict[tuple[str, int], GroupShape] = {}
        self._unmovable: set[tuple[str, int, int]] = set()
        self._compact_failed: set[str] = set()
        self._key_fn = key_fn
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        self._shards: list[dict[int, list[Entry]]] = [{} for _ in range(max(1, shards))]
        self._by_domain: dict[str, dict[str, Entry]] = defaultdict(dict)
        self._by_tag: dict[str, dict[str, Entry]] = defaultdict(dict)
        self._blobs: dict[bytes, Location] = {}
        self._quarantined: set[tuple[str, int]] = set()
        self._bad_members: dict[tuple[str, int], set[int]] = defaultdict(set)
        self._seq = 0
        self._reads = ReadCache()
        self._active: AppendFile | None = None
        self._active_name = ""
        self._snap_gen = 0
        self._indexed_end: dict[str, int] = {}
        self.recovered_records = 0
        self._open()

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> ContentStore:
        s = settings.store
        kwargs: dict[str, Any] = dict(
            hot_level=s.zstd_level,
            warm_level=s.warm_level,
            cold_level=s.cold_level,
            archive_level=s.archive_level,
            dict_min_samples=s.dict_min_samples,
            dict_size_bytes=s.dict_size_bytes,
            global_dict_size_bytes=s.global_dict_size_bytes,
            dict_sample_divisor=s.dict_sample_divisor,
            dict_preload_bytes=s.dict_preload_bytes,
            global_dict_min_samples=s.global_dict_min_samples,
            large_body_bytes=s.large_body_bytes,
            group_bytes=s.group_bytes,
            global_group_bytes=s.global_group_bytes,
            segment_bytes=s.segment_bytes,
            fsync=s.fsync,
            warm_after_s=s.warm_after_s,
            cold_after_s=s.cold_after_s,
            archive_after_s=s.archive_after_s,
            maintenance_budget_bytes=s.maintenance_budget_bytes,
            maintenance_memory_bytes=s.maintenance_memory_bytes,
            compact_dead_ratio=s.compact_dead_ratio,
        )
        kwargs.update(overrides)
        return cls(settings.data_dir / "store", **kwargs)

    # ------------------------------------------------------------------ start-up

    def _open(self) -> None:
        self._check_format()
        (self.root / "segments").mkdir(parents=True, exist_ok=True)
        self.dicts = DictionaryStore(self.root / "dicts", fsync=self.fsync != "never")
        self.dicts.preload(self.dict_preload_bytes)
        puts, snapshot_ok = self._read_index()
        ops = self._read_log(self.root / "ops.log")
        for rec in self._read_log(self.root / "quarantine.log"):
            if "m" in rec:
                self._bad_members[(rec["seg"], rec["off"])].add(rec["m"])
            else:
                self._quarantined.add((rec["seg"], rec["off"]))
        self._index_log = AppendFile(self.root / "index.log", fsync_each=self.fsync == "always")
        self._ops_log = AppendFile(self.root / "ops.log", fsync_each=self.fsync == "always")
        self._quarantine_log = AppendFile(self.root / "quarantine.log", fsync_each=self.fsync != "never")
        if not snapshot_ok:
            self.rebuild_index()
        else:
            puts.extend(self._recover_segment_tails(puts))
            self._build_memory(puts, ops)
        self._collect_garbage()

    def _check_format(self) -> None:
        """Refuse a root written by another layout version (no migration: a clear error instead)."""
        marker = self.root / "FORMAT"
        if marker.exists():
            try:
                found = json.loads(marker.read_text()).get("store_format")
            except (ValueError, AttributeError):
                found = None
            if found != VERSION:
                raise UnsupportedFormat(
                    f"store {self.root} is in format {found!r}, this build reads format {VERSION}; "
                    "open it with the build that wrote it, or re-ingest into a new store directory"
                )
            return
        if (self.root / "index.log").exists() or any((self.root / "segments").glob("*/*.seg")):
            raise UnsupportedFormat(
                f"store {self.root} has no FORMAT marker: it was written by format 1 (before the marker); "
                f"this build reads format {VERSION}. Re-ingest the pages into a new store directory"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomically(marker, json.dumps({"store_format": VERSION}).encode())

    def _key_of(self, url: str) -> int:
        return describe_url(url, self._key_fn).url_key

    def _read_index(self) -> tuple[list[dict[str, Any]], bool]:
        """Put entries of the snapshot named by index.log, then of the log; (entries, snapshot ok).

        Also fills ``_indexed_end`` (where start-up looks for unindexed records) and removes
        snapshot files a crash left behind (written, but never named by the log).
        """
        log = self._read_log(self.root / "index.log")
        puts: list[dict[str, Any]] = []
        ok = True
        if log and "snap" in log[0]:
            self._snap_gen = int(log[0]["snap"])
            log = log[1:]
            path = self.root / f"index-{self._snap_gen}.snap"
            try:
                _, puts, ends = decode_index_snapshot(path.read_bytes(), self._key_of)
                self._indexed_end.update(ends)
            except (OSError, ChecksumMismatch, UnsupportedFormat) as exc:
                logger.error("index snapshot %s unreadable (%s): rebuilding the index from the segments", path, exc)
                ok = False
        for stray in self.root.glob("index-*.snap*"):
            if stray.name != f"index-{self._snap_gen}.snap":
                stray.unlink()
        for rec in log:
            self._note_indexed(rec)
            if "e" not in rec:
                puts.append(rec)
        return puts, ok

    def _note_indexed(self, rec: dict[str, Any]) -> None:
        if "e" in rec:  # {"e": [segment, end]}: everything of a segment a maintenance step wrote is indexed
            seg, end = str(rec["e"][0]), int(rec["e"][1])
            self._indexed_end[seg] = max(end, self._indexed_end.get(seg, 0))
            return
        for key in ("l", "r"):
            if key in rec:
                seg, off, length = rec[key][0], rec[key][1], rec[key][2]
                if off + length > self._indexed_end.get(seg, 0):
                    self._indexed_end[seg] = off + length

    def _append_index(self, rec: dict[str, Any]) -> None:
        self._index_log.append(encode_log_record(rec))
        self._note_indexed(rec)

    def _snapshot_index(self) -> None:
        """Compact the index: live entries -> ``index-<gen+1>.snap``, then a fresh index.log naming it.

        Crash-safe: the snapshot is written and fsynced under a new name first; the log swap
        is one atomic rename (write_atomically). A kill before the rename leaves the old log
        (and old snapshot) authoritative, the new file is a stray removed at start-up.
        """
        gen = self._snap_gen + 1
        records = [self._entry_record(e) for e in self._iter_entries()]
        ends = {seg: end for seg, end in self._indexed_end.items() if self._seg_path(seg).exists()}
        write_atomically(self.root / f"index-{gen}.snap", encode_index_snapshot(gen, records, ends, self._key_of))
        self._index_log.close()
        write_atomically(self.root / "index.log", encode_log_record({"snap": gen}))
        self._index_log = AppendFile(self.root / "index.log", fsync_each=self.fsync == "always")
        (self.root / f"index-{self._snap_gen}.snap").unlink(missing_ok=True)
        self._snap_gen = gen
        self._indexed_end = ends

    def _snapshot_index_beside_puts(self) -> None:
        """``_snapshot_index`` that holds the lock only to copy the index and to swap the log.

        Under the lock: the live entries and the index.log length (mark). Outside: encode and
        write + fsync ``index-<gen+1>.snap``. Under the lock again: the new index.log is the
        snapshot record followed by the log records appended since the mark (puts made
        meanwhile), replaced atomically. Same crash states as ``_snapshot_index``. The caller
        holds ``_maint_lock`` (only one snapshot at a time).
        """
        with self._lock:
            gen = self._snap_gen + 1
            records = [self._entry_record(e) for e in self._iter_entries()]
            ends = {seg: end for seg, end in self._indexed_end.items() if self._seg_path(seg).exists()}
            mark = self._index_log.size
        write_atomically(self.root / f"index-{gen}.snap", encode_index_snapshot(gen, records, ends, self._key_of))
        del records
        with self._lock:
            log_path = self.root / "index.log"
            with open(log_path, "rb") as fh:
                fh.seek(mark)
                tail = fh.read()
            self._index_log.close()
            write_atomically(log_path, encode_log_record({"snap": gen}) + tail)
            self._index_log = AppendFile(log_path, fsync_each=self.fsync == "always")
            (self.root / f"index-{self._snap_gen}.snap").unlink(missing_ok=True)
            self._snap_gen = gen
            self._indexed_end = {seg: end for seg, end in self._indexed_end.items() if self._seg_path(seg).exists()}

    @staticmethod
    def _entry_record(e: Entry) -> dict[str, Any]:
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

    def _decode_item(self, name: str, item: ScanItem, data: bytes) -> tuple[list[tuple[RecordHeader, Location]], int]:
        """The records of one scanned record (one, or a group's members), with their metadata.

        Damaged parts are quarantined (a whole single record, or the group members failing
        their checksums) and left out. Returns (records, damaged members or records).
        """
        header = item.header
        assert header is not None
        tier = name.split("/", 1)[0]
        end = item.offset + item.length
        frame = memoryview(data)[item.offset + header.header_size : end]
        if isinstance(header, RecordHeader):
            try:
                full = self._with_meta(header, frame)
            except ChecksumMismatch as exc:
                self._quarantine(name, item.offset, item.length, str(exc), data[item.offset : end])
                return [], 1
            return [(full, Location(name, item.offset, item.length, header.dict_id, tier))], 0
        try:
            self.dicts.decompressor(header.dict_id)
        except ChecksumMismatch as exc:  # its dictionary is missing or corrupt: no member can be read
            self._quarantine(name, item.offset, item.length, str(exc), data[item.offset : end])
            return [], len(header.members)
        try:
            content = self._group_content(header, frame, header.content_size, item.frame_ok)
        except ChecksumMismatch:
            # The frame passed its checksum but does not hold what the member table says (a
            # collision in one of them): salvage member by member, as for a damaged frame.
            content = self._group_content(header, frame, header.content_size, False)
        out: list[tuple[RecordHeader, Location]] = []
        damaged = 0
        bad = self._bad_members.get((name, item.offset), set())
        for i in range(len(header.members)):
            if i in bad:
                damaged += 1
                continue
            try:
                rec = self._member_record(header, i, content)
            except ChecksumMismatch as exc:
                self._quarantine(name, item.offset, item.length, str(exc), data[item.offset : end], member=i)
                damaged += 1
                continue
            out.append((rec, Location(name, item.offset, item.length, header.dict_id, tier, i)))
        return out, damaged

    def _group_content(
        self,
        header: GroupHeader,
        frame: memoryview | bytes,
        upto: int,
        frame_ok: bool,
        start: int = 0,
        dicts: DictionaryStore | DictCodecs | None = None,
    ) -> memoryview:
        """Bytes ``start:upto`` of a group frame's decompressed content (fewer if a damaged frame ends early).

        Stops decompressing once ``upto`` is reached, so reading an early member does not pay
        for the later ones. An intact frame is decoded in one ``stream_reader.read`` straight
        into the result (a third cheaper than feeding slices to a decompressobj, ADR 002). A
        frame failing its checksum is fed in slices and decompressed as far as zstd gets: the
        members it yields are trusted only if their own checksums match.
        """
        dec = (dicts or self.dicts).decompressor(header.dict_id)
        if frame_ok:
            _check_declared_size(frame, upto, "group frame")
            try:
                with dec.stream_reader(frame, read_size=len(frame)) as reader:
                    content = reader.read(upto)
            except zstd.ZstdError as exc:
                raise ChecksumMismatch(f"group frame does not decompress: {exc}") from exc
            if len(content) < upto:
                raise ChecksumMismatch(f"group frame holds {len(content)} bytes, its members need {upto}")
            return memoryview(content)[start:upto]
        dobj = dec.decompressobj()
        pieces: list[bytes] = []
        have = pos = 0
        try:
            while have < upto and pos < len(frame):
                piece = dobj.decompress(frame[pos : pos + _GROUP_READ_SLICE])
                pos += _GROUP_READ_SLICE
                pieces.append(piece)
                have += len(piece)
        except zstd.ZstdError:
            pass  # keep what decoded before the damage
        return memoryview(b"".join(pieces))[start:upto]

    def _member_record(self, header: GroupHeader, index: int, content: memoryview) -> RecordHeader:
        """Member ``index`` of a group as a record header with its metadata (checked by its checksum)."""
        member = header.members[index]
        piece = content[member.start : member.end]
        _check_member(member, f"group member {index}", piece)
        meta = decode_meta(piece[: member.meta_len])
        try:
            url_key = self._key_of(str(meta["u"]))
            if member.kind == KIND_BODY:
                chash, raw_size = content_hash(piece[member.meta_len :]), member.body_size
            else:
                chash, raw_size = bytes.fromhex(meta["h"]), int(meta["z"])
            seq, fetched = int(meta["q"]), int(meta["f"])
        except (KeyError, TypeError, ValueError, BadDataError) as exc:
            raise ChecksumMismatch(f"group member {index} has incomplete metadata: {exc!r}") from exc
        return RecordHeader(
            member.kind, header.dict_id, url_key, seq, fetched, raw_size, 0, chash, 0, member.meta_len, meta=meta
        )

    def _with_meta(self, header: RecordHeader, frame: bytes | memoryview) -> RecordHeader:
        """The header completed with the metadata decompressed from its frame (rebuild/recovery)."""
        try:
            content = self.dicts.decompressor(header.dict_id).decompress(frame, max_output_size=header.content_size)
        except zstd.ZstdError as exc:
            raise ChecksumMismatch(f"record frame does not decompress: {exc}") from exc
        if len(content) != header.content_size:
            raise ChecksumMismatch(f"record frame holds {len(content)} bytes, header says {header.content_size}")
        return dataclasses.replace(header, meta=decode_meta(content[: header.meta_len]))

    def _read_log(self, path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        data = path.read_bytes()
        records, valid_end, skipped = decode_log_records(data)
        if skipped:
            logger.error("%s: %d log records failed their crc32 and were skipped", path, skipped)
        if valid_end < len(data):
            logger.warning("%s: torn tail of %d bytes truncated (crash during append)", path, len(data) - valid_end)
            with open(path, "r+b") as fh:
                fh.truncate(valid_end)
        return records

    def _segment_files(self) -> list[Path]:
        return sorted(p for p in (self.root / "segments").glob("*/*.seg") if p.is_file())

    def _seg_name(self, path: Path) -> str:
        return f"{path.parent.name}/{path.name}"

    def _seg_path(self, name: str) -> Path:
        return self.root / "segments" / name

    def _recover_segment_tails(self, puts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Index complete records past the last indexed one; truncate torn tails."""
        known_end = dict(self._indexed_end)
        blobs: dict[str, Location] = {}
        for rec in puts:
            blobs[rec["h"]] = Location.from_list(rec["l"])
        recovered: list[dict[str, Any]] = []
        for path in self._segment_files():
            name = self._seg_name(path)
            size = path.stat().st_size
            start = known_end.get(name, 0)
            if size <= start:
                continue
            data = path.read_bytes()
            refs: list[tuple[RecordHeader, Location]] = []
            for item in scan_records(data, start):
                if item.problem == "torn":
                    logger.warning(
                        "segment %s: torn tail of %d bytes at %d truncated (crash during append)",
                        name,
                        item.length,
                        item.offset,
                    )
                    with open(path, "r+b") as fh:
                        fh.truncate(item.offset)
                        os.fsync(fh.fileno())
                    break
                if item.problem == "corrupt":
                    self._quarantine(
                        name,
                        item.offset,
                        item.length,
                        "corrupt region found at start-up",
                        data[item.offset : item.offset + item.length],
                    )
                    continue
                for header, rec_loc in self._decode_item(name, item, data)[0]:
                    if header.kind == KIND_BODY:
                        blobs[header.content_hash.hex()] = rec_loc
                        recovered.append(self._put_record(header, rec_loc, None))
                    else:
                        refs.append((header, rec_loc))
            for header, rec_loc in refs:
                body_loc = blobs.get(header.content_hash.hex())
                if body_loc is None:
                    logger.error(
                        "segment %s: reference record at %d names a body that is not stored; skipped",
                        name,
                        rec_loc.offset,
                    )
                    continue
                recovered.append(self._put_record(header, body_loc, rec_loc))
        for rec in recovered:
            self._append_index(rec)
        if recovered:
            self._index_log.sync()
            self.recovered_records = len(recovered)
            logger.warning("re-indexed %d records that a crash left unindexed", len(recovered))
        return recovered

    @staticmethod
    def _put_record(header: RecordHeader, loc: Location, rec_loc: Location | None) -> dict[str, Any]:
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

    def _build_memory(self, puts: list[dict[str, Any]], ops: list[dict[str, Any]]) -> None:
        latest: dict[str, dict[str, Any]] = {}
        max_seq = 0
        for rec in puts:  # highest seq wins; a relocation (same seq, later in the log) wins too
            max_seq = max(max_seq, rec["q"])
            cur = latest.get(rec["u"])
            if cur is None or rec["q"] >= cur["q"]:
                latest[rec["u"]] = rec
        last_del: dict[str, int] = {}
        tags: dict[str, set[str]] = defaultdict(set)
        for op in sorted(ops, key=lambda o: o["q"]):
            max_seq = max(max_seq, op["q"])
            url = op["u"]
            if op["op"] == "del":
                last_del[url] = op["q"]
                tags.pop(url, None)
            elif op["op"] == "tag":
                tags[url].update(op["tags"])
            elif op["op"] == "untag":
                tags[url].difference_update(op["tags"])
        self._seq = max_seq
        for url, rec in latest.items():
            if rec["q"] <= last_del.get(url, -1):
                continue
            entry = self._entry_from_record(rec)
            entry.tags = set(tags.get(url, ()))
            self._insert(entry)

    def _entry_from_record(self, rec: dict[str, Any]) -> Entry:
        domain, path = self._domain_path(rec["u"])
        entry = Entry(
            url=rec["u"],
            url_key=rec["k"],
            location=Location.from_list(rec["l"]),
            content_hash=bytes.fromhex(rec["h"]),
            raw_size=rec["z"],
            seq=rec["q"],
            fetched_at_ms=rec["f"],
            domain=domain,
            path=path,
            content_type=rec.get("t"),
            title=rec.get("n"),
            status=rec.get("s"),
        )
        if "r" in rec:
            entry.record_segment = rec["r"][0]
            entry.record_bytes = int(rec.get("rb") or rec["r"][2])
        return entry

    def _domain_path(self, url: str) -> tuple[str, str]:
        try:
            parts = describe_url(url, self._key_fn)
        except BadDataError:
            return "", ""
        return parts.domain, parts.path

    # ------------------------------------------------------------------ memory index

    def _shard(self, url_key: int) -> dict[int, list[Entry]]:
        return self._shards[url_key % len(self._shards)]

    def _insert(self, entry: Entry) -> None:
        bucket = self._shard(entry.url_key).setdefault(entry.url_key, [])
        for i, old in enumerate(bucket):
            if old.url == entry.url:
                entry.tags = entry.tags or old.tags
                bucket[i] = entry
                break
        else:
            bucket.append(entry)
        self._by_domain[entry.domain][entry.url] = entry
        for tag in entry.tags:
            self._by_tag[tag][entry.url] = entry
        self._blobs[entry.content_hash] = entry.location

    def _remove(self, entry: Entry) -> None:
        shard = self._shard(entry.url_key)
        bucket = shard.get(entry.url_key, [])
        bucket[:] = [e for e in bucket if e.url != entry.url]
        if not bucket:
            shard.pop(entry.url_key, None)
        self._by_domain.get(entry.domain, {}).pop(entry.url, None)
        for tag in entry.tags:
            self._by_tag.get(tag, {}).pop(entry.url, None)
        if not any(e.content_hash == entry.content_hash for e in self._iter_entries()):
            self._blobs.pop(entry.content_hash, None)

    def _iter_entries(self) -> Iterator[Entry]:
        for shard in self._shards:
            for bucket in shard.values():
                yield from bucket

    def _lookup(self, url_key: int, url: str) -> Entry | None:
        for entry in self._shard(url_key).get(url_key, ()):
            if entry.url == url:  # the stored URL resolves 56-bit key collisions
                return entry
        return None

    def _parts(self, url: str) -> UrlParts:
        return describe_url(url, self._key_fn)

    # ------------------------------------------------------------------ writes

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _writer(self) -> AppendFile:
        if self._active is not None and self._active.size >= self.segment_bytes:
            self._active.sync()
            self._active.close()
            self._active = None
        if self._active is None:
            path = self._new_segment_path("hot")
            self._active = AppendFile(path, fsync_each=self.fsync == "always")
            self._active_name = self._seg_name(path)
        return self._active

    def _new_segment_path(self, tier: str) -> Path:
        numbers = [int(p.stem) for p in (self.root / "segments").glob("*/*.seg") if p.stem.isdigit()]
        number = max(numbers, default=0) + 1
        directory = self.root / "segments" / tier
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{number:010d}.seg"

    def _dict_for(self, domain: str, body: bytes) -> int:
        """The dictionary a body is compressed with: its domain's, none for bodies over ``large_body_bytes``."""
        return self.dicts.for_domain(domain) if len(body) <= self.large_body_bytes else 0

    def _group_cap(self, dict_id: int) -> int:
        """Raw bytes per group frame: smaller on the global dictionary, whose decoding is slowest.

        Matches into the large global dictionary (8 MB) miss the CPU caches, so its frames
        decode at ~0.9 GB/s against 1.5-5 GB/s without a dictionary or on a domain's own
        (≤ 1 MB) one; ``global_group_bytes`` keeps the worst read of such a group near the
        cost of the largest single pages (ADR 002).
        """
        return self.global_group_bytes if self.dicts.is_global(dict_id) else self.group_bytes

    def _make_record(
        self,
        kind: int,
        *,
        url_key: int,
        seq: int,
        fetched_at_ms: int,
        raw_size: int,
        chash: bytes,
        meta: dict[str, Any],
        body: bytes,
        domain: str,
        tier: str,
        codecs: DictCodecs | None = None,
    ) -> tuple[bytes, int]:
        """(record bytes, dict id): metadata line + body compressed as one frame, the domain's dictionary.

        ``codecs``: zstd contexts of the calling thread (maintenance); puts use the shared ones.
        """
        dict_id = self._dict_for(domain, body)
        meta_bytes = encode_meta(meta)
        frame = (codecs or self.dicts).compressor(self.levels[tier], dict_id).compress(meta_bytes + body)
        record = encode_record(
            kind=kind,
            url_key=url_key,
            seq=seq,
            fetched_at_ms=fetched_at_ms,
            raw_size=raw_size,
            chash=chash,
            meta_len=len(meta_bytes),
            frame=frame,
            dict_id=dict_id,
        )
        return record, dict_id

    def put(
        self,
        url: str,
        body: bytes,
        *,
        content_type: str | None = None,
        title: str | None = None,
        status: int | None = None,
        fetched_at_ms: int | None = None,
        tags: Iterable[str] = (),
    ) -> Location:
        """Store ``body`` for ``url``; idempotent (same url + body is a no-op).

        Identical bodies under other URLs are stored once: the second URL gets a small
        reference record and the first body's location.
        """
        parts = self._parts(url)
        chash = content_hash(body)
        fetched = self._clock_ms() if fetched_at_ms is None else fetched_at_ms
        tag_list = sorted(set(tags))
        with self._lock:
            existing = self._lookup(parts.url_key, parts.url)
            if existing is not None and existing.content_hash == chash:
                if tag_list:
                    self._tag_locked(existing, tag_list, "tag")
                return existing.location
            seq = self._next_seq()
            meta = {"u": parts.url, "t": content_type, "n": title, "s": status}
            writer = self._writer()
            blob = self._blobs.get(chash)
            rec_loc: Location | None = None
            # 1. the segment record (body, or a reference to an identical stored body)
            record, dict_id = self._make_record(
                KIND_BODY if blob is None else KIND_REF,
                url_key=parts.url_key,
                seq=seq,
                fetched_at_ms=fetched,
                raw_size=len(body),
                chash=chash,
                meta=meta,
                body=body if blob is None else b"",
                domain=parts.domain,
                tier="hot",
            )
            offset = writer.append(record)
            if blob is not None:
                rec_loc = Location(self._active_name, offset, len(record), dict_id, "hot")
                location = blob
            else:
                location = Location(self._active_name, offset, len(record), dict_id, "hot")
            # 2. the index entry (only after the record it points to is written)
            header = RecordHeader(
                KIND_BODY, location.dict_id, parts.url_key, seq, fetched, len(body), 0, chash, 0, meta=meta
            )
            self._append_index(self._put_record(header, location, rec_loc))
            # 3. memory
            entry = Entry(
                parts.url,
                parts.url_key,
                location,
                chash,
                len(body),
                seq,
                fetched,
                parts.domain,
                parts.path,
                content_type,
                title,
                status,
            )
            if existing is not None:
                entry.tags = set(existing.tags)
            if rec_loc is not None:
                entry.record_segment = rec_loc.segment
            self._insert(entry)
            if tag_list:
                self._tag_locked(entry, tag_list, "tag")
            return location

    def delete(self, url: str) -> bool:
        """Tombstone ``url``; effective at once. Returns False if it was not stored."""
        parts = self._parts(url)
        with self._lock:
            entry = self._lookup(parts.url_key, parts.url)
            if entry is None:
                return False
            self._ops_log.append(
                encode_log_record({"op": "del", "u": entry.url, "k": entry.url_key, "q": self._next_seq()})
            )
            self._remove(entry)
            return True

    def tag(self, url: str, *tags: str) -> None:
        self._tag_url(url, tags, "tag")

    def untag(self, url: str, *tags: str) -> None:
        self._tag_url(url, tags, "untag")

    def _tag_url(self, url: str, tags: Iterable[str], op: str) -> None:
        parts = self._parts(url)
        with self._lock:
            entry = self._lookup(parts.url_key, parts.url)
            if entry is None:
                raise KeyError(f"{parts.url} is not stored; put it before tagging it")
            self._tag_locked(entry, sorted(set(tags)), op)

    def _tag_locked(self, entry: Entry, tags: list[str], op: str) -> None:
        if not tags:
            return
        self._ops_log.append(
            encode_log_record({"op": op, "u": entry.url, "k": entry.url_key, "q": self._next_seq(), "tags": tags})
        )
        for tag in tags:
            if op == "tag":
                entry.tags.add(tag)
                self._by_tag[tag][entry.url] = entry
            else:
                entry.tags.discard(tag)
                self._by_tag.get(tag, {}).pop(entry.url, None)

    def sync(self) -> None:
        """fsync everything written so far (the 'batch' durability point)."""
        with self._lock:
            if self._active is not None:
                self._active.sync()
            self._index_log.sync()
            self._ops_log.sync()

    def close(self) -> None:
        with self._lock:
            if self.fsync != "never":
                self.sync()
            if self._active is not None:
                self._active.close()
                self._active = None
            self._index_log.close()
            self._ops_log.close()
            self._quarantine_log.close()
            self.dicts.close()
            self._reads.close()

    def __enter__(self) -> ContentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    def entry(self, url: str) -> Entry | None:
        parts = self._parts(url)
        return self._lookup(parts.url_key, parts.url)

    def get(self, url: str) -> bytes:
        """The body stored for ``url``; KeyError if absent, ChecksumMismatch if damaged."""
        parts = self._parts(url)
        return self.get_by_key(parts.url_key, parts.url)

    def get_by_key(self, url_key: int, url: str) -> bytes:
        """Read by key; ``url`` (canonical) picks the right entry when keys collide."""
        entry = self._lookup(url_key, url)
        if entry is None:
            raise KeyError(f"{url} (url_key {url_key}) is not stored")
        return self.read_location(entry.location, expected_hash=entry.content_hash)

    def read_location(self, loc: Location, *, expected_hash: bytes | None = None) -> bytes:
        """Read and verify one record: header crc, frame checksum, content hash, size.

        For a group member also its own checksum; a member of a group whose frame is damaged
        is still served when its checksum and content hash match.
        """
        return self._read_location(loc, expected_hash, self.dicts, self._reads)

    def _read_location(
        self, loc: Location, expected_hash: bytes | None, dicts: DictionaryStore | DictCodecs, reads: ReadCache
    ) -> bytes:
        """``read_location`` with the given zstd contexts and descriptors (maintenance has its own)."""
        if (loc.segment, loc.offset) in self._quarantined or loc.member in self._bad_members.get(
            (loc.segment, loc.offset), ()
        ):
            raise ChecksumMismatch(
                f"record at {loc.segment}:{loc.offset} (member {loc.member}) is quarantined as corrupt; "
                "run `crawlstream store verify`"
            )
        buf = reads.pread(self._seg_path(loc.segment), loc.offset, loc.length)
        member: int | None = None
        try:
            header = decode_record_header(buf)
            if header.record_size != loc.length:
                raise ChecksumMismatch(f"expected a record of {loc.length} bytes at {loc.segment}:{loc.offset}")
            if isinstance(header, GroupHeader):
                member = loc.member
                body = self._read_member(header, buf, loc, dicts)
                chash = content_hash(body)
            else:
                body = self._read_single(header, buf, loc, dicts)
                chash = header.content_hash
            if expected_hash is not None and chash != expected_hash:
                raise ChecksumMismatch(
                    f"record at {loc.segment}:{loc.offset} holds other content than the index expects"
                )
        # A record the index points at was written by this store (FORMAT guards the layout as
        # a whole), so a header naming another format version there is damage like any other.
        except (ChecksumMismatch, TornRecord, UnsupportedFormat, zstd.ZstdError) as exc:
            with self._lock:
                self._quarantine(loc.segment, loc.offset, loc.length, str(exc), buf, member=member)
            raise ChecksumMismatch(
                f"{exc}; the record is quarantined and will not be served. Run `crawlstream store verify` "
                "to scan the rest, and re-fetch the URL to store it again"
            ) from exc
        return body

    def _read_single(
        self, header: RecordHeader, buf: bytes, loc: Location, dicts: DictionaryStore | DictCodecs
    ) -> bytes:
        if header.kind != KIND_BODY:
            raise ChecksumMismatch(f"expected a body record of {loc.length} bytes at {loc.segment}:{loc.offset}")
        frame = memoryview(buf)[header.header_size :]
        if frame_checksum(frame) != header.frame_checksum:
            raise ChecksumMismatch(f"frame checksum mismatch at {loc.segment}:{loc.offset}")
        content = dicts.decompressor(header.dict_id).decompress(frame, max_output_size=header.content_size)
        if len(content) != header.content_size:
            raise ChecksumMismatch(f"record at {loc.segment}:{loc.offset} decompresses to the wrong size")
        body = content[header.meta_len :]
        if content_hash(body) != header.content_hash:
            raise ChecksumMismatch(f"content hash mismatch at {loc.segment}:{loc.offset}")
        return body

    def _read_member(
        self, header: GroupHeader, buf: bytes, loc: Location, dicts: DictionaryStore | DictCodecs
    ) -> bytes:
        """Body of member ``loc.member``, checked against the member's own checksum.

        An intact frame is decoded once, up to the member's end: first everything before its
        body, then the body straight into the bytes returned (no copy of the body is made).
        """
        if loc.member >= len(header.members) or header.members[loc.member].kind != KIND_BODY:
            raise ChecksumMismatch(f"group at {loc.segment}:{loc.offset} has no body member {loc.member}")
        member = header.members[loc.member]
        what = f"group member {loc.member} at {loc.segment}:{loc.offset}"
        frame = memoryview(buf)[header.header_size :]
        if frame_checksum(frame) != header.frame_checksum:
            logger.error(
                "group frame at %s:%d fails its checksum; checking member %d alone", loc.segment, loc.offset, loc.member
            )
            piece = self._group_content(header, frame, member.end, False, member.start, dicts)
            _check_member(member, what, piece)
            return bytes(piece[member.meta_len :])
        head_end = member.start + member.meta_len
        _check_declared_size(frame, member.end, what)
        try:
            with dicts.decompressor(header.dict_id).stream_reader(frame, read_size=len(frame)) as reader:
                head = reader.read(head_end)
                body = reader.read(member.body_size)
        except zstd.ZstdError as exc:
            raise ChecksumMismatch(f"group frame does not decompress: {exc}") from exc
        # a frame ending early leaves both short: their lengths no longer add up to the member's
        _check_member(member, what, memoryview(head)[member.start :], body)
        return body

    def search(
        self, domain: str | None = None, path_prefix: str | None = None, tag: str | None = None
    ) -> Iterator[Entry]:
        """Entries matching all given filters, sorted by URL; reads the index only."""
        with self._lock:
            if domain is not None:
                pool: Iterable[Entry] = list(self._by_domain.get(domain, {}).values())
            elif tag is not None:
                pool = list(self._by_tag.get(tag, {}).values())
            else:
                pool = list(self._iter_entries())
        for entry in sorted(pool, key=lambda e: e.url):
            if tag is not None and tag not in entry.tags:
                continue
            if path_prefix is not None and not entry.path.startswith(path_prefix):
                continue
            yield entry

    def __len__(self) -> int:
        return sum(len(b) for shard in self._shards for b in shard.values())

    # ------------------------------------------------------------------ integrity

    def _quarantine(
        self, segment: str, offset: int, length: int, detail: str, data: bytes, *, member: int | None = None
    ) -> None:
        """Never serve this region again (``member``: only that member of a group record).

        The region's bytes are copied to ``<segment>.invalid`` once (for a group, with its
        first damaged member) and the decision is logged in quarantine.log.
        """
        if (segment, offset) in self._quarantined:
            return
        bad = self._bad_members.get((segment, offset))
        if member is not None and bad is not None and member in bad:
            return
        rec: dict[str, Any] = {"seg": segment, "off": offset, "len": length, "why": detail}
        if member is None:
            self._quarantined.add((segment, offset))
        else:
            self._bad_members[(segment, offset)].add(member)
            rec["m"] = member
        invalid = self._seg_path(segment + ".invalid")
        if not bad:
            with open(invalid, "ab") as fh:
                fh.write(data)
        self._quarantine_log.append(encode_log_record(rec))
        logger.error(
            "quarantined %d bytes of segment %s at offset %d%s: %s (copy in %s)",
            length,
            segment,
            offset,
            "" if member is None else f" (group member {member})",
            detail,
            invalid,
        )

    def quarantined(self) -> list[tuple[str, int]]:
        """Damaged regions (segment, offset): whole records, and groups with damaged members."""
        return sorted(self._quarantined | {key for key, members in self._bad_members.items() if members})

    def verify(self) -> VerifyReport:
        """Scan every segment and decompress every body; quarantine and report damage.

        Each problem names the live URLs whose body was in the damaged region (lost until
        re-fetched); waits for a maintenance step in progress (its new segments are not done).
        """
        with self._maint_lock:
            report = self._verify_scan()
            with self._lock:
                lost = self._urls_in_regions([(p.segment, p.offset, p.length) for p in report.problems])
            report.problems = [
                dataclasses.replace(p, urls=tuple(lost.get((p.segment, p.offset), ()))) for p in report.problems
            ]
        return report

    def _urls_in_regions(self, regions: list[tuple[str, int, int]]) -> dict[tuple[str, int], list[str]]:
        """Live URLs whose body lies in one of ``regions`` (segment, offset, length) and cannot be read:
        the whole record is quarantined, or the URL's member of a group is."""
        by_seg: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for seg, off, length in regions:
            by_seg[seg].append((off, length))
        out: dict[tuple[str, int], list[str]] = defaultdict(list)
        for e in self._iter_entries():
            loc = e.location
            for off, length in by_seg.get(loc.segment, ()):
                if off <= loc.offset < off + max(length, 1) and self._is_quarantined(loc):
                    out[(loc.segment, off)].append(e.url)
        for urls in out.values():
            urls.sort()
        return out

    def _is_quarantined(self, loc: Location) -> bool:
        return (loc.segment, loc.offset) in self._quarantined or loc.member in self._bad_members.get(
            (loc.segment, loc.offset), ()
        )

    def quarantined_urls(self) -> list[str]:
        """Live URLs whose body is quarantined (reads fail until the page is fetched and stored again)."""
        with self._lock:
            return sorted(e.url for e in self._iter_entries() if self._is_quarantined(e.location))

    def _verify_scan(self) -> VerifyReport:
        report = VerifyReport()
        with self._lock:
            for path in self._segment_files():
                name = self._seg_name(path)
                report.segments += 1
                data = path.read_bytes()
                for item in scan_records(data):
                    if item.problem:
                        report.problems.append(Problem(name, item.offset, item.length, item.problem))
                        if item.problem == "corrupt" or name != self._active_name:
                            self._quarantine(
                                name,
                                item.offset,
                                item.length,
                                item.problem,
                                data[item.offset : item.offset + item.length],
                            )
                        continue
                    assert item.header is not None
                    if isinstance(item.header, GroupHeader):
                        self._verify_group(name, item, data, report)
                        continue
                    report.records += 1
                    if item.header.kind == KIND_BODY:
                        loc = Location(name, item.offset, item.length, item.header.dict_id, path.parent.name)
                        if (name, item.offset) in self._quarantined:
                            report.problems.append(
                                Problem(name, item.offset, item.length, "corrupt", "quarantined earlier")
                            )
                            continue
                        try:
                            self.read_location(loc)
                            report.bodies_checked += 1
                        except ChecksumMismatch as exc:
                            report.problems.append(Problem(name, item.offset, item.length, "corrupt", str(exc)))
        return report

    def _verify_group(self, name: str, item: ScanItem, data: bytes, report: VerifyReport) -> None:
        """Check every member of a group (one decompression); damaged members are reported."""
        assert isinstance(item.header, GroupHeader)
        if (name, item.offset) in self._quarantined:
            report.records += len(item.header.members)
            report.problems.append(Problem(name, item.offset, item.length, "corrupt", "quarantined earlier"))
            return
        known_bad = set(self._bad_members.get((name, item.offset), set()))
        records, damaged = self._decode_item(name, item, data)
        report.records += len(item.header.members)
        report.bodies_checked += sum(1 for header, _ in records if header.kind == KIND_BODY)
        if damaged:
            bad = sorted(self._bad_members.get((name, item.offset), set()))
            earlier = f" ({sorted(known_bad)} quarantined earlier)" if known_bad else ""
            detail = f"group members {bad} damaged{earlier}" if bad else "whole group unreadable (see quarantine.log)"
            report.problems.append(Problem(name, item.offset, item.length, "corrupt", detail))

    def rebuild_index(self) -> int:
        """Rewrite the index (snapshot + fresh index.log) from the segments; returns the entries found.

        Each record's URL and metadata come from the metadata line at the start of its
        frame. Tombstones and tags (ops.log) are kept and applied on top by sequence number.
        """
        with self._maint_lock, self._lock:
            bodies: dict[str, Location] = {}
            records: list[tuple[RecordHeader, Location]] = []
            ends: dict[str, int] = {}
            for path in self._segment_files():
                name = self._seg_name(path)
                data = path.read_bytes()
                ends[name] = len(data)
                for item in scan_records(data):
                    if item.problem or item.header is None or (name, item.offset) in self._quarantined:
                        continue
                    for header, loc in self._decode_item(name, item, data)[0]:
                        records.append((header, loc))
                        if header.kind == KIND_BODY:
                            prev = bodies.get(header.content_hash.hex())
                            if prev is None or _TIER_RANK[loc.tier] >= _TIER_RANK[prev.tier]:
                                bodies[header.content_hash.hex()] = loc
            out: list[dict[str, Any]] = []
            for header, loc in records:
                if header.kind == KIND_BODY:
                    out.append(self._put_record(header, loc, None))
                else:
                    body = bodies.get(header.content_hash.hex())
                    if body is not None:
                        out.append(self._put_record(header, body, loc))
            ops = self._read_log(self.root / "ops.log")
            for shard in self._shards:
                shard.clear()
            self._by_domain.clear()
            self._by_tag.clear()
            self._blobs.clear()
            self._build_memory(out, ops)
            self._indexed_end = ends
            self._snapshot_index()
            logger.info("index rebuilt from segments: %d records", len(out))
            return len(out)

    # ------------------------------------------------------------------ tiers and maintenance

    def train_dictionaries(self, samples_by_domain: dict[str, list[bytes]]) -> int:
        """Train a dictionary for each domain with enough samples and none yet; plus a global one.

        The global dictionary serves domains with too few pages of their own (the long tail).
        """
        trained = 0
        now = self._clock_ms()
        for domain, samples in sorted(samples_by_domain.items()):
            if not domain or len(samples) < self.dict_min_samples or self.dicts.has_own(domain):
                continue
            total = sum(map(len, samples))
            size = min(self.dict_size_bytes, max(4096, total // self.dict_sample_divisor))
            if self._train(domain, samples, size, now):
                trained += 1
        if not self.dicts.has_own(GLOBAL_DOMAIN):
            tail = [b for d, s in samples_by_domain.items() if not self.dicts.has_own(d) for b in s]
            if len(tail) >= self.global_dict_min_samples:
                size = min(self.global_dict_size_bytes, max(4096, sum(map(len, tail)) // self.dict_sample_divisor))
                if self._train(GLOBAL_DOMAIN, tail, size, now):
                    trained += 1
        return trained

    def _train(
        self, domain: str, samples: list[bytes], size: int, now_ms: int, cancel: threading.Event | None = None
    ) -> bool:
        try:
            trained = zstd.train_dictionary(
                size,
                cast(Any, samples),
                k=_TRAIN_K,
                d=8,
                dict_id=self.dicts.next_id(),
                level=_TRAIN_LEVEL,
                threads=1,
            )
        except zstd.ZstdError as exc:
            logger.warning(
                "zstd dictionary training for %s failed (%d samples): %s; storing without", domain, len(samples), exc
            )
            return False
        if cancel is not None and cancel.is_set():
            return False  # stopping: keep nothing of this step
        self.dicts.add(domain, trained.as_bytes(), samples=len(samples), created_ms=now_ms)
        return True

    def maintain(
        self,
        now_ms: int | None = None,
        *,
        ages_zero: bool = False,
        compact: bool = True,
        progress: Callable[[RecompressReport], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> RecompressReport:
        """Run bounded maintenance steps until nothing is eligible; then compact the index.

        Records move down the tiers by age (``warm_after_s`` …, all of them at once with
        ``ages_zero``) and segments with too much dead space are compacted (``compact``).
        ``progress`` is called after each step with its report.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        total = RecompressReport(kind="maintain")
        while cancel is None or not cancel.is_set():
            report = self.maintenance_step(now, ages_zero=ages_zero, compact=compact, cancel=cancel)
            if report is None:
                break
            total.merge(report)
            if progress is not None:
                progress(report)
            if report.cancelled or (report.moved_urls == 0 and not report.segments_removed):
                break  # nothing could be moved (changed meanwhile, or unreadable): the next step would repeat it
        with self._maint_lock:
            self._snapshot_index_beside_puts()
        return total

    def maintenance_step(
        self,
        now_ms: int | None = None,
        *,
        ages_zero: bool = False,
        compact: bool = True,
        cancel: threading.Event | None = None,
    ) -> RecompressReport | None:
        """One bounded step: the oldest batch due for a deeper tier, else one compaction batch.

        None when nothing is eligible. A batch holds at most ``maintenance_budget_bytes`` of
        raw content (at least one page) and goes to one tier: the deepest tier its oldest page
        is old enough for (``ages_zero``: every tier age counts as zero, so: archive).
        """
        now = self._clock_ms() if now_ms is None else now_ms

        def choose(entry: Entry) -> str | None:
            return target_tier(entry, now, self.tier_after_s, ages_zero=ages_zero)

        report = self._tier_step(choose, None, cancel)
        if report is None and compact:
            report = self._compact_step(cancel)
        return report

    def maintenance_backlog(self, now_ms: int | None = None, *, ages_zero: bool = False) -> dict[str, int]:
        """Raw bytes due for a deeper tier, and live bytes of segments due for compaction (an estimate)."""
        now = self._clock_ms() if now_ms is None else now_ms
        with self._lock:
            live = list(self._iter_entries())
            sizes = {self._seg_name(p): p.stat().st_size for p in self._segment_files()}
            skip = self._compaction_exempt()
        seen: set[bytes] = set()
        tier_bytes = 0
        for e in live:
            if target_tier(e, now, self.tier_after_s, ages_zero=ages_zero) and e.content_hash not in seen:
                seen.add(e.content_hash)
                tier_bytes += e.raw_size
        due = set(self._compaction_candidates(live, sizes, skip))
        compact_bytes = sum(e.raw_size for e in live if e.location.segment in due)
        return {"tier_bytes": tier_bytes, "compact_bytes": compact_bytes}

    def recompress(
        self, older_than_s: float = 0.0, *, tier: str = "cold", now_ms: int | None = None
    ) -> RecompressReport:
        """Rewrite every record fetched more than ``older_than_s`` ago into ``tier`` (bounded batches).

        Each batch is one maintenance batch (see ``_run_batch`` for the crash-safe order);
        the index is compacted at the end.
        """
        if tier not in _TIER_RANK or tier == "hot":
            raise ValueError(f"recompress target must be warm, cold or archive, got {tier!r}")
        now = self._clock_ms() if now_ms is None else now_ms
        cutoff = now - int(older_than_s * 1000)

        def choose(entry: Entry) -> str | None:
            moves = _TIER_RANK[entry.location.tier] < _TIER_RANK[tier] and entry.fetched_at_ms <= cutoff
            return tier if moves else None

        total = RecompressReport(tier=tier)
        while True:
            report = self._tier_step(choose, tier, None)
            if report is None:
                break
            total.merge(report)
            if report.moved_urls == 0 and not report.segments_removed:
                break
        with self._maint_lock:
            self._snapshot_index_beside_puts()
        logger.info(
            "recompressed %d urls (%d bodies) into %s: %d segments written, %d removed, %d dictionaries trained",
            total.moved_urls,
            total.moved_bodies,
            tier,
            len(total.segments_written),
            len(total.segments_removed),
            total.dictionaries_trained,
        )
        return total

    def _tier_step(
        self, choose: Callable[[Entry], str | None], tier: str | None, cancel: threading.Event | None
    ) -> RecompressReport | None:
        """Phase (a) of a tier batch: pick the oldest entries ``choose`` sends to the same tier."""
        with self._maint_lock:
            with self._lock:  # a consistent copy; the choice is made outside the lock, the swap re-checks
                live = [(e, e.location, e.seq) for e in self._iter_entries()]
            candidates: list[tuple[Entry, Location, int, str]] = []
            for e, loc, seq in live:
                target = choose(e)
                if target is not None and (loc.segment, loc.offset, loc.member) not in self._unmovable:
                    candidates.append((e, loc, seq, target))
            if not candidates:
                return None
            candidates.sort(key=lambda c: batch_order(c[0]))
            tier = tier or candidates[0][3]
            moves: list[Move] = []
            for e, loc, seq, target in candidates:
                if target != tier:
                    continue
                body_at = self._blobs.get(e.content_hash)
                # Another URL's copy of this body is already in a tier at least as deep: only this
                # URL's reference record moves (bounded batches must not store a body twice).
                keep = (
                    body_at is not None
                    and body_at != loc
                    and body_at.tier != "hot"
                    and _TIER_RANK[body_at.tier] >= _TIER_RANK[tier]
                    and body_at.segment not in self._in_flight
                )
                moves.append(Move(e, loc, seq, keep, body_at if keep else None))
            return self._run_batch(pick_batch(moves, self.maintenance_budget_bytes), tier, "tier", cancel)

    def _compaction_exempt(self) -> set[str]:
        """Segments compaction must not touch: the active one, ones being written, quarantined ones."""
        exempt = {seg for seg, _ in self.quarantined()} | self._in_flight | self._compact_failed
        if self._active is not None:
            exempt.add(self._active_name)
        return exempt

    def _compaction_candidates(self, live: list[Entry], sizes: dict[str, int], exempt: set[str]) -> list[str]:
        """Segments whose estimated dead share is at least ``compact_dead_ratio``, oldest first."""
        usage, _ = segment_live_bytes(live, self._group_shapes)
        due = []
        for seg, size in sizes.items():
            if seg in exempt or size <= 0:
                continue
            dead = size - min(size, usage.get(seg, 0.0))
            if dead / size >= self.compact_dead_ratio:
                due.append(seg)
        return sorted(due, key=lambda s: s.rsplit("/", 1)[-1])

    def _compact_step(self, cancel: threading.Event | None) -> RecompressReport | None:
        """Phase (a) of a compaction batch: the oldest segments (one tier) with too much dead space.

        Their live records are rewritten into the same tier; the old segments are then garbage.
        """
        with self._maint_lock:
            with self._lock:
                live = list(self._iter_entries())
                sizes = {self._seg_name(p): p.stat().st_size for p in self._segment_files()}
                exempt = self._compaction_exempt()
            _, unknown = segment_live_bytes(live, self._group_shapes)
            if unknown:
                self._learn_group_shapes(unknown)
            due = self._compaction_candidates(live, sizes, exempt)
            if not due:
                return None
            tier = due[0].split("/", 1)[0]
            by_seg: dict[str, list[Entry]] = defaultdict(list)
            for e in live:
                by_seg[e.location.segment].append(e)
                if e.record_segment and e.record_segment != e.location.segment:
                    by_seg[e.record_segment].append(e)
            chosen: list[str] = []
            used = 0
            for seg in due:
                if seg.split("/", 1)[0] != tier:
                    continue
                raw = sum(e.raw_size for e in {e.content_hash: e for e in by_seg[seg]}.values())
                if chosen and used + raw > self.maintenance_budget_bytes:
                    break
                chosen.append(seg)
                used += raw
            picked = set(chosen)
            moves: list[Move] = []
            seen: set[str] = set()
            for seg in chosen:
                for e in by_seg[seg]:
                    if e.url in seen:
                        continue
                    seen.add(e.url)
                    if e.location.segment in picked:
                        moves.append(Move(e, e.location, e.seq))
                    else:  # only its reference record is here; the body stays where it is
                        moves.append(Move(e, e.location, e.seq, True, e.location))
            moves.sort(key=lambda m: batch_order(m.entry))
            report = self._run_batch(moves, tier, "compact", cancel)
            if not report.cancelled:
                gone = set(report.segments_removed)
                self._compact_failed.update(seg for seg in chosen if seg not in gone)
            return report

    def _learn_group_shapes(self, groups: list[Location], limit: int = 10_000) -> None:
        """Read the member tables of group records (header bytes only) for space accounting."""
        reads = ReadCache()
        try:
            for loc in groups[:limit]:
                path = self._seg_path(loc.segment)
                try:
                    head = reads.pread(path, loc.offset, 8)
                    size = int.from_bytes(head[4:8], "little")
                    buf = reads.pread(path, loc.offset, min(loc.length, 8 + size))
                    # The frame is not needed to decode the table: zeros stand in for it.
                    header = decode_record_header(buf + bytes(loc.length - len(buf)))
                except (BadDataError, ChecksumMismatch, OSError) as exc:
                    logger.debug("group record at %s:%d not examined: %s", loc.segment, loc.offset, exc)
                    continue
                if isinstance(header, GroupHeader):
                    self._group_shapes[(loc.segment, loc.offset)] = GroupShape(
                        tuple(m.end - m.start for m in header.members),
                        frozenset(i for i, m in enumerate(header.members) if m.kind == KIND_BODY),
                    )
        finally:
            reads.close()

    def _run_batch(
        self, moves: list[Move], tier: str, kind: str, cancel: threading.Event | None
    ) -> RecompressReport:
        """Rewrite ``moves`` into ``tier``: a bounded batch that holds the store lock only to swap.

        The steps are ordered for crash safety; do not reorder them:

        (a) (the caller, under ``_lock``) choose the batch and remember each entry's location
            and seq;
        (b) without ``_lock`` (puts go on; they only append to the active hot segment):
            1. train and fsync any new dictionaries (before a frame can name them; a put of
               that domain may use one as soon as it is added: its file is durable first);
            2. read the bodies, compress them with this thread's own zstd contexts, write the
               new segment(s) (allocated under the lock, invisible to garbage collection while
               in flight) and fsync them and their directory;
        (c) under ``_lock``, for every entry still at the location and seq of (a) (not deleted
            or replaced meanwhile):
            3. append its index entry, then an end mark per new segment, and fsync the index;
            4. point memory at the new locations, then delete segments nothing live points into;
            5. compact the index (snapshot) once its log has grown.
        A kill during (b) leaves complete records nothing indexes: start-up re-indexes them as
        relocations (same seq, so a later put or a tombstone still wins) — nothing is lost and
        nothing is half-moved. A cancelled batch (``cancel`` set) deletes its new segments.
        Records of entries that changed meanwhile stay unindexed in the new segments (their
        end mark keeps start-up from re-indexing them) and are reclaimed by compaction.
        """
        report = RecompressReport(kind=kind, tier=tier)
        if not moves:
            return report
        codecs = self.dicts.private_codecs()
        reads = ReadCache()
        writers: list[AppendFile] = []
        pending: list[tuple[Move, dict[str, Any]]] = []
        try:
            if kind == "tier":
                report.dictionaries_trained = self._train_for(moves, codecs, reads, cancel)  # 1.
            if cancel is None or not cancel.is_set():
                pending = self._rewrite(moves, tier, codecs, reads, writers, report, cancel)  # 2.
        except BaseException:
            self._discard(writers)  # nothing indexes them yet: the batch leaves nothing behind
            raise
        finally:
            reads.close()
            codecs.clear()
            for w in writers:
                w.close()
        names = [self._seg_name(w.path) for w in writers]
        if cancel is not None and cancel.is_set():
            report.cancelled = True
            self._discard(writers)
            return report
        if writers and self.fsync != "never":
            for seg_dir in {w.path.parent for w in writers}:
                fsync_dir(seg_dir)
        report.segments_written = names
        self._swap(pending, writers, report)
        return report

    def _discard(self, writers: list[AppendFile]) -> None:
        """Delete a batch's new segments (cancelled or failed before the swap)."""
        with self._lock:
            for w in writers:
                w.close()
                w.path.unlink(missing_ok=True)
                self._in_flight.discard(self._seg_name(w.path))

    def _train_for(
        self, moves: list[Move], codecs: DictCodecs, reads: ReadCache, cancel: threading.Event | None
    ) -> int:
        """Step 1: dictionaries for the batch's domains that have none (and the global one).

        Samples come from every live page of the domain, not only the batch (spread evenly,
        at most ``maintenance_memory_bytes`` / 4 of them): a dictionary is trained once.
        """
        cap = max(1, self.maintenance_memory_bytes // 4)
        now = self._clock_ms()
        trained = 0
        domains = sorted({m.entry.domain for m in moves if not m.keep_body and m.entry.domain})
        for domain in domains:
            if self.dicts.has_own(domain) or (cancel is not None and cancel.is_set()):
                continue
            with self._lock:
                pool = sorted(self._by_domain.get(domain, {}).values(), key=lambda e: e.url)
            if len({e.content_hash for e in pool}) < self.dict_min_samples:
                continue
            samples = self._read_samples(sample_evenly(pool, cap), codecs, reads)
            if len(samples) >= self.dict_min_samples:
                size = min(self.dict_size_bytes, max(4096, sum(map(len, samples)) // self.dict_sample_divisor))
                trained += self._train(domain, samples, size, now, cancel)
            del samples
        tail_in_batch = any(not self.dicts.has_own(m.entry.domain) for m in moves if not m.keep_body)
        if not self.dicts.has_own(GLOBAL_DOMAIN) and tail_in_batch and (cancel is None or not cancel.is_set()):
            with self._lock:
                pool = [
                    e
                    for d in sorted(self._by_domain)
                    if not self.dicts.has_own(d)
                    for e in sorted(self._by_domain[d].values(), key=lambda e: e.url)
                ]
            if len({e.content_hash for e in pool}) >= self.global_dict_min_samples:
                samples = self._read_samples(sample_evenly(pool, cap), codecs, reads)
                if len(samples) >= self.global_dict_min_samples:
                    size = min(
                        self.global_dict_size_bytes, max(4096, sum(map(len, samples)) // self.dict_sample_divisor)
                    )
                    trained += self._train(GLOBAL_DOMAIN, samples, size, now, cancel)
        return trained

    def _read_samples(self, entries: list[Entry], codecs: DictCodecs, reads: ReadCache) -> list[bytes]:
        out = []
        for e in entries:
            try:
                out.append(self._read_location(e.location, e.content_hash, codecs, reads))
            except ChecksumMismatch:
                continue
        return out

    def _allocate_segment(self, tier: str, writers: list[AppendFile]) -> AppendFile:
        """A new segment for a maintenance batch: numbered and created under the lock (puts number
        theirs there too), and kept from garbage collection until the batch is swapped in."""
        with self._lock:
            writer = AppendFile(self._new_segment_path(tier), fsync_each=False)
            self._in_flight.add(self._seg_name(writer.path))
        writers.append(writer)
        return writer

    def _rewrite(
        self,
        moves: list[Move],
        tier: str,
        codecs: DictCodecs,
        reads: ReadCache,
        writers: list[AppendFile],
        report: RecompressReport,
        cancel: threading.Event | None,
    ) -> list[tuple[Move, dict[str, Any]]]:
        """Step 2 (no store lock): write ``moves`` into new segments of ``tier``; their index entries.

        Cold and archive pages are packed into group records (ADR 002): consecutive pages of
        one dictionary, whole domains per group where they fit, smallest members first.
        Identical bodies are written once; the other URLs get reference records (members).
        """
        bodies: dict[bytes, bytes] = {}
        for m in moves:
            if m.keep_body or m.entry.content_hash in bodies:
                continue
            key = (m.location.segment, m.location.offset, m.location.member)
            try:
                bodies[m.entry.content_hash] = self._read_location(m.location, m.entry.content_hash, codecs, reads)
            except ChecksumMismatch:
                report.skipped_corrupt += 1
                self._unmovable.add(key)
                continue
            report.raw_bytes += m.entry.raw_size
        # Bodies that stay where they are (keep_body moves) are referenced, never rewritten.
        new_locs: dict[bytes, Location] = {
            m.entry.content_hash: m.body_at for m in moves if m.keep_body and m.body_at is not None
        }
        pending: list[tuple[Move, dict[str, Any]]] = []
        writer: AppendFile | None = None

        def out() -> AppendFile:
            nonlocal writer
            if writer is None or writer.size >= self.segment_bytes:
                if writer is not None and self.fsync != "never":
                    writer.sync()
                writer = self._allocate_segment(tier, writers)
            return writer

        group: list[tuple[Move, int, bytes, bytes]] = []  # (move, kind, metadata line, body)
        group_hashes: set[bytes] = set()
        group_dict = group_raw = 0

        def flush_group() -> None:
            """Write the pending members as one group record (one zstd frame)."""
            nonlocal group_raw
            if not group:
                return
            # Smallest bodies first (references last): a member's read decodes the frame up to
            # its end, so only the largest member pays for the whole frame (ADR 002).
            group.sort(key=lambda m: (m[1] == KIND_REF, len(m[3])))
            contents = [meta_line + body for _, _, meta_line, body in group]
            frame = codecs.compressor(self.levels[tier], group_dict).compress(b"".join(contents))
            record = encode_group(
                dict_id=group_dict,
                members=[
                    (kind, len(meta_line), len(body), member_checksum(content))
                    for (_, kind, meta_line, body), content in zip(group, contents, strict=True)
                ],
                frame=frame,
            )
            w = out()
            name = self._seg_name(w.path)
            off = w.append(record)
            total = sum(map(len, contents)) or 1
            self._group_shapes[(name, off)] = GroupShape(
                tuple(map(len, contents)), frozenset(i for i, g in enumerate(group) if g[1] == KIND_BODY)
            )
            for i, (move, kind, _, _) in enumerate(group):
                here = Location(name, off, len(record), group_dict, tier, i)
                if kind == KIND_REF:
                    share = max(1, len(record) * len(contents[i]) // total)
                    body_loc = new_locs[move.entry.content_hash]
                    pending.append((move, self._moved_record(move.entry, body_loc, here, share)))
                else:
                    new_locs[move.entry.content_hash] = here
                    report.moved_bodies += 1
                    pending.append((move, self._moved_record(move.entry, here, None)))
            group.clear()
            group_hashes.clear()
            group_raw = 0

        order = sorted(moves, key=lambda m: (m.entry.domain, m.entry.url))
        # Raw bytes each domain brings (bodies stored once): a domain that does not fit in the
        # current group starts a new one, so groups split between domains rather than inside
        # one (its pages share the most, ADR 002).
        domain_bytes: dict[str, int] = defaultdict(int)
        counted: set[bytes] = set()
        for m in order:
            h = m.entry.content_hash
            if h in bodies and h not in counted and h not in new_locs:
                counted.add(h)
                domain_bytes[m.entry.domain] += len(bodies[h])
        group_domain = ""
        for m in order:
            if cancel is not None and cancel.is_set():
                return []
            entry = m.entry
            is_ref = entry.content_hash in new_locs or entry.content_hash in group_hashes
            stored = b"" if is_ref else bodies.get(entry.content_hash)
            if stored is None:
                continue  # unreadable: left where it is (quarantined by the read)
            meta = {"u": entry.url, "t": entry.content_type, "n": entry.title, "s": entry.status}
            body = stored
            if tier in _GROUP_TIERS and len(body) <= _MAX_MEMBER_BODY:
                dict_id = self._dict_for(entry.domain, body)
                meta.update(q=entry.seq, f=entry.fetched_at_ms)
                if is_ref:
                    meta.update(h=entry.content_hash.hex(), z=entry.raw_size)
                cap = self._group_cap(dict_id)
                if group and (
                    dict_id != group_dict
                    or group_raw + len(body) > cap
                    or (entry.domain != group_domain and group_raw + domain_bytes[entry.domain] > cap)
                    or len(group) >= MAX_GROUP_MEMBERS
                ):
                    flush_group()
                group.append((m, KIND_REF if is_ref else KIND_BODY, encode_meta(meta), body))
                group_hashes.add(entry.content_hash)
                group_dict = dict_id
                group_domain = entry.domain
                group_raw += len(body)
                continue
            flush_group()
            w = out()
            name = self._seg_name(w.path)
            record, dict_id = self._make_record(
                KIND_REF if is_ref else KIND_BODY,
                url_key=entry.url_key,
                seq=entry.seq,
                fetched_at_ms=entry.fetched_at_ms,
                raw_size=entry.raw_size,
                chash=entry.content_hash,
                meta=meta,
                body=body,
                domain=entry.domain,
                tier=tier,
                codecs=codecs,
            )
            off = w.append(record)
            here = Location(name, off, len(record), dict_id, tier)
            if is_ref:
                pending.append((m, self._moved_record(entry, new_locs[entry.content_hash], here, len(record))))
            else:
                new_locs[entry.content_hash] = here
                report.moved_bodies += 1
                pending.append((m, self._moved_record(entry, here, None)))
        flush_group()
        if self.fsync != "never":
            for w in writers:
                w.sync()
        return pending

    def _swap(
        self, pending: list[tuple[Move, dict[str, Any]]], writers: list[AppendFile], report: RecompressReport
    ) -> None:
        """Phase (c), steps 3-5 of ``_run_batch`` (under the lock; do not reorder)."""
        names = [self._seg_name(w.path) for w in writers]
        with self._lock:
            applied: list[tuple[Entry, dict[str, Any]]] = []
            for move, rec in pending:
                cur = self._lookup(move.entry.url_key, move.entry.url)
                if cur is None or cur.seq != move.seq or cur.location != move.location:
                    report.skipped_changed += 1  # deleted or replaced meanwhile: its new record is dead
                    continue
                applied.append((cur, rec))
            # 3. index entries, the new segments' ends, fsync
            for _, rec in applied:
                self._append_index(rec)
            for w, name in zip(writers, names, strict=True):
                self._append_index({"e": [name, w.size]})
            if self.fsync != "never":
                self._index_log.sync()
            # 4. memory, then garbage
            for cur, rec in applied:
                cur.location = Location.from_list(rec["l"])
                cur.record_segment = rec["r"][0] if "r" in rec else ""
                cur.record_bytes = int(rec.get("rb", 0))
                self._blobs[cur.content_hash] = cur.location
                report.moved_urls += 1
            self._in_flight.difference_update(names)
            before = {self._seg_name(p): p.stat().st_size for p in self._segment_files()}
            report.segments_removed = self._collect_garbage()
            report.freed_bytes = sum(before.get(n, 0) for n in report.segments_removed)
            snap = self.root / f"index-{self._snap_gen}.snap"
            snap_bytes = snap.stat().st_size if snap.exists() else 0
            due = self._index_log.size >= max(_SNAPSHOT_LOG_BYTES, snap_bytes)
        # 5. compact the index once its log outgrows the snapshot (encoded outside the lock)
        if due:
            self._snapshot_index_beside_puts()

    def _moved_record(
        self, entry: Entry, loc: Location, rec_loc: Location | None, record_bytes: int = 0
    ) -> dict[str, Any]:
        """The index put entry of ``entry`` at its new location (``rec_loc``: its own ref record,
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
        rec = self._put_record(header, loc, rec_loc)
        if rec_loc is not None:
            rec["rb"] = record_bytes
        return rec

    def _collect_garbage(self) -> list[str]:
        """Delete segment files no live entry points into (never the active one)."""
        used: set[str] = set()
        for entry in self._iter_entries():
            used.add(entry.location.segment)
            if entry.record_segment:
                used.add(entry.record_segment)
        quarantined_segments = {seg for seg, _ in self.quarantined()}
        removed: list[str] = []
        for path in self._segment_files():
            name = self._seg_name(path)
            if name in used or name in quarantined_segments or name in self._in_flight:
                continue
            if name == self._active_name and self._active is not None:
                self._active.close()  # nothing live in it: the next put starts a new segment
                self._active = None
                self._active_name = ""
            self._reads.forget(path)
            path.unlink()
            self._indexed_end.pop(name, None)
            self._compact_failed.discard(name)
            for key in [k for k in list(self._group_shapes) if k[0] == name]:  # list(): atomic copy
                del self._group_shapes[key]
            removed.append(name)
        if removed:
            logger.info("removed %d garbage segments: %s", len(removed), ", ".join(removed))
        return removed

    # ------------------------------------------------------------------ stats

    def stats(self) -> StoreStats:
        """Counts and sizes; live/dead segment bytes are estimates (group records by member share)."""
        with self._lock:
            entries = list(self._iter_entries())
        _, unknown = segment_live_bytes(entries, self._group_shapes)
        if unknown:
            self._learn_group_shapes(unknown, limit=len(unknown))
        with self._lock:
            entries = list(self._iter_entries())
            by_tier: dict[str, dict[str, int]] = {
                t: {"urls": 0, "records": 0, "segments": 0, "bytes": 0, "live_bytes": 0} for t in TIERS
            }
            records: dict[str, set[tuple[str, int]]] = defaultdict(set)
            for entry in entries:
                tier = entry.location.tier
                by_tier[tier]["urls"] += 1
                records[tier].add((entry.location.segment, entry.location.offset))
            for tier, recs in records.items():
                by_tier[tier]["records"] = len(recs)
            usage, _ = segment_live_bytes(entries, self._group_shapes)
            seg_bytes = live_bytes = 0
            for path in self._segment_files():
                size = path.stat().st_size
                seg_bytes += size
                live = min(size, int(usage.get(self._seg_name(path), 0)))
                live_bytes += live
                tier_stats = by_tier.setdefault(
                    path.parent.name, {"urls": 0, "records": 0, "segments": 0, "bytes": 0, "live_bytes": 0}
                )
                tier_stats["segments"] += 1
                tier_stats["bytes"] += size
                tier_stats["live_bytes"] += live
            index_files = ["index.log", "ops.log", f"index-{self._snap_gen}.snap"]
            index_bytes = sum((self.root / n).stat().st_size for n in index_files if (self.root / n).exists())
            counted = {self.root / n for n in index_files} | set(self._segment_files())
            other = sum(
                p.stat().st_size
                for p in self.root.rglob("*")
                if p.is_file() and p not in counted and p.parent != self.dicts.directory
            )
            unique = {e.content_hash: e.raw_size for e in entries}
            return StoreStats(
                urls=len(entries),
                bodies=len(unique),
                raw_bytes=sum(e.raw_size for e in entries),
                segment_bytes=seg_bytes,
                dict_bytes=self.dicts.stored_bytes(),
                index_bytes=index_bytes,
                dictionaries=len(self.dicts.infos()),
                quarantined_regions=len(self.quarantined()),
                by_tier=by_tier,
                live_bytes=live_bytes,
                dead_bytes=seg_bytes - live_bytes,
                other_bytes=other,
                quarantined_urls=sorted(e.url for e in entries if self._is_quarantined(e.location)),
            )


def _check_declared_size(frame: bytes | memoryview, needed: int, what: str) -> None:
    """ChecksumMismatch if a checksummed frame declares less content than a member table needs.

    ``stream_reader.read(n)`` allocates ``n`` bytes up front, and ``n`` comes from the member
    table, which only a crc32 guards: a collision there must not become a 4 GiB allocation.
    """
    try:
        declared = zstd.frame_content_size(frame)
    except zstd.ZstdError as exc:
        raise ChecksumMismatch(f"{what} has no valid zstd frame header: {exc}") from exc
    if 0 <= declared < needed:
        raise ChecksumMismatch(f"{what} holds {declared} bytes, its members need {needed}")


def _check_member(member: Member, what: str, *parts: bytes | memoryview) -> None:
    """ChecksumMismatch unless ``parts`` (consecutive pieces) are the whole member and match its checksum."""
    if sum(map(len, parts)) != member.end - member.start or member_checksum(*parts) != member.checksum:
        raise ChecksumMismatch(f"{what} fails its checksum")
