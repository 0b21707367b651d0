"""Store maintenance: what moves next (tiering by age, compaction of dead space), and the thread that runs it.

A maintenance *step* is bounded: it moves at most ``maintenance_budget_bytes`` of raw
content, so its memory is bounded too, and it holds the store lock only to pick its batch
and to swap the result in (``ContentStore.maintenance_step``, ADR 018). This module holds
the planning rules, which only read entries and sizes, and ``StoreMaintainer``, the
background thread the bucket compressor runs them on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

from crawlstream.store._model import TIERS, Entry, Location

if TYPE_CHECKING:
    from crawlstream.settings import Settings
    from crawlstream.store._reports import RecompressReport
    from crawlstream.store._shards import ShardedStore
    from crawlstream.store._store import ContentStore

__all__ = [
    "REF_RECORD_ESTIMATE",
    "GroupShape",
    "Move",
    "Relocation",
    "StoreMaintainer",
    "pick_batch",
    "sample_evenly",
    "segment_live_bytes",
    "tier_cutoffs",
]

logger = logging.getLogger(__name__)

TIER_RANK = {name: i for i, name in enumerate(TIERS)}
GROUP_TIERS = ("cold", "archive")  # tiers written as group records (several pages per zstd frame)
_DAY_MS = 86_400_000
# A single reference record whose length the index does not know (an index written before
# lengths were kept): header (86 B) + a compressed metadata line.
REF_RECORD_ESTIMATE = 160


@dataclass(frozen=True)
class Move:
    """One entry to rewrite, as it was when the batch was chosen (the swap checks it still is).

    ``keep_body``: only this URL's own reference record is rewritten; its body stays where
    ``body_at`` says (already in the target tier, or outside the segments being compacted).
    """

    entry: Entry
    location: Location
    seq: int
    keep_body: bool = False
    body_at: Location | None = None


@dataclass(frozen=True)
class Relocation:
    """Where a batch wrote a moved entry: its body is at ``location``; its own reference record,
    if it has one, in ``record_segment``, costing ``record_bytes`` (its length, or a group member's share)."""

    location: Location
    record_segment: str = ""
    record_bytes: int = 0


@dataclass(frozen=True)
class GroupShape:
    """Content bytes of each member of a group record and which members are bodies."""

    sizes: tuple[int, ...]
    bodies: frozenset[int]

    @property
    def body_bytes(self) -> int:
        return sum(self.sizes[i] for i in self.bodies)

    @property
    def total(self) -> int:
        return sum(self.sizes) or 1


def target_tier(entry: Entry, now_ms: int, after_s: Mapping[str, float], *, ages_zero: bool = False) -> str | None:
    """The deepest tier ``entry`` is old enough for, if deeper than where it is; else None."""
    age_ms = now_ms - entry.fetched_at_ms
    best: str | None = None
    for tier in ("warm", "cold", "archive"):
        if ages_zero or age_ms >= after_s[tier] * 1000:
            best = tier
    if best is None or TIER_RANK[best] <= TIER_RANK[entry.location.tier]:
        return None
    return best


def tier_cutoffs(now_ms: int, after_s: Mapping[str, float], *, ages_zero: bool = False) -> dict[str, int]:
    """Per tier above the deepest, the newest ``fetched_at_ms`` that ``target_tier`` may move deeper:
    old enough for the youngest deeper tier (every page with ``ages_zero``). Narrows an index query;
    ``target_tier`` still decides."""
    out: dict[str, int] = {}
    for tier in TIERS[:-1]:
        if ages_zero:
            out[tier] = 1 << 62
        else:
            youngest = min(after_s[deeper] for deeper in TIERS[TIER_RANK[tier] + 1 :])
            out[tier] = math.floor(now_ms - youngest * 1000)
    return out


def batch_order(entry: Entry) -> tuple[int, str, str]:
    """Oldest day first; inside a day by domain then URL, so a batch holds whole runs of a domain
    (its pages share the most, and groups are filled domain by domain: ADR 002)."""
    return (entry.fetched_at_ms // _DAY_MS, entry.domain, entry.url)


def pick_batch(candidates: Iterable[Move], budget_bytes: int) -> list[Move]:
    """The longest prefix of ``candidates`` whose bodies to read fit in ``budget_bytes`` (at least one).

    Bodies are counted once per content hash; ``keep_body`` moves read nothing.
    """
    out: list[Move] = []
    seen: set[bytes] = set()
    used = 0
    for move in candidates:
        size = 0
        if not move.keep_body and move.entry.content_hash not in seen:
            size = move.entry.raw_size
        if out and used + size > budget_bytes:
            break
        if size:
            seen.add(move.entry.content_hash)
        used += size
        out.append(move)
    return out


def sample_evenly(bodies: Iterable[Entry], total_bytes: int, cap_bytes: int) -> list[Entry]:
    """Entries spread evenly over ``bodies`` (one per distinct body, ``total_bytes`` of raw sizes in all)
    whose raw sizes add up to at most ``cap_bytes``: every stride-th, trimmed to the cap. Reads
    ``bodies`` once, holding only what it takes."""
    stride = max(1, -(-total_bytes // max(1, cap_bytes))) if total_bytes > cap_bytes else 1
    out: list[Entry] = []
    used = 0
    for i, e in enumerate(bodies):
        if i % stride == 0 and used + e.raw_size <= cap_bytes:
            out.append(e)
            used += e.raw_size
    return out


def segment_live_bytes(
    locations: Iterable[Location], reference_bytes: Mapping[str, int], shapes: Mapping[tuple[str, int], GroupShape]
) -> tuple[dict[str, float], list[Location]]:
    """Estimated live bytes per segment, and the group records whose shape is not known yet.

    ``locations``: the body location of every live entry, ordered by segment and offset (a record
    several URLs share comes once per URL: ``IndexQueries.record_locations``), folded one record
    at a time. A single record counts whole; a group record counts the share of its live body
    members' content (a group of unknown shape counts whole). ``reference_bytes``: per segment,
    the URLs' own reference records (``record_bytes``, ``REF_RECORD_ESTIMATE`` when unknown).
    """
    live: dict[str, float] = defaultdict(float, reference_bytes)
    unknown: list[Location] = []
    for (segment, _), run in groupby(locations, key=lambda loc: (loc.segment, loc.offset)):
        urls = list(run)  # the live URLs of one record: a group's members at most
        first = urls[0]
        if first.tier not in GROUP_TIERS:
            live[segment] += first.length
            continue
        shape = shapes.get((segment, first.offset))
        if shape is None:
            unknown.append(first)
            live[segment] += first.length
            continue
        members = {loc.member for loc in urls}
        body = sum(shape.sizes[i] for i in members if i < len(shape.sizes))
        live[segment] += first.length * body / shape.total
    return dict(live), unknown


class StoreMaintainer:
    """Runs ``store.maintenance_step`` every ``interval_s`` on a daemon thread.

    The thread never blocks puts beyond a step's swap (the store takes its lock only to
    choose a batch and to swap it in). ``stop`` cancels a step in progress at its next
    check (between group frames) and waits at most ``timeout_s``: a dictionary being trained
    cannot be interrupted, and a process shutting down does not wait for it (the cancelled
    step leaves nothing behind; see ``ContentStore.maintenance_step``).
    """

    def __init__(
        self,
        store: ContentStore | ShardedStore,
        *,
        interval_s: float,
        ages_zero: bool = False,
        on_step: Callable[[RecompressReport], None] | None = None,
    ) -> None:
        self.store = store
        self.interval_s = interval_s
        self.ages_zero = ages_zero
        self._on_step = on_step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.steps = 0
        self.errors = 0
        self.moved_urls = 0

    @classmethod
    def from_settings(cls, store: ContentStore | ShardedStore, settings: Settings) -> StoreMaintainer | None:
        """None when ``store.maintenance_interval_s`` is 0 (maintenance only by ``crawlstream store maintain``)."""
        interval = settings.store.maintenance_interval_s
        return cls(store, interval_s=interval) if interval > 0 else None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="store-maintenance", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.run_once()

    def run_once(self) -> RecompressReport | None:
        """One bounded step; errors are logged and counted (the next interval tries again)."""
        started = time.monotonic()
        try:
            report = self.store.maintenance_step(ages_zero=self.ages_zero, cancel=self._stop)
        except Exception:
            if self._stop.is_set():
                return None
            self.errors += 1
            logger.exception("store maintenance step failed; retrying in %.0f s", self.interval_s)
            return None
        self.steps += 1
        if report is not None:
            self.moved_urls += report.moved_urls
            logger.info(
                "store maintenance: %s into %s, %d urls, %.1f MB in %.1f s",
                report.kind,
                report.tier,
                report.moved_urls,
                report.raw_bytes / 1e6,
                time.monotonic() - started,
            )
            if self._on_step is not None:
                self._on_step(report)
        return report

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Cancel and wait up to ``timeout_s``; True if the thread ended."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_s)
        if thread.is_alive():
            logger.warning("store maintenance still busy after %.1f s (training a dictionary); not waiting", timeout_s)
            return False
        return True
