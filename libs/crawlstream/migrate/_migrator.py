"""Move a crawl's state from the seed crawler's PostgreSQL tables into crawlstream.

What each table becomes (the source is read by ``PostgresSource``; every effect goes through
the component that owns it):

* ``domain_metadata``: ``is_manually_excluded`` -> the operator's excluded set (``Controls``,
  by registered domain, as ``crawlstream exclude`` names them); an unexpired
  ``robots_txt_content`` -> the imported robots.txt of its host (``ImportedRobots``: the
  fetcher obeys it until ``robots_txt_expires_timestamp`` and does not request robots.txt
  meanwhile); ``last_scheduled_fetch_timestamp`` -> the domain's next fetch time in the
  scheduler (``Scheduler.hold_until``).
* ``visited_urls``: seen in the dedupe Bloom filter of its partition (never fetched again);
  a lake row of dataset ``dataset_id`` with the crawl time and ``{"status": ...}``, also
  published to ``urls.records`` marked as in the lake (replay rebuilds it); the body at
  ``content_storage_path`` under ``content_root`` into the content store when the file is
  there. ``redirected_to_url`` -> a redirect hop of the alias map (``crawlstream.lake._aliases``:
  a row of the redirects dataset, published the same way), which ``/v1/url`` answers.
* ``frontier``: seen in the Bloom filter, and when it was not seen before (visited, or an
  earlier row), appended to its domain's frontier file with its depth (``Scheduler.enqueue``,
  as the scheduler admits URLs); a priority > 0 puts it in the domain's priority lane as
  ``priority_from_real`` (round(priority x 1000), fetched first, highest first; ADR 016).

Idempotent and resumable. The checkpoint (``<data_dir>/migrate/postgres-<source>.json``)
records per table the key of the last row whose effects are durable, and the counts so far.
Every effect is idempotent by itself (set adds, later-only times, the content store keyed by
URL and body) except two, which the checkpoint's ordering covers: frontier appends are
journaled (a domain's file is noted before its first append since the last checkpoint; on
resume, every record in a noted file is added to the Bloom filter, so a replayed row is
"already seen" instead of appended twice), and lake files published between the last
checkpoint and a crash are written again (readers and ``index compact`` dedupe them by
(dataset_id, url)). A finished migration runs again as a no-op that reports the first run.

Caller's contract: no deduper or scheduler may run on the same state meanwhile (the CLI
refuses when a crawl holds the data dir's Redis); ``run`` raises whatever the source or a
store raises, and running again resumes.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawlstream.dedupe import Deduper
from crawlstream.durable import write_atomically
from crawlstream.errors import ConfigError, InvalidDomain, InvalidUrl, StorageUnavailable
from crawlstream.frontier import FrontierEntry, priority_from_real, validate_domain
from crawlstream.lake import REDIRECTS_DATASET, LakeWriter, extras_json, redirect_extras
from crawlstream.migrate._source import TABLES, Key, PostgresSource, TableSpec
from crawlstream.migrate._values import TableReport, epoch_ms, flag, frontier_depth, http_status, robots_bytes
from crawlstream.politeness import Controls, Scheduler
from crawlstream.robots import MAX_ROBOTS_BYTES, ImportedRobots, ImportedRobotsTxt
from crawlstream.store import ShardedStore
from crawlstream.urls import (
    KEY_HASH_MASK,
    CanonicalUrl,
    canonicalize,
    compose_key,
    domain_checksum,
    fnv1a_64,
    partition_for,
)

__all__ = [
    "CHECKPOINT_VERSION",
    "MigrationReport",
    "PostgresMigrator",
    "checkpoint_path",
    "few_collections",
    "finished_report",
    "load_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
Publish = Callable[[int, str, str, int | None, dict[str, str]], None]
PublishVisited = Callable[[int, str, str, int | None, int | None], None]
"""``publish`` of a visited row given its status code (``UrlRecordPublisher.visited``): the same
record as ``publish(dataset_id, url, domain, ts_ms, {"status": str(status)})``, cheaper."""
Progress = Callable[[str, TableReport, int], None]


@dataclass
class MigrationReport:
    """The run's answer: per table, rows by outcome; ``already_complete`` when nothing was done."""

    source: str
    dataset_id: int
    tables: dict[str, TableReport] = field(default_factory=lambda: {t.name: TableReport() for t in TABLES})
    missing_columns: dict[str, list[str]] = field(default_factory=dict)
    already_complete: bool = False
    resumed: bool = False
    journal_recovered_urls: int = 0
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dataset_id": self.dataset_id,
            "already_complete": self.already_complete,
            "resumed": self.resumed,
            "rows": self.rows,
            "tables": {name: t.to_json() for name, t in self.tables.items()},
            "missing_columns": self.missing_columns,
            "journal_recovered_urls": self.journal_recovered_urls,
            "seconds": round(self.seconds, 3),
            "rows_per_s": round(self.rows / self.seconds) if self.seconds > 0 else 0,
        }


