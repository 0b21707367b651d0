"""Integrity: the format check and crash recovery at start-up, ``verify`` and ``rebuild-index``.

Start-up re-indexes complete records a crash left past each segment's indexed end (the
uncommitted tail of the index, ADR 036) and truncates torn tails (ADR 002's order makes that
enough: a record is written before its index row), then applies ops.log past the last
sequence number the index committed. ``verify`` scans every record and names the live URLs
whose body it lost; ``rebuild_index`` rewrites the index from the records' metadata lines,
keeping tombstones and tags (ops.log) on top by sequence number.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawlstream.durable import write_atomically
from crawlstream.errors import BadDataError, ChecksumMismatch
from crawlstream.store._codec import (
    KIND_BODY,
    GroupHeader,
    RecordHeader,
    ScanItem,
    UnsupportedFormat,
    scan_records,
)
from crawlstream.store._index import UrlIndex
from crawlstream.store._index_legacy import LEGACY_FORMAT
from crawlstream.store._logs import read_log
from crawlstream.store._maintenance import TIER_RANK
from crawlstream.store._model import Entry, Location, Problem
from crawlstream.store._quarantine import Quarantine
from crawlstream.store._reader import RecordReader
from crawlstream.store._reports import VerifyReport
from crawlstream.store._segments import SegmentMissing, Segments
from crawlstream.store._urls import UrlParts

__all__ = ["STORE_FORMAT", "Integrity", "check_format", "mark_format", "quarantined_urls"]

logger = logging.getLogger(__name__)

STORE_FORMAT = 4  # 4: the index in index.sqlite (ADR 036); 3: snapshot + index.log, migrated on open

# A record found in a segment: its header, where its body is, its own reference record (if a reference).
_Found = tuple[RecordHeader, Location, Location | None]


def check_format(root: Path) -> bool:
    """Refuse a root written by another layout; True when it is format 3, whose index the caller migrates."""
    marker = root / "FORMAT"
    if (root / "LAYOUT").exists():
        raise UnsupportedFormat(
            f"{root} is a sharded content store (LAYOUT): open it with crawlstream.store.open_store or "
            "ShardedStore, which routes each URL to its shard"
        )
    if marker.exists():
        try:
            found = json.loads(marker.read_text()).get("store_format")
        except (ValueError, AttributeError):
            found = None
        if found == LEGACY_FORMAT:
            return True
        if found != STORE_FORMAT:
            raise UnsupportedFormat(
                f"store {root} is in format {found!r}, this build reads format {STORE_FORMAT} (and migrates "
                f"format {LEGACY_FORMAT}); open it with the build that wrote it, or re-ingest into a new store "
                "directory"
            )
        return False
    if (root / "index.log").exists() or any((root / "segments").glob("*/*.seg")):
        raise UnsupportedFormat(
            f"store {root} has no FORMAT marker: it was written by format 1 (before the marker); "
            f"this build reads format {STORE_FORMAT}. Re-ingest the pages into a new store directory"
        )
    root.mkdir(parents=True, exist_ok=True)
    mark_format(root)
    return False


def mark_format(root: Path) -> None:
    write_atomically(root / "FORMAT", json.dumps({"store_format": STORE_FORMAT}).encode())


def quarantined_urls(index: UrlIndex, quarantine: Quarantine) -> list[str]:
    """Live URLs whose body is quarantined: the entries of each damaged region (under the store lock)."""
    urls = [
        e.url
        for segment, offset in quarantine.regions()
        for e in index.entries_in(segment, offset, offset + 1)
        if quarantine.has(e.location)
    ]
    return sorted(urls)


class Integrity:
    def __init__(
        self,
        *,
        segments: Segments,
        reader: RecordReader,
        quarantine: Quarantine,
        index: UrlIndex,
        lock: threading.RLock,
        maint_lock: threading.Lock,
        parts: Callable[[str], UrlParts],
    ) -> None:
        self._segments = segments
        self._reader = reader
        self._quarantine = quarantine
        self._index = index
        self._lock = lock
        self._maint_lock = maint_lock
        self._parts = parts

    # ------------------------------------------------------------------ start-up

    def recover_segment_tails(self, ops: list[dict[str, Any]]) -> int:
        """Index complete records past each segment's indexed end, truncate torn tails, apply ``ops``
        (ops.log) past the committed seq; returns the records re-indexed."""
        known_end = self._index.segment_ends()
        committed = self._index.committed_seq()
        found: list[_Found] = []
        bodies: dict[bytes, Location] = {}
        sizes = self._segments.sizes()
        for name in self._segments.names():
            start = known_end.get(name, 0)
            if sizes[name] <= start:
                continue
            data = self._segments.read_all(name)  # an archive object only after a crash before its swap
            refs, end = self._scan_tail(name, data, start, found, bodies)
            for header, rec_loc in refs:
                body_loc = bodies.get(header.content_hash) or self._index.body_location(header.content_hash)
                if body_loc is None:
                    logger.error(
                        "segment %s: reference record at %d names a body that is not stored; skipped",
                        name,
                        rec_loc.offset,
                    )
                    continue
                found.append((header, body_loc, rec_loc))
            self._index.indexed(name, end)
        self._apply(found, ops, committed)
        self._index.commit()
        if found:
            logger.warning("re-indexed %d records that a crash left unindexed", len(found))
        return len(found)

    def _scan_tail(
        self, name: str, data: bytes, start: int, found: list[_Found], bodies: dict[bytes, Location]
    ) -> tuple[list[tuple[RecordHeader, Location]], int]:
        """The records of ``name`` from ``start``: bodies into ``found`` (and ``bodies``), references
        returned (their body may come later); and where the whole records end."""
        refs: list[tuple[RecordHeader, Location]] = []
        end = start
        for item in scan_records(data, start):
            if item.problem == "torn" and self._segments.is_remote(name):
                logger.error("archive segment %s: torn record at %d (uploaded whole: damage)", name, item.offset)
                break
            if item.problem == "torn":
                logger.warning(
                    "segment %s: torn tail of %d bytes at %d truncated (crash during append)",
                    name,
                    item.length,
                    item.offset,
                )
                with open(self._segments.path(name), "r+b") as fh:
                    fh.truncate(item.offset)
                    os.fsync(fh.fileno())
                break
            end = item.offset + item.length
            if item.problem == "corrupt":
                self._quarantine.add(
                    name, item.offset, item.length, "corrupt region found at start-up", data[item.offset : end]
                )
                continue
            for header, rec_loc in self._reader.decode_item(name, item, data)[0]:
                if header.kind == KIND_BODY:
                    bodies[header.content_hash] = rec_loc
                    found.append((header, rec_loc, None))
                else:
                    refs.append((header, rec_loc))
        return refs, end

    def _apply(self, found: list[_Found], ops: list[dict[str, Any]], committed: int) -> None:
        """Bring the index up to date with ``found`` records and the ``ops`` past ``committed``, in seq order.

        A record of seq ``q`` wins over the URL's entry of a lower seq, and over one of the same seq
        when it is a relocation (a record of the same seq in a tier at least as deep); a record of a
        seq the index has committed is only a relocation of a live entry (a maintenance batch the kill
        interrupted): a URL deleted or replaced since keeps its state. A tombstone removes an entry
        of a lower seq, tags change the entry as ``tag`` did.
        """
        events: list[tuple[int, int, int]] = [
            (h.seq, TIER_RANK[(rec_loc or loc).tier], i) for i, (h, loc, rec_loc) in enumerate(found)
        ]
        events += [(int(op["q"]), -1, i) for i, op in enumerate(ops) if op["q"] > committed]
        events.sort()
        for seq, rank, i in events:
            self._index.seq = max(self._index.seq, seq)
            if rank < 0:
                self._apply_op(ops[i])
                continue
            header, loc, rec_loc = found[i]
            url = str(header.meta.get("u", ""))
            cur = self._index.lookup(header.url_key, url)
            if (seq <= committed and (cur is None or cur.seq != seq)) or (cur is not None and cur.seq > seq):
                continue
            entry = self._entry(url, header, loc, rec_loc)
            if cur is not None:
                entry.tags = set(cur.tags)
            self._index.insert(entry, cur)

    def _apply_op(self, op: dict[str, Any]) -> None:
        cur = self._index.lookup(op["k"], op["u"])
        if cur is None:
            return
        if op["op"] == "del" and cur.seq < op["q"]:
            self._index.remove(cur)
        elif op["op"] == "tag":
            self._index.restore_tags(cur, cur.tags | set(op["tags"]))
        elif op["op"] == "untag":
            self._index.restore_tags(cur, cur.tags - set(op["tags"]))

    def _entry(self, url: str, header: RecordHeader, loc: Location, rec_loc: Location | None) -> Entry:
        try:
            parts = self._parts(url)
            domain, path = parts.domain, parts.path
        except BadDataError:
            domain, path = "", ""
        m = header.meta
        entry = Entry(
            url,
            header.url_key,
            loc,
            header.content_hash,
            header.raw_size,
            header.seq,
            header.fetched_at_ms,
            domain,
            path,
            m.get("t"),
            m.get("n"),
            m.get("s"),
        )
        if rec_loc is not None:
            entry.record_segment = rec_loc.segment
            entry.record_bytes = rec_loc.length
        return entry

    def rebuild_index(self) -> int:
        """Rewrite the index from the segments and ops.log; returns the records found."""
        with self._maint_lock, self._lock:
            bodies: dict[bytes, Location] = {}
            records: list[tuple[RecordHeader, Location]] = []
            ends: dict[str, int] = {}
            for name in self._segments.names():
                data = self._segments.read_all(name)
                ends[name] = len(data)
                for item in scan_records(data):
                    if item.problem or item.header is None or (name, item.offset) in self._quarantine.records:
                        continue
                    for header, loc in self._reader.decode_item(name, item, data)[0]:
                        records.append((header, loc))
                        if header.kind == KIND_BODY:
                            prev = bodies.get(header.content_hash)
                            if prev is None or TIER_RANK[loc.tier] >= TIER_RANK[prev.tier]:
                                bodies[header.content_hash] = loc
            found: list[_Found] = []
            for header, loc in records:
                if header.kind == KIND_BODY:
                    found.append((header, loc, None))
                elif (body := bodies.get(header.content_hash)) is not None:
                    found.append((header, body, loc))
            del records
            self._index.clear()
            self._apply(found, read_log(self._index.ops_path), 0)
            for name, end in ends.items():
                self._index.indexed(name, end)
            self._index.commit()
            logger.info("index rebuilt from segments: %d records", len(found))
            return len(found)

    # ------------------------------------------------------------------ verify

    def verify(self) -> VerifyReport:
        """See ``ContentStore.verify``: waits for a maintenance step in progress (its new segments are not done)."""
        with self._maint_lock:
            report = self._scan()
            with self._lock:
                lost = self._urls_in_regions([(p.segment, p.offset, p.length) for p in report.problems])
            report.problems = [
                dataclasses.replace(p, urls=tuple(lost.get((p.segment, p.offset), ()))) for p in report.problems
            ]
            report.problems += self._missing_segments(report.problems)
        return report

    def _missing_segments(self, found: list[Problem]) -> list[Problem]:
        """Segments the index points into that exist neither locally nor as archive objects (an object
        deleted behind the store's back): reported with the URLs lost, never a crash of a read."""
        with self._lock:
            missing = self._index.referenced_segments() - set(self._segments.names())
            lost = {seg: [e.url for e in self._index.segment_entries(seg)] for seg in missing}
        reported = {p.segment for p in found if p.kind == "missing"}
        return [
            Problem(seg, 0, 0, "missing", "segment not found locally nor in the archive", tuple(sorted(urls)))
            for seg, urls in sorted(lost.items())
            if seg not in reported
        ]

    def _urls_in_regions(self, regions: list[tuple[str, int, int]]) -> dict[tuple[str, int], list[str]]:
        """Live URLs whose body lies in one of ``regions`` (segment, offset, length) and cannot be read:
        the whole record is quarantined, or the URL's member of a group is."""
        out: dict[tuple[str, int], list[str]] = defaultdict(list)
        for seg, off, length in regions:
            for e in self._index.entries_in(seg, off, off + max(length, 1)):
                if self._quarantine.has(e.location):
                    out[(seg, off)].append(e.url)
        for urls in out.values():
            urls.sort()
        return out

    def _scan(self) -> VerifyReport:
        report = VerifyReport()
        with self._lock:
            names = self._segments.names()
            for name in names:
                report.segments += 1
                try:
                    data = self._segments.read_all(name)
                except SegmentMissing as exc:  # gone between the listing and the read
                    report.problems.append(Problem(name, 0, 0, "missing", str(exc)))
                    continue
                for item in scan_records(data):
                    if item.problem:
                        report.problems.append(Problem(name, item.offset, item.length, item.problem))
                        if item.problem == "corrupt" or name != self._segments.active_name:
                            self._quarantine.add(
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
                        loc = Location(name, item.offset, item.length, item.header.dict_id, name.split("/", 1)[0])
                        if (name, item.offset) in self._quarantine.records:
                            report.problems.append(
                                Problem(name, item.offset, item.length, "corrupt", "quarantined earlier")
                            )
                            continue
                        try:
                            self._reader.read(loc)
                            report.bodies_checked += 1
                        except ChecksumMismatch as exc:
                            report.problems.append(Problem(name, item.offset, item.length, "corrupt", str(exc)))
        return report

    def _verify_group(self, name: str, item: ScanItem, data: bytes, report: VerifyReport) -> None:
        """Check every member of a group (one decompression); damaged members are reported."""
        assert isinstance(item.header, GroupHeader)
        if (name, item.offset) in self._quarantine.records:
            report.records += len(item.header.members)
            report.problems.append(Problem(name, item.offset, item.length, "corrupt", "quarantined earlier"))
            return
        known_bad = self._quarantine.members(name, item.offset)
        records, damaged = self._reader.decode_item(name, item, data)
        report.records += len(item.header.members)
        report.bodies_checked += sum(1 for header, _ in records if header.kind == KIND_BODY)
        if damaged:
            bad = sorted(self._quarantine.members(name, item.offset))
            earlier = f" ({sorted(known_bad)} quarantined earlier)" if known_bad else ""
            detail = f"group members {bad} damaged{earlier}" if bad else "whole group unreadable (see quarantine.log)"
            report.problems.append(Problem(name, item.offset, item.length, "corrupt", detail))
