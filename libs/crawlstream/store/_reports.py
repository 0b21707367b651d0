"""What the store's operations report: verify, maintenance batches, stats (plain data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crawlstream.store._model import Problem

__all__ = ["RecompressReport", "StoreStats", "VerifyReport"]


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
    # "tier" (moved down by age), "compact" (dead space reclaimed), "retrain" (a dictionary replaced),
    # "redict" (records moved off a replaced dictionary), "drop" (replaced dictionaries deleted), "maintain" (merged)
    kind: str = "tier"
    tier: str = ""  # the tier written
    raw_bytes: int = 0  # raw content bytes read and rewritten
    skipped_changed: int = 0  # entries deleted or replaced while their batch was rewritten: left as they were
    cancelled: bool = False  # stopped before the swap: nothing of the batch was kept
    freed_bytes: int = 0  # bytes of the segment files removed
    dictionaries_dropped: int = 0  # superseded dictionaries deleted (no record names them any more)
    retrained: list[str] = field(default_factory=list)  # "domain:reason" per dictionary retrained ("*": global)

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
        self.dictionaries_dropped += other.dictionaries_dropped
        self.retrained += other.retrained
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
    # one row per stored dictionary: id, domain ("*": global), generation, current, records (live
    # URLs whose body it compresses), size_bytes, samples, pool (records trained for), age_s
    dictionary_versions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def stored_bytes(self) -> int:
        """Every byte the store keeps on disk."""
        return self.segment_bytes + self.dict_bytes + self.index_bytes + self.other_bytes

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 0.0