@dataclass
class _TableState:
    after: Key | None = None
    filenode: int | None = None
    report: TableReport = field(default_factory=TableReport)


def checkpoint_path(state_dir: Path, identity: str, dataset_id: int) -> Path:
    """Where the checkpoint of migrating ``identity`` (``host:port/dbname``) into ``dataset_id`` lives."""
    name = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return Path(state_dir) / f"postgres-{name}-dataset{dataset_id}.json"


def load_checkpoint(path: Path, identity: str) -> dict[str, Any] | None:
    """The saved checkpoint, or None; ``ConfigError`` for one that is unreadable or not this source's."""
    try:
        data: dict[str, Any] = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"checkpoint {path} cannot be read ({exc}); run with --restart to start over") from exc
    if data.get("version") != CHECKPOINT_VERSION or data.get("source") != identity:
        raise ConfigError(
            f"checkpoint {path} is version {data.get('version')} of {data.get('source')!r}; "
            f"expected version {CHECKPOINT_VERSION} of {identity!r}: run with --restart"
        )
    return data


def finished_report(state_dir: Path, identity: str, dataset_id: int) -> MigrationReport | None:
    """The report of a migration that already finished (so a second run touches nothing), else None."""
    started = time.perf_counter()
    saved = load_checkpoint(checkpoint_path(state_dir, identity, dataset_id), identity)
    if saved is None or not saved.get("completed"):
        return None
    return _finished_report(saved, dataset_id, started)


def _finished_report(saved: dict[str, Any], dataset_id: int, started: float) -> MigrationReport:
    report = MigrationReport(str(saved["source"]), dataset_id)
    for name, data in saved["tables"].items():
        report.tables[name] = TableReport.from_json(data["report"])
    report.missing_columns = saved.get("missing_columns", {})
    report.already_complete = True
    report.seconds = time.perf_counter() - started
    logger.info("migration of %s into dataset %d is already complete", report.source, dataset_id)
    return report


_DOMAIN_FACTS_MAX = 1 << 20
"""Domains whose facts a migrator remembers (~200 bytes each) before it starts over."""


def _invalid_url_reason(value: Any, exc: InvalidUrl) -> str:
    """The report's reason for a URL column value that did not canonicalize."""
    if value is None:
        return "missing"
    if not isinstance(value, str):
        return "not_text"
    return exc.reason if value.strip() else "blank"


def _count(table: TableReport, outcome: str, n: int) -> None:
    if n:
        table.outcomes[outcome] += n


GC_YOUNG_THRESHOLD = 200_000
"""Net allocations between two young-generation collections while a migration runs (Python's
default is 700). A batch allocates tens of thousands of short-lived, acyclic objects (rows,
canonical URLs, tuples) that reference counting frees; each default collection walked them,
and the older generations' walks over everything alive cost ~20% of the CPU (ADR 017)."""


