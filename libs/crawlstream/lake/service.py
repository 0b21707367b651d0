"""Parquet sink wiring: ``content.stored`` + ``urls.records`` -> lake files, at least once.

Rows reach the lake through a staging log (``_staging.StagingLog``), because the loop
commits after every batch and a lake file per batch would be tiny. One loop iteration:

1. ``handle``: canonicalize each event's URL into a row (an invalid URL or dataset id is
   bad data: the loop dead-letters it to ``<topic>.dlq``); rows wait in memory;
2. ``end_batch``: append the batch's rows to the staging log and fsync (durable before
   the loop commits), then hand them to the ``LakeWriter``'s buffers;
3. ``end_batch``: when the staging log holds ``lake.sink_flush_rows`` rows or its oldest row
   is ``lake.sink_flush_interval_s`` old, ``LakeWriter.flush()`` publishes one sorted file per
   (dataset, domain prefix) touched (write, fsync, rename), and only then the staging log
   is truncated;
4. the loop commits.

A ``content.stored`` event whose ``robots_directives`` hold ``noindex`` (the page asked,
and the crawl obeys; ADR 015) writes no row: the page stays in the content store, out of
the lake and so out of the URL index. Replay goes through this handler and agrees.

A crash anywhere replays safely: before 2's fsync the batch is not committed and comes
again from the bus; after it the staging log is replayed into the lake at start-up;
between the publish and the truncate of 3 the rows are published twice, which the index
and reader dedupe by (dataset_id, url).

Scaling: each member stages in a directory of its own (its host name, or ``<name>.<n>`` when
another member on the host holds that: ``lake._staging.claim_staging``) and names its lake
files after it, so members never write the same file whatever partitions they hold; a
partition that moves needs no hand-over (rows a member staged are published by that member).
The staging of a member that died and never came back is adopted (published) by a live one,
at its start and after each of its publishes (ADR 028).
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

from crawlstream.bus import Message
from crawlstream.errors import BadDataError
from crawlstream.events import ContentStored, UrlRecord
from crawlstream.lake import LakeWriter, WrittenFile
from crawlstream.lake._staging import Row, StagingLog, claim_staging, orphaned_logs
from crawlstream.runtime import EventHandler, Host, LoopService, ServiceLoop, run_standalone
from crawlstream.settings import Settings
from crawlstream.topics import CONTENT_STORED, IN_LAKE_HEADER, URLS_RECORDS
from crawlstream.urls import canonicalize

GROUP = "crawlstream.parquet-sink"
TOPICS = (CONTENT_STORED, URLS_RECORDS)
MAX_DATASET_ID = 2**31 - 1
TITLE_MAX_CHARS = 256

logger = logging.getLogger(__name__)


def _dataset_id(value: int, source: str) -> int:
    if not 0 <= value <= MAX_DATASET_ID:
        raise BadDataError(f"expected a dataset_id in 0..{MAX_DATASET_ID}, found {value} in {source}")
    return value


def content_row(event: ContentStored, default_dataset_id: int) -> Row:
    """The lake row of a stored page: dataset of the crawl, fetch time, status/type/hash/title."""
    canon = canonicalize(event.url)
    ds = _dataset_id(event.dataset_id if event.dataset_id is not None else default_dataset_id, "content.stored")
    extras: dict[str, object] = {"status": event.status, "content_hash": event.content_hash}
    if event.content_type:
        extras["content_type"] = event.content_type
    if event.title:
        extras["title"] = event.title[:TITLE_MAX_CHARS]
    text = json.dumps(extras, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (ds, canon.url, canon.domain, event.fetched_at_ms, text)


def record_row(event: UrlRecord) -> Row:
    """The lake row of an external dataset's URL, normalized as ``crawlstream ingest`` does."""
    canon = canonicalize(event.url)
    ds = _dataset_id(event.dataset_id, "urls.records")
    extras = (
        json.dumps(dict(event.extras), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if event.extras
        else None
    )
    return (ds, canon.url, canon.domain, event.ts_ms, extras)


class SinkHandler(EventHandler):
    """Stages rows durably per batch and publishes lake files by size or age."""

    def __init__(
        self,
        writer: LakeWriter,
        staging: StagingLog,
        *,
        default_dataset_id: int,
        flush_rows: int,
        flush_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        skip_in_lake: bool = True,
        orphans_under: Path | None = None,
    ) -> None:
        """``orphans_under``: the staging directories' parent, where this member looks for the
        logs of members that died and never came back (at start-up and after every publish)."""
        self._writer = writer
        self._staging = staging
        self._orphans_under = orphans_under
        self._default_dataset_id = default_dataset_id
        self._flush_rows = flush_rows
        self._flush_interval_s = flush_interval_s
        self._clock = clock
        self._skip_in_lake = skip_in_lake
        self._batch: list[Row] = []
        self._oldest: float | None = None  # clock() when the oldest staged row was staged
        self.rows_staged = 0
        self.files_published = 0
        self.skipped_in_lake = 0
        self.skipped_noindex = 0

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        staging: StagingLog,
        *,
        skip_in_lake: bool = True,
        orphans_under: Path | None = None,
    ) -> SinkHandler:
        """The sink's handler writing ``settings``' lake at the sink's zstd level (the live
        service and ``crawlstream replay`` alike, so a replayed row is the row it wrote).
        ``skip_in_lake`` False (replay) writes the rows ``crawlstream ingest`` marked too."""
        return cls(
            LakeWriter.from_settings(
                settings, zstd_level=settings.lake.sink_zstd_level, file_tag=staging.directory.name
            ),
            staging,
            default_dataset_id=settings.crawl.dataset_id,
            flush_rows=settings.lake.sink_flush_rows,
            flush_interval_s=settings.lake.sink_flush_interval_s,
            skip_in_lake=skip_in_lake,
            orphans_under=orphans_under,
        )

    def recover(self) -> int:
        """Publish rows a crash left in our staging log and in orphaned ones; return #rows."""
        rows = self._staging.replay()
        for row in rows:
            self._writer.add(*row)
        if rows:
            logger.warning("parquet-sink: publishing %d staged rows left by a crash", len(rows))
            self.flush()
        return len(rows) + self.adopt_orphans()

    def adopt_orphans(self) -> int:
        """Publish, then clear, the staged rows of members that died and did not come back (their
        directory's lock is free); a member that restarts later finds its log empty."""
        if self._orphans_under is None:
            return 0
        own = self._staging.directory
        logs = [log for d in orphaned_logs(self._orphans_under, own) if (log := StagingLog.try_open(d)) is not None]
        adopted = 0
        try:
            for log in logs:
                for row in log.replay():
                    self._writer.add(*row)
                    adopted += 1
            if adopted:
                logger.warning(
                    "parquet-sink: publishing %d rows staged by %d members that are gone", adopted, len(logs)
                )
                self._writer.flush()
            for log in logs:
                log.clear()  # after the publish: a crash in between publishes them twice, never zero times
        finally:
            for log in logs:
                log.close()
        return adopted

    def handle(self, event: ContentStored | UrlRecord, message: Message) -> None:
        if isinstance(event, ContentStored):
            if "noindex" in event.robots_directives:
                self.skipped_noindex += 1  # stored, but the page asked to stay out of the index
                return
            self._batch.append(content_row(event, self._default_dataset_id))
        elif self._skip_in_lake and (IN_LAKE_HEADER, b"1") in message.headers:
            self.skipped_in_lake += 1  # `crawlstream ingest` wrote this row to the lake itself
        else:
            self._batch.append(record_row(event))

    def end_batch(self) -> None:
        if self._batch:
            # 2. durable before the loop commits, then buffered for the next file.
            self._staging.append(self._batch)
            for row in self._batch:
                self._writer.add(*row)
            self.rows_staged += len(self._batch)
            if self._oldest is None:
                self._oldest = self._clock()
            self._batch.clear()
        # 3. publish by size or age.
        if self._staging.rows >= self._flush_rows or (
            self._oldest is not None and self._clock() - self._oldest >= self._flush_interval_s
        ):
            self.flush()

    def flush(self) -> list[WrittenFile]:
        """Publish every buffered row as lake files, then forget the staged copy."""
        written = self._writer.flush()
        self._staging.clear()
        self._oldest = None
        self.files_published += len(written)
        self.adopt_orphans()
        if written:
            logger.info(
                "parquet-sink: published %d lake files, %d rows",
                len(written),
                sum(w.num_rows for w in written),
            )
        return written


