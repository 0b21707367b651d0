"""Index compactor wiring: every ``index.build_interval_s``, bring the index up to the lake.

No topic: the lake directory is the input. One iteration (``run_once``):

1. if some lake partition holds ``index.compact_min_files`` live files or more (postings of
   its domains are fragmented across that many files), ``IndexBuilder.compact()`` merges
   those partitions, then builds (counted from a directory listing, no file is opened);
   merging first means a kill during a build cannot put the compaction off (session 23);
2. otherwise ``IndexBuilder.build()``: incremental, scans only lake files the current
   version does not know; writes nothing when there are none;
3. after a new version flipped, ``IndexBuilder.gc()`` drops versions beyond
   ``index.keep_versions`` (never one a reader pins) and lake files compaction retired.

High availability (ADR 028): run two or more; one is *active* and builds, the others stand by.
The active one holds ``index/.compactor.lock`` (an exclusive ``flock``, which the kernel drops
when the process dies or closes it on a stop); a standby tries it every
``index.standby_poll_s`` and takes over within that bound. Only the lock holder builds, so two
compactors never publish at once; the builder's own lock (``index/.build.lock``) also keeps a
manual ``crawlstream index build`` from racing the active one.

On S3 (``index.uri``) there is no flock: the active compactor holds a *lease* object,
``index/.compactor.lease`` (holder id and expiry), taken with a conditional create (or a
compare-and-swap on an expired one) and renewed by compare-and-swap every tick and standby poll;
it lasts ``index.lease_ttl_s``. A standby takes over an expired lease. A paused holder whose lease
expired cannot publish a stale version: its build's flip is a compare-and-swap on the manifest,
which fails once the new holder flipped (ADR 029).

Disk floor (ADR 033): while the local disk of the index has less free space than
``data_dir_min_free_mb``, a tick builds nothing (a build writes a whole version, and its spill,
before it can flip): it is logged once, counted (``crawlstream_index_builds_skipped_disk_floor``)
and tried again at the next tick. ``crawlstream index build`` refuses instead (``check_disk_floor``).

A storage error is logged and retried at the next tick; anything else propagates. Standalone,
``settings.heartbeat_file`` is touched before and after each tick, each standby poll, and as a
build moves on (each lake prefix scanned, partition compacted, file written: the builder's
``progress``), so its age is at most one interval or one step of a build, never a whole build (a
compaction of thousands of small files on a busy machine outlasted the liveness probe's 300 s in
the soak, and was killed over and over before it could finish).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry

from crawlstream.durable import DiskFloor, try_lock_exclusive
from crawlstream.errors import TransientError
from crawlstream.index import BuildResult, IndexBuilder, read_manifest
from crawlstream.index._builder import builder_id
from crawlstream.lake import list_lake_files
from crawlstream.metrics import IndexMetrics, per_registry
from crawlstream.objectstore import ObjectStore
from crawlstream.runtime import Heartbeat, Host, install_stop_signals
from crawlstream.settings import Settings

logger = logging.getLogger(__name__)


class _TickStopped(Exception):
    """Raised at a tick's step once ``stop`` was called: the tick ends after the step in hand."""


ACTIVE_LOCK = ".compactor.lock"  # under index/: held by the active compactor (local disk)
LEASE_REL = "index/.compactor.lease"  # on S3: the active compactor's lease object


def index_disk_floor(settings: Settings, builder: IndexBuilder) -> DiskFloor | None:
    """The free-space floor of the index's disk (None: disabled, or the index is on S3)."""
    if not builder.index_store.is_local:
        return None
    return DiskFloor.mib(builder.index_store.local_path(""), settings.data_dir_min_free_mb)


def check_disk_floor(settings: Settings, builder: IndexBuilder, what: str) -> None:
    """Raise ``DiskBelowFloor`` (exit 1, a clear message) before a manual build writes anything."""
    floor = index_disk_floor(settings, builder)
    if floor is not None:
        floor.check(what)


@dataclass(frozen=True)
class TickResult:
    build: BuildResult  # the tick's build: the compaction's when it compacted
    compaction: BuildResult | None
    gc_removed_versions: int


def max_live_files_per_partition(builder: IndexBuilder) -> int:
    """The most live (not retired by a compaction) lake files any (dataset, prefix) holds."""
    manifest = read_manifest(builder.index_store)
    retired = set(manifest.current().stats.get("retired", [])) if manifest else set()
    counts = Counter((lf.dataset_id, lf.hh) for lf in list_lake_files(builder.lake_store) if lf.path not in retired)
    return max(counts.values(), default=0)