@contextmanager
def few_collections(young: int = GC_YOUNG_THRESHOLD) -> Iterator[None]:
    """Run the block with the objects alive before it frozen out of the cyclic collector and
    ``young`` as the first generation's threshold; both restored after, whatever happens.

    Nothing is left uncollected: cycles made inside the block are still found, by rarer
    collections, and ``gc.unfreeze`` hands the frozen objects back to the oldest generation.
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(young, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


class PostgresMigrator:
    """One migration of one source database into one data dir; see the module docstring.

    Parameters by consequence:
    * ``dedupe_partitions`` / ``scheduler_partitions``: the partition counts of
      ``urls.discovered`` and ``urls.frontier`` (a URL's state must sit where the deduper and
      scheduler owning its domain look).
    * ``content_root``: where ``content_storage_path`` values resolve; None imports no bodies
      (rows with a path are counted ``content_no_root``). A path resolving outside it is never
      read. ``open_store`` builds the content store on the first body to import.
    * ``publish`` / ``published``: send each lake row to ``urls.records`` and make the sends
      durable (before each checkpoint's lake flush); None publishes nothing.
      ``publish_visited``: the visited rows' sends by status code (``UrlRecordPublisher.visited``);
      None sends them through ``publish``.
    * ``checkpoint_rows`` / ``checkpoint_interval_s``: how much work a crash can cost again,
      and how many rows the lake buffers in memory (one lake file per domain prefix each).
    * ``max_body_bytes``: a stored body larger than this is not imported (``content_too_large``).
    * ``on_batch``: called after each batch's effects, before any checkpoint (tests inject a crash).
    """

    def __init__(
        self,
        source: PostgresSource,
        *,
        state_dir: Path,
        dataset_id: int,
        deduper: Deduper,
        scheduler: Scheduler,
        lake: LakeWriter,
        robots: ImportedRobots,
        controls: Controls,
        dedupe_partitions: int,
        scheduler_partitions: int,
        content_root: Path | None = None,
        open_store: Callable[[], ShardedStore] | None = None,
        publish: Publish | None = None,
        published: Callable[[], None] | None = None,
        publish_visited: PublishVisited | None = None,
        max_body_bytes: int = 5 * 1024 * 1024,
        checkpoint_rows: int = 250_000,
        checkpoint_interval_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        progress: Progress | None = None,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> None:
        if not 0 <= dataset_id <= 2**31 - 1:
            raise ConfigError(f"--dataset-id must be in 0..2147483647, got {dataset_id}")
        self.source = source
        self.state_dir = Path(state_dir)
        self.dataset_id = dataset_id
        self.deduper = deduper
        self.scheduler = scheduler
        self.lake = lake
        self.robots = robots
        self.controls = controls
        self.dedupe_partitions = dedupe_partitions
        self.scheduler_partitions = scheduler_partitions
        self.content_root = content_root.resolve() if content_root is not None else None
        self._open_store = open_store
        self._store: ShardedStore | None = None
        self._publish = publish
        self._published = published
        self._publish_visited = publish_visited if publish is not None else None
        self.max_body_bytes = max_body_bytes
        self.checkpoint_rows = checkpoint_rows
        self.checkpoint_interval_s = checkpoint_interval_s
        self.clock = clock
        self._progress = progress
        self._on_batch = on_batch
        self.checkpoint_path = checkpoint_path(self.state_dir, source.identity, dataset_id)
        self.journal_path = self.checkpoint_path.with_suffix(".journal")
        self._offsets: dict[int, int | None] = {}
        self._dirty: set[int] = set()
        self._journaled: set[tuple[int, str]] = set()
        self._excluded: set[str] = set()
        self._extras_cache: dict[int | None, str | None] = {}
        self._fields_cache: dict[int | None, dict[str, str]] = {}
        self._domain_facts: dict[str, tuple[int, int, int, bool]] = {}
        self._pending_frontier: dict[int, list[FrontierEntry]] = defaultdict(list)

    # -- the run ----------------------------------------------------------------------------

    def run(self, *, restart: bool = False) -> MigrationReport:
        started = time.perf_counter()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        report = MigrationReport(self.source.identity, self.dataset_id)
        states = {t.name: _TableState() for t in TABLES}
        if restart:
            self.checkpoint_path.unlink(missing_ok=True)
        saved = load_checkpoint(self.checkpoint_path, self.source.identity)
        if saved is not None:
            if saved.get("completed"):
                return _finished_report(saved, self.dataset_id, started)
            report.resumed = True
            for name, data in saved["tables"].items():
                after = data.get("after")
                key = tuple(after) if after is not None else None
                states[name] = _TableState(key, data.get("filenode"), TableReport.from_json(data["report"]))
        for spec in TABLES:
            report.tables[spec.name] = states[spec.name].report
            missing = self.source.missing_columns(spec)
            if missing:
                report.missing_columns[spec.name] = missing
        self._excluded = set(self.controls.excluded())
        report.journal_recovered_urls = self._recover_journal()
        with few_collections():
            for spec in TABLES:
                self._migrate_table(spec, states, report)
            self._checkpoint(states, report, completed=True)
        report.seconds = time.perf_counter() - started
        return report

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _migrate_table(self, spec: TableSpec, states: dict[str, _TableState], report: MigrationReport) -> None:
        state = states[spec.name]
        table = state.report
        if table.done:
            return
        filenode = self.source.filenode(spec)
        if state.after is not None and state.filenode is not None and state.filenode != filenode:
            raise ConfigError(
                f"table {spec.name} was rewritten since the checkpoint (VACUUM FULL, CLUSTER or TRUNCATE: its row ids "
                f"changed); run again with --restart to start over (every effect is idempotent)"
            )
        state.filenode = filenode
        estimate = self.source.estimate_rows(spec)
        handlers = {"domain_metadata": self._domain_rows, "visited_urls": self._visited_rows}
        handle = handlers.get(spec.name, self._frontier_rows)
        since_rows, since_at = 0, time.monotonic()
        started = time.perf_counter()
        for batches, (batch, last_key) in enumerate(self.source.stream(spec, state.after), 1):
            handle(batch, table)
            table.rows += len(batch)
            state.after = last_key
            since_rows += len(batch)
            if self._on_batch is not None:
                self._on_batch(spec.name, batches)
            if self._progress is not None:
                self._progress(spec.name, table, estimate)
            if since_rows >= self.checkpoint_rows or time.monotonic() - since_at >= self.checkpoint_interval_s:
                self._checkpoint(states, report)
                since_rows, since_at = 0, time.monotonic()
        table.done = True
        self._checkpoint(states, report)  # appends the frontier buffer and flushes the lake
        table.seconds += time.perf_counter() - started
        if self._progress is not None:
            self._progress(spec.name, table, estimate)
        logger.info("migrated %s: %d rows %s", spec.name, table.rows, dict(table.outcomes))

    # -- checkpoints ----------------------------------------------------------------------------

    def _checkpoint(self, states: dict[str, _TableState], report: MigrationReport, *, completed: bool = False) -> None:
        # Steps, do not reorder: each makes durable what the next one claims.
        # 0. the buffered frontier entries go to their files (journaled first);
        self._enqueue_pending(states["frontier"].report)
        # 1. the urls.records sends (before the lake, as `crawlstream ingest` does);
        if self._published is not None:
            self._published()
        # 2. the lake files of the rows so far;
        self.lake.flush()
        # 3. the content store's records and index;
        if self._store is not None:
            self._store.sync()
        # 4. the frontier files (a Bloom snapshot must never mark a URL seen whose record could
        #    still be lost: it would never be fetched);
        self.scheduler.flush_partition(0)
        # 5. the Bloom snapshots, keeping the bus offset each one covered;
        for partition in sorted(self._dirty):
            self.deduper.flush_partition(partition, self._offsets.get(partition))
        self._dirty.clear()
        # 6. the checkpoint: rows up to each table's key are done;
        data = {
            "version": CHECKPOINT_VERSION,
            "source": self.source.identity,
            "dataset_id": self.dataset_id,
            "completed": completed,
            "missing_columns": report.missing_columns,
            "tables": {
                name: {
                    "after": list(s.after) if s.after is not None else None,
                    "filenode": s.filenode,
                    "report": s.report.to_json(),
                }
                for name, s in states.items()
            },
        }
        write_atomically(self.checkpoint_path, json.dumps(data, indent=1).encode())
        # 7. the journal: every append it lists is covered by the checkpoint now.
        self.journal_path.unlink(missing_ok=True)
        self._journaled.clear()

    def _note_frontier_domains(self, pairs: Iterable[tuple[int, str]]) -> None:
        """Write-ahead: the domains whose files are about to grow, durable before the append."""
        new = [p for p in dict.fromkeys(pairs) if p not in self._journaled]
        if not new:
            return
        lines = "".join(f"{partition}\t{domain}\n" for partition, domain in new)
        try:
            with open(self.journal_path, "a", encoding="utf-8") as fh:
                fh.write(lines)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise StorageUnavailable(f"cannot write the migration journal {self.journal_path} ({exc})") from exc
        self._journaled.update(new)

    def _recover_journal(self) -> int:
        """After a crash: mark every record of the journaled domains' files seen, and make the
        scheduler's Redis agree with those files. Returns how many records were read."""
        try:
            text = self.journal_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0
        by_partition: dict[int, list[str]] = defaultdict(list)
        for line in text.splitlines():
            partition_text, sep, domain = line.partition("\t")
            if sep and partition_text.isdigit():  # a torn last line was never followed by an append
                by_partition[int(partition_text)].append(domain)
        recovered = 0
        files = self.scheduler.files
        for sched_partition, domains in by_partition.items():
            self.scheduler.adopt_files(sched_partition, domains)
            for domain in domains:
                items = [(e.url_key, e.url) for e in files.read_all(sched_partition, domain)]  # lane + file
                if items:
                    self._bloom(domain).check_and_add(items)
                    self._dirty.add(self._dedupe_partition(domain))
                    recovered += len(items)
        logger.warning(
            "migration journal: %d frontier records of %d domains re-marked as seen after a crash",
            recovered,
            sum(len(d) for d in by_partition.values()),
        )
        return recovered

    # -- per table ------------------------------------------------------------------------------

    def _domain_rows(self, rows: list[tuple[Any, ...]], table: TableReport) -> None:
        now_ms = int(self.clock() * 1000)
        exclude: list[str] = []
        robots: dict[str, ImportedRobotsTxt] = {}
        holds: dict[int, dict[str, int]] = defaultdict(dict)
        for raw_domain, body, expires, excluded, next_ts in rows:
            canon = self._canonical_host(raw_domain, table)
            if canon is None:
                continue
            table.outcomes["migrated"] += 1
            try:
                if flag(excluded):
                    table.details["excluded"] += 1
                    if canon.host != canon.domain:
                        table.details["excluded_host_widened_to_domain"] += 1
                    if canon.domain not in self._excluded:
                        exclude.append(canon.domain)
                        self._excluded.add(canon.domain)
            except ValueError:
                table.details["bad_is_manually_excluded"] += 1
            if body is not None:
                self._robots_row(canon.host, body, expires, now_ms, robots, table)
            try:
                next_ms = epoch_ms(next_ts)
            except ValueError:
                table.details["bad_last_scheduled_fetch_timestamp"] += 1
                next_ms = None
            if next_ms is not None:
                table.details["next_fetch_time"] += 1
                hold = holds[partition_for(canon.domain, self.scheduler_partitions)]
                hold[canon.domain] = max(hold.get(canon.domain, 0), next_ms)
        if exclude:
            self.controls.exclude(exclude)
        if robots:
            table.details["robots_stored"] += self.robots.put_many(robots)
        for partition, times in holds.items():
            self.scheduler.hold_until(partition, times)

    def _robots_row(
        self, host: str, body: Any, expires: Any, now_ms: int, out: dict[str, ImportedRobotsTxt], table: TableReport
    ) -> None:
        try:
            exp_ms = epoch_ms(expires)
        except ValueError:
            table.details["robots_bad_expiry"] += 1
            return
        if exp_ms is None or exp_ms <= now_ms:  # the seed's `expires or 0`: no expiry is expired
            table.details["robots_expired"] += 1
            return
        try:
            data, cut = robots_bytes(body, MAX_ROBOTS_BYTES)
        except (TypeError, ValueError, UnicodeError):
            table.details["robots_bad_body"] += 1
            return
        if cut:
            table.details["robots_truncated"] += 1
        table.details["robots_unexpired"] += 1
        previous = out.get(host)
        if previous is None or previous.expires_at_ms < exp_ms:
            out[host] = ImportedRobotsTxt(data, exp_ms)

    def _visited_rows(self, rows: list[tuple[Any, ...]], table: TableReport) -> None:
        valid, fresh = self._seen_urls(rows, table, frontier=False)
        dataset = self.dataset_id
        add = self.lake.add
        publish, publish_visited = self._publish, self._publish_visited
        extras_of, fields_of = self._extras_cache, self._fields_cache
        migrated = 0
        for (canon, _key, _partition, row), is_new in zip(valid, fresh, strict=True):
            _, crawled, status_value, content_path, redirected = row
            if is_new:
                migrated += 1
            try:
                ts_ms = epoch_ms(crawled)
            except ValueError:
                table.details["bad_crawled_timestamp"] += 1
                ts_ms = None
            try:
                status = http_status(status_value)
            except ValueError:
                table.details["bad_http_status_code"] += 1
                status = None
            extras = extras_of.get(status, "")
            if extras == "":  # the lake's JSON and the record's map, once per status
                extras = extras_of[status] = None if status is None else json.dumps({"status": status})
                fields_of[status] = {} if status is None else {"status": str(status)}
            add(dataset, canon.url, canon.domain, ts_ms, extras)
            if publish_visited is not None:
                publish_visited(dataset, canon.url, canon.domain, ts_ms, status)
            elif publish is not None:
                publish(dataset, canon.url, canon.domain, ts_ms, fields_of[status])
            if content_path is not None:
                self._import_content(canon.url, content_path, status, ts_ms, table)
            if redirected is not None and str(redirected).strip():
                self._redirect_row(canon, str(redirected).strip(), status, ts_ms, table)
        _count(table, "migrated", migrated)
        _count(table, "duplicate", len(valid) - migrated)

    def _redirect_row(
        self, canon: CanonicalUrl, target_text: str, status: int | None, ts_ms: int | None, table: TableReport
    ) -> None:
        """``redirected_to_url`` -> a hop of the alias map (ADR 024): a lake row of the redirects
        dataset, published like the visited row so replay rebuilds it. The row's status is the
        hop's when it is a 3xx (otherwise the source does not say which redirect it was)."""
        try:
            target = canonicalize(target_text, canon.url)  # a relative value resolves against the URL
        except InvalidUrl:
            table.details["redirect_invalid"] += 1
            return
        if target.url == canon.url:
            table.details["redirect_to_itself"] += 1
            return
        hop_status = status if status is not None and 300 <= status <= 399 else None
        fields = redirect_extras(target.url, hop_status, target_text)
        self.lake.add(REDIRECTS_DATASET, canon.url, canon.domain, ts_ms, extras_json(fields))
        if self._publish is not None:
            self._publish(REDIRECTS_DATASET, canon.url, canon.domain, ts_ms, fields)
        table.details["redirect_mapped"] += 1

    def _frontier_rows(self, rows: list[tuple[Any, ...]], table: TableReport) -> None:
        valid, fresh = self._seen_urls(rows, table, frontier=True)
        by_partition: dict[int, list[FrontierEntry]] = defaultdict(list)
        max_depth = self.scheduler.max_depth
        already_seen = 0
        for (canon, key, sched_partition, row), is_new in zip(valid, fresh, strict=True):
            if not is_new:
                already_seen += 1
                continue
            _, depth_value, priority, added = row
            depth, fixed = frontier_depth(depth_value)
            if fixed:
                table.details["depth_fixed"] += 1
            if depth > max_depth:
                table.outcomes["too_deep"] += 1
                continue
            try:
                added_ms = epoch_ms(added) or 0
            except ValueError:
                table.details["bad_added_timestamp"] += 1
                added_ms = 0
            entry = FrontierEntry(canon.domain, canon.url, key, depth, added_ms, 0, priority_from_real(priority))
            by_partition[sched_partition].append(entry)
        _count(table, "already_seen", already_seen)
        for partition, entries in by_partition.items():
            self._pending_frontier[partition].extend(entries)

    def _enqueue_pending(self, table: TableReport) -> None:
        """Append the buffered frontier entries, one append per domain (a domain's file is opened,
        and its Redis state written, once per checkpoint rather than once per batch)."""
        pending, self._pending_frontier = self._pending_frontier, defaultdict(list)
        if not pending:
            return
        self._note_frontier_domains((p, e.domain) for p, entries in pending.items() for e in entries)
        for partition, entries in sorted(pending.items()):
            accepted = self.scheduler.enqueue(partition, entries)
            table.outcomes["queued"] += accepted
            if accepted < len(entries):
                table.outcomes["over_budget"] += len(entries) - accepted

    # -- shared steps -----------------------------------------------------------------------------

    def _canonical_url(self, value: Any, table: TableReport) -> CanonicalUrl | None:
        try:
            return canonicalize(value)
        except InvalidUrl as exc:
            table.invalid(_invalid_url_reason(value, exc))
            return None

    def _canonical_host(self, value: Any, table: TableReport) -> CanonicalUrl | None:
        if not isinstance(value, str) or not value.strip():
            table.invalid("missing" if value is None or isinstance(value, str) else "not_text")
            return None
        text = value.strip()
        return self._canonical_url(text if "://" in text else f"http://{text}/", table)

    def _dedupe_partition(self, domain: str) -> int:
        return partition_for(domain, self.dedupe_partitions)

    def _bloom(self, domain: str) -> Any:
        partition = self._dedupe_partition(domain)
        if partition not in self._offsets:
            self._offsets[partition] = self.deduper.load_partition(partition)
        return self.deduper.filter(partition)

    def _seen_urls(
        self, rows: list[tuple[Any, ...]], table: TableReport, *, frontier: bool
    ) -> tuple[list[tuple[CanonicalUrl, int, int, tuple[Any, ...]]], list[bool]]:
        """Canonicalize each row's first column (the URL; invalid ones are counted and dropped)
        and add it to its partition's filter. Returns (canonical URL, url_key, scheduler
        partition, row) of each valid row, and whether it was new. ``frontier``: a domain that
        cannot name a frontier file is invalid too (``domain``).

        One pass, no per-row helper calls: the key's checksum bits and both partitions are
        looked up once per domain (``_domain_facts``), the Bloom filter gets one batch per partition.
        """
        valid: list[tuple[CanonicalUrl, int, int, tuple[Any, ...]]] = []
        members: dict[int, list[tuple[int, str]]] = {}
        positions: dict[int, list[int]] = {}
        facts_of = self._domain_facts
        for row in rows:
            value = row[0]
            try:
                canon = canonicalize(value)
            except InvalidUrl as exc:
                table.invalid(_invalid_url_reason(value, exc))
                continue
            facts = facts_of.get(canon.domain)
            if facts is None:
                facts = self._learn_domain(canon.domain)
            high, dedupe_partition, sched_partition, fileable = facts
            if frontier and not fileable:
                table.invalid("domain")
                continue
            url = canon.url
            key = high | (fnv1a_64(url.encode("utf-8")) & KEY_HASH_MASK)  # == url_key(canon)
            batch = members.get(dedupe_partition)
            if batch is None:
                batch = members[dedupe_partition] = []
                positions[dedupe_partition] = []
            batch.append((key, url))
            positions[dedupe_partition].append(len(valid))
            valid.append((canon, key, sched_partition, row))
        fresh = [False] * len(valid)
        for partition, batch in members.items():
            if partition not in self._offsets:
                self._offsets[partition] = self.deduper.load_partition(partition)
            for i, is_new in zip(positions[partition], self.deduper.check_and_add(partition, batch), strict=True):
                fresh[i] = is_new
            self._dirty.add(partition)
        return valid, fresh

    def _learn_domain(self, domain: str) -> tuple[int, int, int, bool]:
        """(url_key checksum bits, dedupe partition, scheduler partition, can name a frontier file)."""
        if len(self._domain_facts) >= _DOMAIN_FACTS_MAX:
            self._domain_facts.clear()
        try:
            validate_domain(domain)
            fileable = True
        except InvalidDomain:
            fileable = False
        facts = (
            compose_key(domain_checksum(domain), 0),
            partition_for(domain, self.dedupe_partitions),
            partition_for(domain, self.scheduler_partitions),
            fileable,
        )
        self._domain_facts[domain] = facts
        return facts

    def _import_content(self, url: str, value: Any, status: int | None, ts_ms: int | None, table: TableReport) -> None:
        if not isinstance(value, str) or not value.strip():
            table.details["content_path_blank"] += 1
            return
        if self.content_root is None:
            table.details["content_no_root"] += 1
            return
        try:
            path = (self.content_root / value.strip()).resolve()
        except (OSError, ValueError):
            table.details["content_bad_path"] += 1
            return
        if not path.is_relative_to(self.content_root):
            table.details["content_outside_root"] += 1
            return
        try:
            size = path.stat().st_size
            if not path.is_file():
                table.details["content_not_a_file"] += 1
                return
            if size > self.max_body_bytes:
                table.details["content_too_large"] += 1
                return
            body = path.read_bytes()
        except FileNotFoundError:
            table.details["content_missing"] += 1
            return
        except (OSError, ValueError):
            table.details["content_unreadable"] += 1
            return
        if self._store is None:
            if self._open_store is None:
                table.details["content_no_store"] += 1
                return
            self._store = self._open_store()
        self._store.put(url, body, status=status, fetched_at_ms=ts_ms)
        table.details["content_imported"] += 1
