"""Maintenance batches: moving pages down the tiers by age, and compacting segments with dead space.

A batch is bounded (``maintenance_budget_bytes`` of raw bodies, and at most a quarter of the
memory budget ``maintenance_memory_bytes``) and holds the store lock only to choose and to
swap (``run_batch`` numbers the steps, ADR 018). The planning rules (what moves next, what
a segment holds live) are pure functions in ``_maintenance``; dictionary training is
``_training``, the retraining rules ``_retrain``, the writing of new segments ``_rewrite``.
This module owns the order of the steps, the swap, garbage collection and the space
accounting of group records.

A step does the first of: retrain one dictionary a rule replaces; move the oldest batch
due for a deeper tier; rewrite a batch of records still compressed with a superseded
dictionary (same tier, current dictionary); compact a batch of segments with dead space;
drop superseded dictionaries no record names any more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from itertools import chain

from crawlstream.durable import fsync_dir
from crawlstream.errors import BadDataError, ChecksumMismatch, StorageUnavailable
from crawlstream.store._codec import KIND_BODY, GroupHeader, decode_record_header
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import DictionaryStore
from crawlstream.store._files import AppendFile, ReadCache
from crawlstream.store._index import UrlIndex
from crawlstream.store._index_db import IndexQueries
from crawlstream.store._maintenance import (
    REF_RECORD_ESTIMATE,
    TIER_RANK,
    GroupShape,
    Move,
    Relocation,
    batch_order,
    pick_batch,
    segment_live_bytes,
    target_tier,
    tier_cutoffs,
)
from crawlstream.store._model import Entry, Location
from crawlstream.store._quarantine import Quarantine
from crawlstream.store._reports import RecompressReport
from crawlstream.store._retrain import Retrainer
from crawlstream.store._rewrite import Rewriter
from crawlstream.store._segments import ARCHIVE_TIER, Segments
from crawlstream.store._training import DictionaryTrainer

__all__ = ["Tiering", "batch_budget_bytes", "compressor_table_bytes"]

logger = logging.getLogger(__name__)

# Shares of the memory budget (ADR 021): a batch's bodies take at most a quarter; a compressor's
# match-finder tables a third (zstd holds them twice: the CDict and the copy a frame works in).
_BATCH_MEMORY_SHARE = 4
_COMPRESSOR_TABLE_SHARE = 3
_LEARN_SHAPES = 10_000  # group headers a compaction step reads at most to learn their member sizes


def batch_budget_bytes(config: StoreConfig) -> int:
    """Raw body bytes one batch may read: the batch budget, within the memory budget."""
    return max(1, min(config.maintenance_budget_bytes, config.maintenance_memory_bytes // _BATCH_MEMORY_SHARE))


def compressor_table_bytes(config: StoreConfig) -> int:
    """The cap on one maintenance compressor's hash + chain tables."""
    return max(1, config.maintenance_memory_bytes // _COMPRESSOR_TABLE_SHARE)


class Tiering:
    def __init__(
        self,
        config: StoreConfig,
        *,
        segments: Segments,
        dicts: DictionaryStore,
        index: UrlIndex,
        quarantine: Quarantine,
        trainer: DictionaryTrainer,
        lock: threading.RLock,
        maint_lock: threading.Lock,
        shapes: dict[tuple[str, int], GroupShape],
        unmovable: set[tuple[str, int, int]],
        rewriter: Rewriter,
        clock_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._segments = segments
        self._dicts = dicts
        self._index = index
        self._quarantine = quarantine
        self._trainer = trainer
        self._lock = lock
        self._maint_lock = maint_lock  # one step at a time; taken before the store lock, never after it
        self.group_shapes = shapes  # member sizes of group records, for space accounting
        self._unmovable = unmovable  # records a batch could not read: never picked again
        self._compact_failed: set[str] = set()  # segments a compaction could not empty
        self.rewriter = rewriter
        self._clock_ms = clock_ms
        self.retrainer = Retrainer(config, dicts=dicts, index=index, trainer=trainer, lock=lock)

    # ------------------------------------------------------------------ passes

    def maintain(
        self,
        now_ms: int | None,
        *,
        ages_zero: bool,
        compact: bool,
        progress: Callable[[RecompressReport], None] | None,
        cancel: threading.Event | None,
    ) -> RecompressReport:
        """See ``ContentStore.maintain``."""
        now = self._clock_ms() if now_ms is None else now_ms
        total = RecompressReport(kind="maintain")
        while cancel is None or not cancel.is_set():
            report = self.step(now, ages_zero=ages_zero, compact=compact, cancel=cancel)
            if report is None:
                break
            total.merge(report)
            if progress is not None:
                progress(report)
            progressed = (
                report.moved_urls
                or report.segments_removed
                or report.dictionaries_trained
                or report.dictionaries_dropped
            )
            if report.cancelled or not progressed:
                break  # nothing could be moved (changed meanwhile, or unreadable): the next step would repeat it
        while (cancel is None or not cancel.is_set()) and self.seal():
            pass
        return total

    def step(
        self, now_ms: int | None, *, ages_zero: bool, compact: bool, cancel: threading.Event | None
    ) -> RecompressReport | None:
        """See ``ContentStore.maintenance_step``."""
        now = self._clock_ms() if now_ms is None else now_ms
        after_s = self._config.tier_after_s

        def choose(entry: Entry) -> str | None:
            return target_tier(entry, now, after_s, ages_zero=ages_zero)

        report = self.retrain_step(cancel)
        if report is None:
            report = self.tier_step(choose, tier_cutoffs(now, after_s, ages_zero=ages_zero), None, cancel)
        if report is None:
            report = self.redict_step(cancel)
        if report is None and compact:
            report = self.compact_step(cancel)
        if report is None:
            report = self.drop_step()
        self.seal()
        return report

    def seal(self) -> int:
        """Fold a bounded share of the archive tier's index rows into sealed blocks (``_index_sealed``):
        the number folded, 0 when none is left."""
        with self._maint_lock, self._lock:  # not in the middle of a batch's swap
            return self._index.seal()

    def backlog(self, now_ms: int | None, *, ages_zero: bool) -> dict[str, int]:
        """Raw bytes due for a deeper tier, and live bytes of segments due for compaction (an estimate)."""
        now = self._clock_ms() if now_ms is None else now_ms
        superseded = set(self._dicts.superseded())
        with self._lock:
            snapshot = self._index.snapshot()
            sizes = self._segments.sizes()
            skip = self._compaction_exempt()
        with snapshot:
            tier_bytes = snapshot.due_body_bytes(tier_cutoffs(now, self._config.tier_after_s, ages_zero=ages_zero))
            due = self._compaction_candidates(self.usage(snapshot), sizes, skip)
            compact_bytes = sum(snapshot.segment_raw_bytes(seg) for seg in due)
            redict_bytes = snapshot.redict_body_bytes(superseded) if superseded else 0
        return {"tier_bytes": tier_bytes, "compact_bytes": compact_bytes, "redict_bytes": redict_bytes}

    def recompress(self, older_than_s: float, *, tier: str, now_ms: int | None) -> RecompressReport:
        """See ``ContentStore.recompress``."""
        if tier not in TIER_RANK or tier == "hot":
            raise ValueError(f"recompress target must be warm, cold or archive, got {tier!r}")
        now = self._clock_ms() if now_ms is None else now_ms
        cutoff = now - int(older_than_s * 1000)

        def choose(entry: Entry) -> str | None:
            moves = TIER_RANK[entry.location.tier] < TIER_RANK[tier] and entry.fetched_at_ms <= cutoff
            return tier if moves else None

        cutoffs = {t: cutoff for t in TIER_RANK if TIER_RANK[t] < TIER_RANK[tier]}
        total = RecompressReport(tier=tier)
        while True:
            report = self.tier_step(choose, cutoffs, tier, None)
            if report is None:
                break
            total.merge(report)
            if report.moved_urls == 0 and not report.segments_removed:
                break
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

    # ------------------------------------------------------------------ phase (a): choose

    def tier_step(
        self,
        choose: Callable[[Entry], str | None],
        cutoffs: Mapping[str, int],
        tier: str | None,
        cancel: threading.Event | None,
    ) -> RecompressReport | None:
        """Phase (a) of a tier batch: the oldest entries ``choose`` sends to the same tier.

        ``cutoffs`` narrows the index query (per tier, the newest fetch time that may move at all);
        ``choose`` decides. Chosen on a snapshot of the index, without the store lock (the swap
        re-checks every entry); only the batch's entries are read from it.
        """
        with self._maint_lock:
            with self._lock:
                snapshot = self._index.snapshot()
            with snapshot:
                chosen = self._tier_moves(snapshot, choose, cutoffs, tier)
                if chosen is None:
                    return None
                target, moves = chosen
                batch = pick_batch(moves, batch_budget_bytes(self._config))
            return self.run_batch(batch, target, "tier", cancel)

    def _tier_moves(
        self,
        snapshot: IndexQueries,
        choose: Callable[[Entry], str | None],
        cutoffs: Mapping[str, int],
        tier: str | None,
    ) -> tuple[str, Iterator[Move]] | None:
        """(the batch's tier, its candidate moves in batch order, read as they are taken); None: none due."""
        candidates = (
            (e, goes)
            for e in snapshot.tier_candidates(cutoffs)
            if (e.location.segment, e.location.offset, e.location.member) not in self._unmovable
            and (goes := choose(e)) is not None  # (binds in this function's scope: not ``target``)
        )
        first = next(candidates, None)
        if first is None:
            return None
        target = tier or first[1]

        def moves() -> Iterator[Move]:
            for e, goes in chain([first], candidates):
                if goes != target:
                    continue
                body_at = snapshot.body_location(e.content_hash)
                # Another URL's copy of this body is already in a tier at least as deep: only this
                # URL's reference record moves (bounded batches must not store a body twice).
                keep = (
                    body_at is not None
                    and body_at != e.location
                    and body_at.tier != "hot"
                    and TIER_RANK[body_at.tier] >= TIER_RANK[target]
                    and body_at.segment not in self._segments.in_flight
                )
                yield Move(e, e.location, e.seq, keep, body_at if keep else None)

        return target, moves()

    # ------------------------------------------------------------------ retraining (ADR 021 "Retraining")

    def retrain_step(self, cancel: threading.Event | None) -> RecompressReport | None:
        """Train the next generation of the first dictionary a retraining rule replaces (one per step).

        Bounded like a tier batch's training (samples within the memory budget); None when no
        rule fires or training produced nothing (that dictionary is then not retried until
        restart, so the other kinds of step go on).
        """
        if not self.retrainer.enabled or not self._dicts.current():
            return None
        with self._maint_lock:
            codecs = self._dicts.private_codecs(table_bytes=compressor_table_bytes(self._config))
            reads = ReadCache()
            try:
                due = self.retrainer.due(codecs, reads, cancel)
                if due is None:
                    return None
                logger.info(
                    "retraining dictionary %d of %s (generation %d): %s (%s)",
                    due.info.dict_id,
                    due.info.domain,
                    due.info.generation,
                    due.reason,
                    due.detail,
                )
                trained = self._trainer.retrain(due.info.domain, codecs, reads, cancel)
            finally:
                reads.close()
                codecs.clear()
        if cancel is not None and cancel.is_set():
            return RecompressReport(kind="retrain", cancelled=True)
        if not trained:
            self.retrainer.failed(due.info.dict_id)
            logger.warning(
                "retraining dictionary %d of %s produced none; keeping it", due.info.dict_id, due.info.domain
            )
            return None
        return RecompressReport(kind="retrain", dictionaries_trained=1, retrained=[f"{due.info.domain}:{due.reason}"])

    def _redict_candidate(self, loc: Location, superseded: set[int]) -> bool:
        """A record compressed with a superseded dictionary that a redict batch rewrites (hot records
        are left to tiering, which rewrites them with the current dictionary anyway)."""
        return (
            loc.dict_id in superseded
            and loc.tier != "hot"
            and (loc.segment, loc.offset, loc.member) not in self._unmovable
        )

    def redict_step(self, cancel: threading.Event | None) -> RecompressReport | None:
        """One bounded batch of records still compressed with a superseded dictionary, rewritten
        into their own tier with their domain's current one (the same crash-safe batch as tiering)."""
        superseded = set(self._dicts.superseded())
        if not superseded:
            return None
        with self._maint_lock:
            with self._lock:
                snapshot = self._index.snapshot()
            with snapshot:
                candidates = (
                    e for e in snapshot.redict_candidates(superseded) if self._redict_candidate(e.location, superseded)
                )
                first = next(candidates, None)
                if first is None:
                    return None
                tier = first.location.tier

                def moves() -> Iterator[Move]:
                    for e in chain([first], candidates):
                        if e.location.tier != tier:
                            continue
                        body_at = snapshot.body_location(e.content_hash)
                        # Another URL's copy of this body was already rewritten: only this URL's record moves.
                        keep = (
                            body_at is not None
                            and body_at != e.location
                            and body_at.dict_id not in superseded
                            and body_at.tier != "hot"
                            and TIER_RANK[body_at.tier] >= TIER_RANK[tier]
                            and body_at.segment not in self._segments.in_flight
                        )
                        yield Move(e, e.location, e.seq, keep, body_at if keep else None)

                batch = pick_batch(moves(), batch_budget_bytes(self._config))
            return self.run_batch(batch, tier, "redict", cancel)

    def drop_step(self) -> RecompressReport | None:
        """Delete superseded dictionaries that no live entry and no record of any segment names."""
        superseded = set(self._dicts.superseded())
        if not superseded:
            return None
        with self._maint_lock:
            with self._lock:
                superseded = {d for d in superseded if not self._index.dict_in_use(d)}
            if not superseded:
                return None
            with self._lock:
                paths = [(self._segments.name(p), p) for p in self._segments.local_files()]
                remote = dict(self._segments.remote)
            gone = self.retrainer.unreferenced(superseded, lambda: paths, remote, self._segments.read_all)
            if not gone:
                return None
            with self._lock:  # puts never use a superseded dictionary; batches are held off by the maintenance lock
                gone = {d for d in gone if not self._index.dict_in_use(d)}
                for dict_id in sorted(gone):
                    self._dicts.drop(dict_id)
        if not gone:
            return None
        return RecompressReport(kind="drop", dictionaries_dropped=len(gone))

    def _compaction_exempt(self) -> set[str]:
        """Segments compaction must not touch: the active one, ones being written, quarantined ones."""
        exempt = self._quarantine.segments() | self._segments.in_flight | self._compact_failed
        if self._segments.has_active():
            exempt.add(self._segments.active_name)
        return exempt

    def usage(self, index: IndexQueries, *, learn: int = 0) -> dict[str, float]:
        """Estimated live bytes per segment (``learn``: first read the shapes of at most that many group
        records not known yet, and pass over the index once more)."""
        usage, unknown = segment_live_bytes(
            index.record_locations(), index.reference_bytes(REF_RECORD_ESTIMATE), self.group_shapes
        )
        if learn and unknown:
            self.learn_group_shapes(unknown, limit=learn)
            usage, _ = segment_live_bytes(
                index.record_locations(), index.reference_bytes(REF_RECORD_ESTIMATE), self.group_shapes
            )
        return usage

    def _compaction_candidates(self, usage: dict[str, float], sizes: dict[str, int], exempt: set[str]) -> list[str]:
        """Segments whose estimated dead share is at least ``compact_dead_ratio``, oldest first."""
        due = []
        for seg, size in sizes.items():
            if seg in exempt or size <= 0:
                continue
            dead = size - min(size, usage.get(seg, 0.0))
            if dead / size >= self._config.compact_dead_ratio:
                due.append(seg)
        return sorted(due, key=lambda s: s.rsplit("/", 1)[-1])

    def compact_step(self, cancel: threading.Event | None) -> RecompressReport | None:
        """Phase (a) of a compaction batch: the oldest segments (one tier) with too much dead space.

        Their live records are rewritten into the same tier; the old segments are then garbage.
        Planned on a snapshot of the index (the swap re-checks every entry): the live bytes of every
        segment (an aggregate, folded record by record), then the entries of the chosen segments.
        """
        with self._maint_lock:
            with self._lock:
                snapshot = self._index.snapshot()
                sizes = self._segments.sizes()
                exempt = self._compaction_exempt()
            with snapshot:
                due = self._compaction_candidates(self.usage(snapshot, learn=_LEARN_SHAPES), sizes, exempt)
                if not due:
                    return None
                tier = due[0].split("/", 1)[0]
                budget = batch_budget_bytes(self._config)
                chosen: list[tuple[str, list[Entry]]] = []
                used = 0
                for seg in due:
                    if seg.split("/", 1)[0] != tier:
                        continue
                    entries = snapshot.segment_entries(seg)
                    raw = sum(e.raw_size for e in {e.content_hash: e for e in entries}.values())
                    if chosen and used + raw > budget:
                        break
                    chosen.append((seg, entries))
                    used += raw
            picked = {seg for seg, _ in chosen}
            moves: list[Move] = []
            seen: set[str] = set()
            for _, entries in chosen:
                for e in entries:
                    if e.url in seen:
                        continue
                    seen.add(e.url)
                    if e.location.segment in picked:
                        moves.append(Move(e, e.location, e.seq))
                    else:  # only its reference record is here; the body stays where it is
                        moves.append(Move(e, e.location, e.seq, True, e.location))
            moves.sort(key=lambda m: batch_order(m.entry))
            report = self.run_batch(moves, tier, "compact", cancel)
            if not report.cancelled:
                gone = set(report.segments_removed)
                self._compact_failed.update(seg for seg in picked if seg not in gone)
            return report

    def learn_group_shapes(self, groups: list[Location], limit: int = 10_000) -> None:
        """Read the member tables of group records (header bytes only) for space accounting."""
        reads = ReadCache()
        try:
            for loc in groups[:limit]:
                try:
                    head = self._segments.pread(loc.segment, loc.offset, 8, reads)
                    size = int.from_bytes(head[4:8], "little")
                    buf = self._segments.pread(loc.segment, loc.offset, min(loc.length, 8 + size), reads)
                    # The frame is not needed to decode the table: zeros stand in for it.
                    header = decode_record_header(buf + bytes(loc.length - len(buf)))
                except (BadDataError, ChecksumMismatch, OSError, StorageUnavailable) as exc:
                    logger.debug("group record at %s:%d not examined: %s", loc.segment, loc.offset, exc)
                    continue
                if isinstance(header, GroupHeader):
                    self.group_shapes[(loc.segment, loc.offset)] = GroupShape(
                        tuple(m.end - m.start for m in header.members),
                        frozenset(i for i, m in enumerate(header.members) if m.kind == KIND_BODY),
                    )
        finally:
            reads.close()

    # ------------------------------------------------------------------ phases (b) and (c)

    def run_batch(self, moves: list[Move], tier: str, kind: str, cancel: threading.Event | None) -> RecompressReport:
        """Rewrite ``moves`` into ``tier``: a bounded batch that holds the store lock only to swap.

        The steps are ordered for crash safety; do not reorder them:

        (a) (the caller, under the store lock) choose the batch and remember each entry's
            location and seq;
        (b) without the store lock (puts go on; they only append to the active hot segment):
            1. train and fsync any new dictionaries (before a frame can name them; a put of
               that domain may use one as soon as it is added: its file is durable first);
            2. read the bodies, compress them with this thread's own zstd contexts, write the
               new segment(s) (allocated under the lock, invisible to garbage collection while
               in flight) and fsync them and their directory;
        (c) under the store lock, for every entry still at the location and seq of (a) (not
            deleted or replaced meanwhile):
            3. point its index row at the new location, record each new segment's end, and
               commit (fsynced unless ``fsync`` is "never"): the new locations are on disk
               before any old copy goes;
            4. delete segments nothing live points into.
        A kill during (b) leaves complete records nothing indexes: start-up re-indexes them as
        relocations (same seq, so a later put or a tombstone still wins) — nothing is lost and
        nothing is half-moved. A cancelled batch (``cancel`` set) deletes its new segments.
        Records of entries that changed meanwhile stay unindexed in the new segments (their
        recorded end keeps start-up from re-indexing them) and are reclaimed by compaction.
        """
        report = RecompressReport(kind=kind, tier=tier)
        if not moves:
            return report
        codecs = self._dicts.private_codecs(table_bytes=compressor_table_bytes(self._config))
        reads = ReadCache()
        writers: list[AppendFile] = []
        pending: list[tuple[Move, Relocation]] = []
        try:
            if kind == "tier":
                report.dictionaries_trained = self._trainer.train_for(moves, codecs, reads, cancel)  # 1.
            if cancel is None or not cancel.is_set():
                pending = self.rewriter.rewrite(moves, tier, codecs, reads, writers, report, cancel)  # 2.
        except BaseException:
            self._discard(writers)  # nothing indexes them yet: the batch leaves nothing behind
            raise
        finally:
            reads.close()
            codecs.clear()
            for w in writers:
                w.close()
        names = [self._segments.name(w.path) for w in writers]
        if cancel is not None and cancel.is_set():
            report.cancelled = True
            self._discard(writers)
            return report
        if writers and self._config.fsyncs:
            for seg_dir in {w.path.parent for w in writers}:
                fsync_dir(seg_dir)
        report.segments_written = names
        uploaded = self._upload(names, writers)
        self._swap(pending, writers, report, uploaded)
        return report

    def _upload(self, names: list[str], writers: list[AppendFile]) -> list[str]:
        """Step 2b: copy the batch's new archive segments to object storage (complete and synced)
        before the swap points pages at them. A failure (storage down) discards the batch: nothing
        points at them yet, so nothing is lost, and a later step does the batch again. An object
        uploaded before the failure is overwritten by the next batch of that number, or read as a
        segment at start-up (its records re-indexed as relocations) and collected like any other."""
        if self._segments.archive is None:
            return []
        wanted = [n for n in names if n.split("/", 1)[0] == ARCHIVE_TIER]
        try:
            for name in wanted:
                self._segments.upload(name)
        except BaseException:
            self._discard(writers)
            raise
        return wanted

    def _discard(self, writers: list[AppendFile]) -> None:
        with self._lock:
            self._segments.discard(writers)

    def _swap(
        self,
        pending: list[tuple[Move, Relocation]],
        writers: list[AppendFile],
        report: RecompressReport,
        uploaded: list[str],
    ) -> None:
        """Phase (c), steps 3-4 of ``run_batch`` (under the lock; do not reorder)."""
        names = [self._segments.name(w.path) for w in writers]
        with self._lock:
            applied: list[tuple[Entry, Relocation]] = []
            for move, moved in pending:
                cur = self._index.lookup(move.entry.url_key, move.entry.url)
                if cur is None or cur.seq != move.seq or cur.location != move.location:
                    report.skipped_changed += 1  # deleted or replaced meanwhile: its new record is dead
                    continue
                applied.append((cur, moved))
            # 3. the index rows, the new segments' ends, committed
            for cur, moved in applied:
                self._index.relocate(cur, moved.location, moved.record_segment, moved.record_bytes)
                report.moved_urls += 1
            for w, name in zip(writers, names, strict=True):
                self._index.indexed(name, w.size)
            self._index.commit()
            # 4. garbage
            self._segments.in_flight.difference_update(names)
            for name in uploaded:  # pages point at them now: reads go to the objects
                self._segments.offload(name)
            before = self._segments.sizes()
            report.segments_removed = self.collect_garbage()
            report.freed_bytes = sum(before.get(n, 0) for n in report.segments_removed)

    def collect_garbage(self) -> list[str]:
        """Delete segment files no live entry points into (never in-flight or quarantined ones). Under the lock.

        Their indexed ends are forgotten and committed at once: a new segment may take the name of
        the last one (numbers continue from the highest), and must not inherit its end."""
        quarantined_segments = self._quarantine.segments()
        removed: list[str] = []
        for name in self._segments.names():
            if name in quarantined_segments or name in self._segments.in_flight or self._index.segment_in_use(name):
                continue
            try:
                self._segments.remove(name)
            except StorageUnavailable as exc:  # an archive object: removed by a later collection
                logger.warning("garbage segment %s not removed now: %s", name, exc)
                continue
            self._index.forget_segment(name)
            self._compact_failed.discard(name)
            for key in [k for k in list(self.group_shapes) if k[0] == name]:  # list(): atomic copy
                del self.group_shapes[key]
            removed.append(name)
        if removed:
            self._index.commit()
            logger.info("removed %d garbage segments: %s", len(removed), ", ".join(removed))
        return removed