class ParquetSinkService(LoopService):
    """The loop plus its staging log: closing leaves the group, then publishes what is staged
    (a clean stop leaves no staged rows)."""

    def __init__(self, loop: ServiceLoop, handler: SinkHandler, staging: StagingLog) -> None:
        super().__init__(loop, handler, on_close=self._publish)
        self.staging = staging
        self._sink = handler

    def _publish(self) -> None:
        try:
            self._sink.flush()
        finally:
            self.staging.close()


def staging_root(settings: Settings) -> Path:
    return settings.data_dir / "parquet-sink" / "staging"


def build(host: Host, *, instance: str | None = None) -> ParquetSinkService:
    """Wire the service. ``instance`` names this member's staging directory (default: the host
    name, stable for a StatefulSet pod); when another live member holds it, the first free
    ``<instance>.<n>`` is taken (``claim_staging``), so members scale on one host too."""
    settings = host.settings
    parent = staging_root(settings)
    staging = claim_staging(parent, instance or socket.gethostname())
    try:
        handler = SinkHandler.from_settings(settings, staging, orphans_under=parent)
        handler.recover()
        loop = host.service_loop("parquet-sink", GROUP, TOPICS, handler, batch_size=2000)
    except BaseException:
        staging.close()
        raise
    return ParquetSinkService(loop, handler, staging)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
