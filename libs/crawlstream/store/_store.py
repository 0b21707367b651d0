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
from crawlstream.store._dicts import GLOBAL_DOMAIN, DictionaryStore
from crawlstream.store._files import AppendFile, ReadCache
from crawlstream.store._model import TIERS, Entry, Location, Problem
from crawlstream.store._urls import UrlParts, describe_url

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["ContentStore", "RecompressReport", "StoreStats", "VerifyReport"]

logger = logging.getLogger(__name__)

_TIER_RANK = {name: i for i, name in enumerate(TIERS)}
# fastCOVER segment size and scoring level: k=2048 beat 512/1024 (and tied 4096) on the same-site
# cluster with group frames; training at level 22 gave the same dictionary 3x slower (ADR 002).
_TRAIN_K = 2048
_TRAIN_LEVEL = 19
_GROUP_TIERS = ("cold", "archive")  # tiers written as group records (several pages per zstd frame)
_MAX_MEMBER_BODY = 0xFFFFFFFF  # a group member's body size is a u32; larger bodies stay single records
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
    moved_urls: int = 0
    moved_bodies: int = 0
    dictionaries_trained: int = 0
    segments_written: list[str] = field(default_factory=list)
    segments_removed: list[str] = field(default_factory=list)
    skipped_corrupt: int = 0


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

    @property
    def stored_bytes(self) -> int:
        return self.segment_bytes + self.dict_bytes + self.index_bytes

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
            puts.append(rec)
        return puts, ok

    def _note_indexed(self, rec: dict[str, Any]) -> None:
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
            rec["r"] = [e.record_segment, 0, 0]
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
        content = self._group_content(header, frame, header.content_size, item.frame_ok)
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
        self, header: GroupHeader, frame: memoryview | bytes, upto: int, frame_ok: bool, start: int = 0
    ) -> memoryview:
        """Bytes ``start:upto`` of a group frame's decompressed content (fewer if a damaged frame ends early).

        Stops decompressing once ``upto`` is reached, so reading an early member does not pay
        for the later ones. An intact frame is decoded in one ``stream_reader.read`` straight
        into the result (a third cheaper than feeding slices to a decompressobj, ADR 002). A
        frame failing its checksum is fed in slices and decompressed as far as zstd gets: the
        members it yields are trusted only if their own checksums match.
        """
        dec = self.dicts.decompressor(header.dict_id)
        if frame_ok:
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
    ) -> tuple[bytes, int]:
        """(record bytes, dict id): metadata line + body compressed as one frame, the domain's dictionary."""
        dict_id = self._dict_for(domain, body)
        meta_bytes = encode_meta(meta)
        frame = self.dicts.compressor(self.levels[tier], dict_id).compress(meta_bytes + body)
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
        if (loc.segment, loc.offset) in self._quarantined or loc.member in self._bad_members.get(
            (loc.segment, loc.offset), ()
        ):
            raise ChecksumMismatch(
                f"record at {loc.segment}:{loc.offset} (member {loc.member}) is quarantined as corrupt; "
                "run `crawlstream store verify`"
            )
        buf = self._reads.pread(self._seg_path(loc.segment), loc.offset, loc.length)
        member: int | None = None
        try:
            header = decode_record_header(buf)
            if header.record_size != loc.length:
                raise ChecksumMismatch(f"expected a record of {loc.length} bytes at {loc.segment}:{loc.offset}")
            if isinstance(header, GroupHeader):
                member = loc.member
                body = self._read_member(header, buf, loc)
                chash = content_hash(body)
            else:
                body = self._read_single(header, buf, loc)
                chash = header.content_hash
            if expected_hash is not None and chash != expected_hash:
                raise ChecksumMismatch(
                    f"record at {loc.segment}:{loc.offset} holds other content than the index expects"
                )
        except UnsupportedFormat:
            raise
        except (ChecksumMismatch, TornRecord, zstd.ZstdError) as exc:
            with self._lock:
                self._quarantine(loc.segment, loc.offset, loc.length, str(exc), buf, member=member)
            raise ChecksumMismatch(
                f"{exc}; the record is quarantined and will not be served. Run `crawlstream store verify` "
                "to scan the rest, and re-fetch the URL to store it again"
            ) from exc
        return body

    def _read_single(self, header: RecordHeader, buf: bytes, loc: Location) -> bytes:
        if header.kind != KIND_BODY:
            raise ChecksumMismatch(f"expected a body record of {loc.length} bytes at {loc.segment}:{loc.offset}")
        frame = memoryview(buf)[header.header_size :]
        if frame_checksum(frame) != header.frame_checksum:
            raise ChecksumMismatch(f"frame checksum mismatch at {loc.segment}:{loc.offset}")
        content = self.dicts.decompressor(header.dict_id).decompress(frame, max_output_size=header.content_size)
        if len(content) != header.content_size:
            raise ChecksumMismatch(f"record at {loc.segment}:{loc.offset} decompresses to the wrong size")
        body = content[header.meta_len :]
        if content_hash(body) != header.content_hash:
            raise ChecksumMismatch(f"content hash mismatch at {loc.segment}:{loc.offset}")
        return body

    def _read_member(self, header: GroupHeader, buf: bytes, loc: Location) -> bytes:
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
            piece = self._group_content(header, frame, member.end, False, member.start)
            _check_member(member, what, piece)
            return bytes(piece[member.meta_len :])
        head_end = member.start + member.meta_len
        try:
            with self.dicts.decompressor(header.dict_id).stream_reader(frame, read_size=len(frame)) as reader:
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
        """Scan every segment and decompress every body; quarantine and report damage."""
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
            detail = f"group members {bad} damaged{earlier}"
            report.problems.append(Problem(name, item.offset, item.length, "corrupt", detail))

    def rebuild_index(self) -> int:
        """Rewrite the index (snapshot + fresh index.log) from the segments; returns the entries found.

        Each record's URL and metadata come from the metadata line at the start of its
        frame. Tombstones and tags (ops.log) are kept and applied on top by sequence number.
        """
        with self._lock:
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

    # ------------------------------------------------------------------ tiers

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

    def _train(self, domain: str, samples: list[bytes], size: int, now_ms: int) -> bool:
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
        self.dicts.add(domain, trained.as_bytes(), samples=len(samples), created_ms=now_ms)
        return True

    def maintain(self, now_ms: int | None = None) -> list[RecompressReport]:
        """Move records down the tiers by age (warm, cold, archive thresholds)."""
        return [
            self.recompress(older_than_s=self.tier_after_s[t], tier=t, now_ms=now_ms)
            for t in ("warm", "cold", "archive")
        ]

    def recompress(
        self, older_than_s: float = 0.0, *, tier: str = "cold", now_ms: int | None = None
    ) -> RecompressReport:
        """Rewrite records fetched more than ``older_than_s`` ago into ``tier``.

        Crash-safe; the steps are ordered and must not be reordered:
        1. train and fsync any new dictionaries (before a frame can name them);
        2. write the new segment(s) and fsync them (and their directory);
        3. append index entries pointing at them and fsync the index;
        4. only then forget the old locations and delete segments nothing live points into.
        A kill between 2 and 3 leaves complete unindexed records, re-indexed at start-up.
        """
        if tier not in _TIER_RANK or tier == "hot":
            raise ValueError(f"recompress target must be warm, cold or archive, got {tier!r}")
        report = RecompressReport()
        now = self._clock_ms() if now_ms is None else now_ms
        cutoff = now - int(older_than_s * 1000)
        with self._lock:
            moving = [
                e
                for e in self._iter_entries()
                if _TIER_RANK[e.location.tier] < _TIER_RANK[tier] and e.fetched_at_ms <= cutoff
            ]
            if not moving:
                return report
            bodies: dict[bytes, bytes] = {}
            by_domain: dict[str, list[bytes]] = defaultdict(list)
            for entry in moving:
                if entry.content_hash in bodies:
                    continue
                try:
                    body = self.read_location(entry.location, expected_hash=entry.content_hash)
                except ChecksumMismatch:
                    report.skipped_corrupt += 1
                    continue
                bodies[entry.content_hash] = body
                by_domain[entry.domain].append(body)
            # 1. dictionaries
            report.dictionaries_trained = self.train_dictionaries(by_domain)
            # 2. new segments
            new_locs: dict[bytes, Location] = {}
            pending: list[dict[str, Any]] = []
            writer: AppendFile | None = None
            writers: list[AppendFile] = []

            def out() -> AppendFile:
                nonlocal writer
                if writer is None or writer.size >= self.segment_bytes:
                    writer = AppendFile(self._new_segment_path(tier), fsync_each=False)
                    writers.append(writer)
                return writer

            group: list[tuple[Entry, int, bytes, bytes]] = []  # (entry, kind, metadata line, body)
            group_hashes: set[bytes] = set()
            group_dict = group_raw = 0

            def flush_group() -> None:
                """Write the pending members as one group record (one zstd frame) and index them."""
                nonlocal group_raw
                if not group:
                    return
                # Smallest bodies first (references last): a member's read decodes the frame up to
                # its end, so only the largest member pays for the whole frame (ADR 002).
                group.sort(key=lambda m: (m[1] == KIND_REF, len(m[3])))
                contents = [meta_line + body for _, _, meta_line, body in group]
                frame = self.dicts.compressor(self.levels[tier], group_dict).compress(b"".join(contents))
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
                for i, (entry, kind, _, _) in enumerate(group):
                    here = Location(name, off, len(record), group_dict, tier, i)
                    if kind == KIND_REF:
                        pending.append(self._moved_record(entry, new_locs[entry.content_hash], here))
                    else:
                        new_locs[entry.content_hash] = here
                        report.moved_bodies += 1
                        pending.append(self._moved_record(entry, here, None))
                group.clear()
                group_hashes.clear()
                group_raw = 0

            order = sorted(moving, key=lambda e: (e.domain, e.url))
            # Raw bytes each domain brings (bodies stored once): a domain that does not fit in the
            # current group starts a new one, so groups split between domains rather than inside
            # one (its pages share the most, ADR 002).
            domain_bytes: dict[str, int] = defaultdict(int)
            counted: set[bytes] = set()
            for entry in order:
                if entry.content_hash in bodies and entry.content_hash not in counted:
                    counted.add(entry.content_hash)
                    domain_bytes[entry.domain] += len(bodies[entry.content_hash])
            group_domain = ""
            for entry in order:
                stored = bodies.get(entry.content_hash)
                if stored is None:
                    continue
                meta = {"u": entry.url, "t": entry.content_type, "n": entry.title, "s": entry.status}
                is_ref = entry.content_hash in new_locs or entry.content_hash in group_hashes
                body = b"" if is_ref else stored
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
                    group.append((entry, KIND_REF if is_ref else KIND_BODY, encode_meta(meta), body))
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
                )
                off = w.append(record)
                if is_ref:
                    pending.append(
                        self._moved_record(
                            entry, new_locs[entry.content_hash], Location(name, off, len(record), dict_id, tier)
                        )
                    )
                else:
                    new_locs[entry.content_hash] = Location(name, off, len(record), dict_id, tier)
                    report.moved_bodies += 1
                    pending.append(self._moved_record(entry, new_locs[entry.content_hash], None))
            flush_group()
            for w in writers:
                if self.fsync != "never":
                    w.sync()
                w.close()
                report.segments_written.append(self._seg_name(w.path))
            if writers and self.fsync != "never":
                fsync_dir(self.root / "segments" / tier)
            # 3. index entries
            for rec in pending:
                self._append_index(rec)
            if self.fsync != "never":
                self._index_log.sync()
            # 4. memory, then garbage
            for rec in pending:
                moved = self._lookup(rec["k"], rec["u"])
                if moved is None:
                    continue
                moved.location = Location.from_list(rec["l"])
                moved.record_segment = rec["r"][0] if "r" in rec else ""
                self._blobs[moved.content_hash] = moved.location
                report.moved_urls += 1
            report.segments_removed = self._collect_garbage()
            # 5. compact the index: superseded hot entries are dropped from the snapshot
            self._snapshot_index()
        logger.info(
            "recompressed %d urls (%d bodies) into %s: %d segments written, %d removed, %d dictionaries trained",
            report.moved_urls,
            report.moved_bodies,
            tier,
            len(report.segments_written),
            len(report.segments_removed),
            report.dictionaries_trained,
        )
        return report

    def _moved_record(self, entry: Entry, loc: Location, rec_loc: Location | None) -> dict[str, Any]:
        """The index put entry of ``entry`` at its new location (``rec_loc``: its own ref record)."""
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
        return self._put_record(header, loc, rec_loc)

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
            if name in used or name in quarantined_segments:
                continue
            if name == self._active_name and self._active is not None:
                self._active.close()  # nothing live in it: the next put starts a new segment
                self._active = None
                self._active_name = ""
            self._reads.forget(path)
            path.unlink()
            self._indexed_end.pop(name, None)
            removed.append(name)
        if removed:
            logger.info("removed %d garbage segments: %s", len(removed), ", ".join(removed))
        return removed

    # ------------------------------------------------------------------ stats

    def stats(self) -> StoreStats:
        with self._lock:
            entries = list(self._iter_entries())
            by_tier: dict[str, dict[str, int]] = {t: {"urls": 0, "segments": 0, "bytes": 0} for t in TIERS}
            for entry in entries:
                by_tier[entry.location.tier]["urls"] += 1
            seg_bytes = 0
            for path in self._segment_files():
                size = path.stat().st_size
                seg_bytes += size
                tier = by_tier.setdefault(path.parent.name, {"urls": 0, "segments": 0, "bytes": 0})
                tier["segments"] += 1
                tier["bytes"] += size
            index_files = ["index.log", "ops.log", f"index-{self._snap_gen}.snap"]
            index_bytes = sum((self.root / n).stat().st_size for n in index_files if (self.root / n).exists())
            unique = {e.content_hash: e.raw_size for e in entries}
            return StoreStats(
                urls=len(entries),
                bodies=len(unique),
                raw_bytes=sum(e.raw_size for e in entries),
                segment_bytes=seg_bytes,
                dict_bytes=self.dicts.stored_bytes(),
                index_bytes=index_bytes,
                dictionaries=len(self.dicts.infos()),
                quarantined_regions=len(self._quarantined),
                by_tier=by_tier,
            )


def _check_member(member: Member, what: str, *parts: bytes | memoryview) -> None:
    """ChecksumMismatch unless ``parts`` (consecutive pieces) are the whole member and match its checksum."""
    if sum(map(len, parts)) != member.end - member.start or member_checksum(*parts) != member.checksum:
        raise ChecksumMismatch(f"{what} fails its checksum")
