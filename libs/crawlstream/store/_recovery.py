"""Integrity: the format check and crash recovery at start-up, ``verify`` and ``rebuild-index``.

Start-up re-indexes complete records a crash left past each segment's indexed end and
truncates torn tails (ADR 002's order makes that enough: a record is written before its
index entry). ``verify`` scans every record and names the live URLs whose body it lost;
``rebuild_index`` rewrites the index from the records' metadata lines, keeping tombstones
and tags (ops.log) on top by sequence number.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from crawlstream.durable import write_atomically
from crawlstream.errors import ChecksumMismatch
from crawlstream.store._codec import (
    KIND_BODY,
    VERSION,
    GroupHeader,
    RecordHeader,
    ScanItem,
    UnsupportedFormat,
    scan_records,
)
from crawlstream.store._index import UrlIndex
from crawlstream.store._index_log import IndexLog, put_record
from crawlstream.store._logs import read_log
from crawlstream.store._maintenance import TIER_RANK
from crawlstream.store._model import Location, Problem
from crawlstream.store._quarantine import Quarantine
from crawlstream.store._reader import RecordReader
from crawlstream.store._reports import VerifyReport
from crawlstream.store._segments import SegmentMissing, Segments

__all__ = ["Integrity", "check_format"]

logger = logging.getLogger(__name__)


def check_format(root: Path) -> None:
    """Refuse a root written by another layout version (no migration: a clear error instead)."""
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
        if found != VERSION:
            raise UnsupportedFormat(
                f"store {root} is in format {found!r}, this build reads format {VERSION}; "
                "open it with the build that wrote it, or re-ingest into a new store directory"
            )
        return
    if (root / "index.log").exists() or any((root / "segments").glob("*/*.seg")):
        raise UnsupportedFormat(
            f"store {root} has no FORMAT marker: it was written by format 1 (before the marker); "
            f"this build reads format {VERSION}. Re-ingest the pages into a new store directory"
        )
    root.mkdir(parents=True, exist_ok=True)
    write_atomically(marker, json.dumps({"store_format": VERSION}).encode())


class Integrity:
    def __init__(
        self,
        *,
        segments: Segments,
        reader: RecordReader,
        quarantine: Quarantine,
        index: UrlIndex,
        index_log: IndexLog,
        lock: threading.RLock,
        maint_lock: threading.Lock,
    ) -> None:
        self._segments = segments
        self._reader = reader
        self._quarantine = quarantine
        self._index = index
        self._index_log = index_log
        self._lock = lock
        self._maint_lock = maint_lock

    # ------------------------------------------------------------------ start-up

    def recover_segment_tails(self, puts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Index complete records past the last indexed one; truncate torn tails. Returns the put records added."""
        known_end = dict(self._index_log.indexed_end)
        blobs: dict[str, Location] = {}
        for rec in puts:
            blobs[rec["h"]] = Location.from_list(rec["l"])
        recovered: list[dict[str, Any]] = []
        sizes = self._segments.sizes()
        for name in self._segments.names():
            size = sizes[name]
            start = known_end.get(name, 0)
            if size <= start:
                continue
            data = self._segments.read_all(name)  # an archive object only after a crash before its swap
            refs: list[tuple[RecordHeader, Location]] = []
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
                if item.problem == "corrupt":
                    self._quarantine.add(
                        name,
                        item.offset,
                        item.length,
                        "corrupt region found at start-up",
                        data[item.offset : item.offset + item.length],
                    )
                    continue
                for header, rec_loc in self._reader.decode_item(name, item, data)[0]:
                    if header.kind == KIND_BODY:
                        blobs[header.content_hash.hex()] = rec_loc
                        recovered.append(put_record(header, rec_loc, None))
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
                recovered.append(put_record(header, body_loc, rec_loc))
        for rec in recovered:
            self._index_log.append(rec)
        if recovered:
            self._index_log.sync()
            logger.warning("re-indexed %d records that a crash left unindexed", len(recovered))
        return recovered

    def rebuild_index(self) -> int:
        """Rewrite the index (snapshot + fresh index.log) from the segments; returns the entries found."""
        with self._maint_lock, self._lock:
            bodies: dict[str, Location] = {}
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
                            prev = bodies.get(header.content_hash.hex())
                            if prev is None or TIER_RANK[loc.tier] >= TIER_RANK[prev.tier]:
                                bodies[header.content_hash.hex()] = loc
            out: list[dict[str, Any]] = []
            for header, loc in records:
                if header.kind == KIND_BODY:
                    out.append(put_record(header, loc, None))
                else:
                    body = bodies.get(header.content_hash.hex())
                    if body is not None:
                        out.append(put_record(header, body, loc))
            ops = read_log(self._index.ops_path)
            self._index.clear()
            self._index.build(out, ops)
            self._index_log.indexed_end = ends
            self._index_log.snapshot(self._index)
            logger.info("index rebuilt from segments: %d records", len(out))
            return len(out)

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
            known = set(self._segments.names())
            lost: dict[str, list[str]] = defaultdict(list)
            for e in self._index.entries():
                for seg in {e.location.segment, e.record_segment} - {""}:
                    if seg not in known:
                        lost[seg].append(e.url)
        reported = {p.segment for p in found if p.kind == "missing"}
        return [
            Problem(seg, 0, 0, "missing", "segment not found locally nor in the archive", tuple(sorted(urls)))
            for seg, urls in sorted(lost.items())
            if seg not in reported
        ]

    def _urls_in_regions(self, regions: list[tuple[str, int, int]]) -> dict[tuple[str, int], list[str]]:
        """Live URLs whose body lies in one of ``regions`` (segment, offset, length) and cannot be read:
        the whole record is quarantined, or the URL's member of a group is."""
        by_seg: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for seg, off, length in regions:
            by_seg[seg].append((off, length))
        out: dict[tuple[str, int], list[str]] = defaultdict(list)
        for e in self._index.entries():
            loc = e.location
            for off, length in by_seg.get(loc.segment, ()):
                if off <= loc.offset < off + max(length, 1) and self._quarantine.has(loc):
                    out[(loc.segment, off)].append(e.url)
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
