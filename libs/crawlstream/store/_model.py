"""Plain data types of the content store (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TIERS", "Entry", "Location", "Problem"]

TIERS = ("hot", "warm", "cold", "archive")


@dataclass(frozen=True)
class Location:
    """Where one stored body lives; carried by the ContentStored event.

    ``segment`` is relative to ``<root>/segments`` (``"hot/0000000001.seg"``); ``offset`` and
    ``length`` cover the whole record (header + zstd frame); ``dict_id`` 0 means no dictionary;
    ``member`` is the page's index inside a group record (cold/archive tiers), 0 otherwise.
    """

    segment: str
    offset: int
    length: int
    dict_id: int
    tier: str
    member: int = 0

    def to_list(self) -> list[Any]:
        out: list[Any] = [self.segment, self.offset, self.length, self.dict_id, self.tier]
        return [*out, self.member] if self.member else out

    @classmethod
    def from_list(cls, data: list[Any]) -> Location:
        member = int(data[5]) if len(data) > 5 else 0
        return cls(str(data[0]), int(data[1]), int(data[2]), int(data[3]), str(data[4]), member)


@dataclass
class Entry:
    """One live URL in the index: everything a search returns without reading content."""

    url: str
    url_key: int
    location: Location
    content_hash: bytes
    raw_size: int
    seq: int
    fetched_at_ms: int
    domain: str
    path: str
    content_type: str | None = None
    title: str | None = None
    status: int | None = None
    tags: set[str] = field(default_factory=set)
    record_segment: str = ""  # segment of this URL's own reference record (dedupe), if any
    record_bytes: int = 0  # that reference record's length when known (0: unknown; space accounting only)


@dataclass(frozen=True)
class Problem:
    """A damaged or torn region found by a scan or a read."""

    segment: str
    offset: int
    length: int
    kind: str  # "corrupt" | "torn" | "missing" (an archive segment object gone)
    detail: str = ""
    urls: tuple[str, ...] = ()  # live URLs whose body was in the region (lost until re-fetched)
