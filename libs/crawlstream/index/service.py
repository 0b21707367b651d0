"""Index compactor wiring: every ``index.build_interval_s``, bring the index up to the lake.

No topic: the lake directory is the input. One iteration (``run_once``):

1. ``IndexBuilder.build()``: incremental, scans only lake files the current version does
   not know; writes nothing when there are none;
2. if some lake partition holds ``index.compact_min_files`` live files or more (postings of
   its domains are fragmented across that many files), ``IndexBuilder.compact()`` merges
   those partitions and builds again; counted from a directory listing, no file is opened;
3. after a new version flipped, ``IndexBuilder.gc()`` drops versions beyond
   ``index.keep_versions`` (never one a reader pins) and lake files compaction retired.

High availability (ADR 028): run two or more; one is *active* and builds, the others stand by.
The active one holds ``index/.compactor.lock`` (an exclusive ``flock``, which the kernel drops
when the process dies or closes it on a stop); a standby tries it every
``index.standby_poll_s`` and takes over within that bound. Only the lock holder builds, so two
compactors never publish at once; the builder's own lock (``index/.build.lock``) also keeps a
manual ``crawlstream index build`` from racing the active one.

A storage error is logged and retried at the next tick; anything else propagates. Standalone,
``settings.heartbeat_file`` is touched before and after each tick, and each standby poll (its
age is at most one interval or one build, whichever is longer: the liveness probe allows both).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

from crawlstream.durable import try_lock_exclusive
from crawlstream.errors import TransientError
from crawlstream.index import BuildResult, IndexBuilder, read_manifest
from crawlstream.index._manifest import index_dir
from crawlstream.lake import list_lake_files
from crawlstream.metrics import IndexMetrics, per_registry
from crawlstream.runtime import Heartbeat, Host, install_stop_signals
from crawlstream.settings import Settings

logger = logging.getLogger(__name__)

ACTIVE_LOCK = ".compactor.lock"  # under index/: held by the active compactor


@dataclass(frozen=True)
class TickResult:
    build: BuildResult
    compaction: BuildResult | None
    gc_removed_versions: int


def max_live_files_per_partition(root: Path) -> int:
    """The most live (not retired by a compaction) lake files any (dataset, prefix) holds."""
    manifest = read_manifest(root)
    retired = set(manifest.current().stats.get("retired", [])) if manifest else set()
    counts = Counter((lf.dataset_id, lf.hh) for lf in list_lake_files(root) if lf.path not in retired)
    return max(counts.values(), default=0)


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
    ) -> None:
        self._builder = builder
        self._metrics = metrics
        self._heartbeat = heartbeat or (lambda: None)
        self._interval_s = interval_s
        self._compact_min_files = compact_min_files
        self._stop = stop_event or threading.Event()
        self._standby_poll_s = standby_poll_s
        self._lease: int | None = None  # the fd holding the active lock, while active
        self.ticks = 0
        self.versions_flipped = 0

    def run_once(self) -> TickResult:
        # 1. incremental build
        build = self._builder.build()
        self._observe("full" if build.full else "incremental", build)
        # 2. compaction when fragmented
        compaction = None
        if max_live_files_per_partition(self._builder.root) >= self._compact_min_files:
            compaction = self._builder.compact(min_files=self._compact_min_files)
            self._observe("compaction", compaction)
            logger.info("index-compactor: compacted %d lake partitions", compaction.compacted_partitions)
        # 3. gc after a flip
        flipped = build.version is not None or (compaction is not None and compaction.version is not None)
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
        return self._lease is not None

    def try_activate(self) -> bool:
        """Take the active lock if no other compactor holds it (kept until ``close``)."""
        if self._lease is None:
            lock_dir = index_dir(self._builder.root)
            lock_dir.mkdir(parents=True, exist_ok=True)
            self._lease = try_lock_exclusive(lock_dir / ACTIVE_LOCK)
            if self._lease is not None:
                logger.info("index-compactor: active (building every %.1fs)", self._interval_s)
            if self._metrics is not None:
                self._metrics.active.set(int(self._lease is not None))
        return self._lease is not None

    def run(self) -> None:
        logger.info("index-compactor: building every %.1fs under %s", self._interval_s, self._builder.root)
        manifest = read_manifest(self._builder.root)
        if self._metrics is not None and manifest is not None:
            self._metrics.set_current(manifest.current_version)  # before the first build: a restart shows it
        standing_by = False
        while not self._stop.is_set():
            self._heartbeat()
            if not self.try_activate():
                if not standing_by:
                    logger.info("index-compactor: standing by (another compactor is active)")
                    standing_by = True
                self._stop.wait(self._standby_poll_s)
                continue
            try:
                self.run_once()
            except TransientError as exc:
                if self._metrics is not None:
                    self._metrics.build_failures.inc()
                logger.error("index-compactor: tick failed, retrying in %.1fs: %s", self._interval_s, exc)
            self._heartbeat()
            self._stop.wait(self._interval_s)
        logger.info("index-compactor: stopped")

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Give up the active lock (a standby takes over); every tick's work is on disk already."""
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
    return IndexCompactor(
        IndexBuilder.from_settings(settings),
        interval_s=settings.index.build_interval_s,
        compact_min_files=settings.index.compact_min_files,
        standby_poll_s=settings.index.standby_poll_s,
        stop_event=stop_event,
        heartbeat=heartbeat,
        metrics=per_registry(IndexMetrics, registry),
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