class Lease:
    """The S3 stand-in for the active lock: ``index/.compactor.lease`` = {holder, expires_at}.

    ``acquire`` creates it if absent, or swaps it (compare-and-swap on its ETag) if this holder
    has it or it expired; each call renews it for ``ttl_s``. False: another live holder has it, or
    a competitor's swap won the race."""

    def __init__(self, store: ObjectStore, ttl_s: float, *, holder: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.ttl_s, self.clock = store, ttl_s, clock
        self.holder = holder or f"{builder_id()}:{uuid.uuid4().hex[:8]}"

    def acquire(self) -> bool:
        now = self.clock()
        body = json.dumps({"holder": self.holder, "expires_at": now + self.ttl_s}).encode()
        found = self.store.read_tagged(LEASE_REL)
        if found is None:
            return self.store.create(LEASE_REL, body)
        data, tag = found
        try:
            doc = json.loads(data)
            holder, expires = str(doc["holder"]), float(doc["expires_at"])
        except (ValueError, KeyError, TypeError):
            holder, expires = "", 0.0  # unreadable: treated as expired
        if holder != self.holder and expires > now:
            return False
        return self.store.replace_if(LEASE_REL, body, tag)

    def release(self) -> None:
        """Expire it now if this holder still has it (a standby takes over at its next poll)."""
        found = self.store.read_tagged(LEASE_REL)
        if found is not None and json.loads(found[0]).get("holder") == self.holder:
            self.store.replace_if(LEASE_REL, json.dumps({"holder": "", "expires_at": 0}).encode(), found[1])


class IndexCompactor:
    """Runs ``run_once`` every ``interval_s`` until ``stop()``; see the module docstring."""

    def __init__(
        self,
        builder: IndexBuilder,
        *,
        interval_s: float,
        compact_min_files: int,
        stop_event: threading.Event | None = None,
        heartbeat: Callable[[], None] | None = None,
        metrics: IndexMetrics | None = None,
        standby_poll_s: float = 1.0,
        lease_ttl_s: float = 30.0,
        disk_floor: DiskFloor | None = None,
    ) -> None:
        self._builder = builder
        self._disk_floor = disk_floor
        self._skipping = False  # the last tick was skipped below the disk floor
        # S3: a lease object instead of the flock (None locally)
        self._s3_lease = None if builder.index_store.is_local else Lease(builder.index_store, lease_ttl_s)
        self._leased = False
        self._metrics = metrics
        self._heartbeat = heartbeat or (lambda: None)
        builder.progress = self._progress  # a long build beats as it goes (a lake prefix at a time)
        self._interval_s = interval_s
        self._compact_min_files = compact_min_files
        self._stop = stop_event or threading.Event()
        self._standby_poll_s = standby_poll_s
        self._lease: int | None = None  # the fd holding the active lock, while active
        self.ticks = 0
        self.versions_flipped = 0
        self.skipped_below_floor = 0

    def _progress(self) -> None:
        """A step of a tick is done (a partition compacted, a prefix scanned, a file written):
        beat, and end the tick here if a stop came. Each step is published whole or not at all,
        so this is where a kill would leave it, minus the kill: SIGTERM mid-compaction of a few
        hundred partitions used to wait for the last one (session 25's soak: SIGKILLed at 30 s)."""
        self._heartbeat()
        if self._stop.is_set():
            raise _TickStopped

    def run_once(self) -> TickResult:
        # 1. a fragmented lake is merged first, and the compaction's own build brings the index
        #    up to the lake: merged after the build, a kill during each build (minutes over
        #    thousands of small files) kept the lake fragmented for as long as the kills came
        #    (session 23's soak: 49 minutes). Otherwise 2. an incremental build.
        compaction = None
        if max_live_files_per_partition(self._builder) >= self._compact_min_files:
            compaction = self._builder.compact(min_files=self._compact_min_files)
            self._observe("compaction", compaction)
            logger.info("index-compactor: compacted %d lake partitions", compaction.compacted_partitions)
            build = compaction
        else:
            build = self._builder.build()
            self._observe("full" if build.full else "incremental", build)
        # 3. gc after a flip
        flipped = build.version is not None
        removed = len(self._builder.gc().removed_versions) if flipped else 0
        if self._metrics is not None and removed:
            self._metrics.gc_removed_versions.inc(removed)
        self.versions_flipped += int(flipped)
        self.ticks += 1
        return TickResult(build, compaction, removed)

    def _observe(self, kind: str, result: BuildResult) -> None:
        if self._metrics is not None:
            self._metrics.observe_build(
                kind, result.seconds, result.version, domains=result.domains, pairs=result.pairs, now_s=time.time()
            )

    @property
    def active(self) -> bool:
        return self._lease is not None or self._leased

    def try_activate(self) -> bool:
        """Take the active lock if no other compactor holds it (kept until ``close``); on S3 take
        or renew the lease (called before every tick: a holder that lost it stands by)."""
        if self._s3_lease is not None:
            was, self._leased = self._leased, self._s3_lease.acquire()
            if self._leased != was:
                logger.info("index-compactor: %s", "active (lease taken)" if self._leased else "lease lost")
            if self._metrics is not None:
                self._metrics.active.set(int(self._leased))
            return self._leased
        if self._lease is None:
            lock_dir = self._builder.index_store.local_path("index")
            lock_dir.mkdir(parents=True, exist_ok=True)
            self._lease = try_lock_exclusive(lock_dir / ACTIVE_LOCK)
            if self._lease is not None:
                logger.info("index-compactor: active (building every %.1fs)", self._interval_s)
            if self._metrics is not None:
                self._metrics.active.set(int(self._lease is not None))
        return self._lease is not None

    def run(self) -> None:
        logger.info("index-compactor: building every %.1fs under %s", self._interval_s, self._builder.index_store)
        manifest = read_manifest(self._builder.index_store)
        if self._metrics is not None and manifest is not None:
            self._metrics.set_current(manifest.current_version)  # before the first build: a restart shows it
        standing_by = False
        while not self._stop.is_set():
            self._heartbeat()
            if not self._activate_or_stand_by():
                if not standing_by:
                    logger.info("index-compactor: standing by (another compactor is active)")
                    standing_by = True
                self._stop.wait(self._standby_poll_s)
                continue
            try:
                if not self._below_floor():
                    self.run_once()
            except _TickStopped:
                logger.info("index-compactor: stopped mid-tick; what it published stays, the next tick goes on from it")
                break
            except TransientError as exc:  # S3 down, or (S3) another builder flipped first
                if self._metrics is not None:
                    self._metrics.build_failures.inc()
                logger.error("index-compactor: tick failed, retrying in %.1fs: %s", self._interval_s, exc)
            self._heartbeat()
            self._wait_interval()
        logger.info("index-compactor: stopped")

    def _below_floor(self) -> bool:
        """True (the tick is skipped, logged when it starts, counted) while the disk is below the floor."""
        floor = self._disk_floor
        below = floor is not None and floor.below()
        if below and floor is not None:
            self.skipped_below_floor += 1
            if self._metrics is not None:
                self._metrics.skipped_disk_floor.inc()
            if not self._skipping:
                logger.warning("index-compactor: skipping builds until the disk is back above its floor: %s",
                               floor.describe())
        elif self._skipping and floor is not None:
            logger.info("index-compactor: building again, the disk is above its floor: %s", floor.describe())
        self._skipping = below
        return below

    def _activate_or_stand_by(self) -> bool:
        try:
            return self.try_activate()
        except TransientError as exc:  # S3 unreachable: neither take nor keep the lease
            logger.error("index-compactor: cannot reach the lease: %s", exc)
            self._leased = False
            return False

    def _wait_interval(self) -> None:
        """Wait one build interval; on S3 renew the lease every third of its TTL meanwhile."""
        if self._s3_lease is None:
            self._stop.wait(self._interval_s)
            return
        deadline = time.monotonic() + self._interval_s
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            self._stop.wait(min(left, self._s3_lease.ttl_s / 3))
            if not self._stop.is_set() and not self._activate_or_stand_by():
                return

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Give up the active lock (a standby takes over); every tick's work is on disk already."""
        if self._s3_lease is not None and self._leased:
            self._leased = False
            try:
                self._s3_lease.release()
            except TransientError as exc:  # it expires by itself
                logger.warning("index-compactor: could not release the lease: %s", exc)
            if self._metrics is not None:
                self._metrics.active.set(0)
        if self._lease is not None:
            os.close(self._lease)
            self._lease = None
            if self._metrics is not None:
                self._metrics.active.set(0)


def from_settings(
    settings: Settings,
    stop_event: threading.Event | None = None,
    heartbeat: Callable[[], None] | None = None,
    registry: CollectorRegistry = REGISTRY,
) -> IndexCompactor:
    """``registry``: where its metrics go (the process's, which ``crawlstream service`` serves)."""
    builder = IndexBuilder.from_settings(settings)
    return IndexCompactor(
        builder,
        interval_s=settings.index.build_interval_s,
        compact_min_files=settings.index.compact_min_files,
        standby_poll_s=settings.index.standby_poll_s,
        lease_ttl_s=settings.index.lease_ttl_s,
        stop_event=stop_event,
        heartbeat=heartbeat,
        metrics=per_registry(IndexMetrics, registry),
        disk_floor=index_disk_floor(settings, builder),
    )


def build(host: Host) -> IndexCompactor:
    return from_settings(host.settings, host.stop_event, registry=host.registry)


def run(settings: Settings) -> int:
    """``crawlstream service index-compactor``: needs only the data dir (no bus, no Redis),
    so it runs beside an embedded-bus process, which holds the bus directory's lock."""
    heartbeat = Heartbeat(settings.heartbeat_file, min_interval_s=0.0)
    heartbeat.start()
    compactor = from_settings(settings, heartbeat=heartbeat.beat)
    install_stop_signals(compactor.stop)
    try:
        compactor.run()
    finally:
        compactor.close()
        heartbeat.stop()
    return 0
