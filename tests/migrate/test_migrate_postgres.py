"""``crawlstream migrate postgres`` against a real PostgreSQL server loaded with the seed's schema,
real and generated URLs and hostile rows: every row counted, every piece of state where the crawl
reads it, idempotent, and resumable after a crash."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from migrate_support import (
    frontier_files,
    lake_rows,
    migrate_settings,
    redis_dump,
    report_json,
    run_migration,
    tree_digest,
)
from pg_support import HOSTILE_URLS, SeedCrawl, create_database, load_seed_crawl

from crawlstream.dedupe import Deduper
from crawlstream.devtools.localpg import LocalPostgres
from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.events import EventCodec, UrlRecord
from crawlstream.migrate import MigrationReport
from crawlstream.politeness import Controls, Scheduler
from crawlstream.redisconn import open_redis
from crawlstream.robots import MAX_ROBOTS_BYTES, ImportedRobots
from crawlstream.runtime import open_host
from crawlstream.settings import Settings
from crawlstream.store import open_store
from crawlstream.topics import IN_LAKE_HEADER, URLS_RECORDS
from crawlstream.urls import canonicalize, partition_for, url_key

N_ROWS = 100_000  # issue 18: ~100k generated rows plus real URLs and hostile values
DATASET = 5


@dataclass
class Migrated:
    dsn: str
    seed: SeedCrawl
    settings: Settings
    content_root: Path
    report: MigrationReport


@pytest.fixture(scope="module")
def migrated(postgres: LocalPostgres, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Migrated:
    create_database(postgres.dsn, "seed_main")
    dsn = postgres.dsn_for("seed_main")
    root = tmp_path_factory.mktemp("migrate")
    seed = load_seed_crawl(dsn, shared_data, root / "content", N_ROWS)
    settings = migrate_settings(root / "data")
    report = run_migration(settings, dsn, content_root=root / "content", dataset_id=DATASET)
    return Migrated(dsn, seed, settings, root / "content", report)


def source_rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def canonical_or_none(url: object) -> str | None:
    if not isinstance(url, str) or not url.strip():
        return None
    try:
        return canonicalize(url).url
    except InvalidUrl:
        return None


def test_every_row_is_counted_under_exactly_one_outcome(migrated: Migrated) -> None:
    tables = migrated.report.to_json()["tables"]
    for name, loaded in migrated.seed.rows.items():
        table = tables[name]
        assert table["rows"] == loaded, name
        assert sum(table["outcomes"].values()) == loaded, name
        assert sum(table["invalid_by_reason"].values()) == table["outcomes"].get("invalid", 0), name
        assert table["done"]


def test_invalid_urls_are_counted_by_reason(migrated: Migrated) -> None:
    expected = Counter(HOSTILE_URLS.values())
    for name in ("visited_urls", "frontier"):
        reasons = migrated.report.tables[name].invalid_by_reason
        for reason, n in expected.items():
            assert reasons[reason] >= n, (name, reason, dict(reasons))
    meta = migrated.report.tables["domain_metadata"].invalid_by_reason
    assert meta["missing"] >= 2 and meta["host"] >= 1  # NULL and '' domains, 'exa mple.com'


def test_every_visited_and_frontier_url_is_seen_in_its_partition(migrated: Migrated) -> None:
    settings = migrated.settings
    deduper = Deduper.from_settings(settings)
    urls = [u for (u,) in source_rows(migrated.dsn, "SELECT url FROM visited_urls UNION ALL SELECT url FROM frontier")]
    valid = {c for c in map(canonical_or_none, urls) if c is not None}
    assert len(valid) > N_ROWS * 0.8
    loaded: set[int] = set()
    for url in valid:
        canon = canonicalize(url)
        partition = partition_for(canon.domain, settings.bus.partitions)
        if partition not in loaded:
            deduper.load_partition(partition)
            loaded.add(partition)
        assert deduper.filter(partition).contains(url_key(canon), canon.url), url


def test_frontier_files_hold_each_new_url_once_by_priority_then_age(migrated: Migrated) -> None:
    visited = {canonical_or_none(u) for (u,) in source_rows(migrated.dsn, "SELECT url FROM visited_urls")}
    rows = source_rows(migrated.dsn, "SELECT url, priority, added_timestamp, depth FROM frontier")
    expected: dict[str, tuple[float, float]] = {}
    for url, priority, added, depth in rows:
        canon = canonical_or_none(url)
        if canon is None or canon in visited or (depth or 0) > 20:
            continue
        order = -priority if priority is not None else math.inf  # NaN stays NaN: sorted last
        key = (order, added if added is not None else math.inf)
        expected[canon] = min(expected.get(canon, key), key)
    files = frontier_files(migrated.settings.data_dir)
    stored = [url for entries in files.values() for url, _, _ in entries]
    assert len(stored) == len(set(stored))  # no URL twice
    assert set(stored) == set(expected)
    queued = migrated.report.tables["frontier"].outcomes
    assert queued["queued"] == len(stored)
    for domain, entries in files.items():
        keys = [expected[url] for url, _, _ in entries]
        finite = [k for k in keys if not math.isnan(k[0])]
        assert finite == sorted(finite), domain  # highest priority first, then oldest first


def test_frontier_depth_is_kept_and_hostile_depths_are_fixed(migrated: Migrated) -> None:
    files = frontier_files(migrated.settings.data_dir)
    depths = {url: depth for entries in files.values() for url, depth, _ in entries}
    assert depths["http://site2-example.org/negative"] == 0
    assert "http://site2-example.org/deep" not in depths  # clamped to 65535, deeper than max_depth
    assert migrated.report.tables["frontier"].outcomes["too_deep"] >= 1
    assert migrated.report.tables["frontier"].details["depth_fixed"] >= 2
    assert set(depths.values()) <= {0, 1, 2, 3}


def test_visited_urls_are_a_lake_dataset_with_status_and_time(migrated: Migrated) -> None:
    rows = source_rows(migrated.dsn, "SELECT url, crawled_timestamp, http_status_code FROM visited_urls")
    expected: dict[str, set[tuple[int | None, str | None]]] = {}
    for url, crawled, status in rows:
        canon = canonical_or_none(url)
        if canon is not None:
            ts = crawled * 1000 if crawled is not None and crawled >= 0 else None
            extras = f'{{"status": {status}}}' if status is not None and 0 <= status <= 999 else None
            expected.setdefault(canon, set()).add((ts, extras))
    lake = lake_rows(migrated.settings.data_dir, DATASET)
    assert set(lake) == set(expected)
    for url, candidates in expected.items():
        assert lake[url] in candidates, url  # a URL visited twice keeps one of its visits


def test_each_visited_row_is_published_to_urls_records_as_in_the_lake(migrated: Migrated) -> None:
    """Every valid visited row (duplicates too) is one ``urls.records`` message marked as in the
    lake, with the row's time and ``{"status": "N"}``: what a replay rebuilds the dataset from."""
    rows = source_rows(migrated.dsn, "SELECT url, crawled_timestamp, http_status_code FROM visited_urls")
    expected: Counter[tuple[str, int | None, tuple[tuple[str, str], ...]]] = Counter()
    for url, crawled, status in rows:
        canon = canonical_or_none(url)
        if canon is not None:
            ts = crawled * 1000 if crawled is not None and crawled >= 0 else None
            fields = (("status", str(status)),) if status is not None and 0 <= status <= 999 else ()
            expected[(canon, ts, fields)] += 1
    codec = EventCodec.from_settings(migrated.settings)
    with open_host(migrated.settings) as host:
        consumer = host.bus.consumer("test-visited-records")
        consumer.subscribe([URLS_RECORDS])
        published: Counter[tuple[str, int | None, tuple[tuple[str, str], ...]]] = Counter()
        while batch := consumer.consume(5000, 0.5):
            for message in batch:
                record = codec.decode(message.value)
                assert isinstance(record, UrlRecord) and dict(message.headers)[IN_LAKE_HEADER] == b"1"
                assert message.key == record.domain.encode() and record.domain == canonicalize(record.url).domain
                if record.dataset_id == DATASET:
                    published[(record.url, record.ts_ms, tuple(sorted(record.extras.items())))] += 1
        consumer.close()
    assert published == expected
    outcomes = migrated.report.tables["visited_urls"].outcomes
    assert sum(published.values()) == outcomes["migrated"] + outcomes["duplicate"]


def test_stored_bodies_are_imported_and_missing_or_escaping_paths_counted(migrated: Migrated) -> None:
    rows = source_rows(
        migrated.dsn, "SELECT url, content_storage_path FROM visited_urls WHERE content_storage_path IS NOT NULL"
    )
    details = migrated.report.tables["visited_urls"].details
    with open_store(migrated.settings) as store:
        imported = 0
        for url, path in rows:
            canon = canonical_or_none(url)
            file = migrated.content_root / path
            if canon is None or ".." in path or path.startswith("/") or not file.exists():
                continue
            assert store.get(canon) == file.read_bytes()
            imported += 1
    assert imported >= migrated.seed.content_files * 0.8
    assert details["content_imported"] >= imported
    assert details["content_missing"] >= migrated.seed.content_missing * 0.8
    assert details["content_outside_root"] == migrated.seed.content_outside
    assert details["redirect_mapped"] >= migrated.seed.redirects * 0.8


def test_robots_bodies_exclusions_and_next_fetch_times_reach_the_scheduler_state(migrated: Migrated) -> None:
    with open_redis(None, migrated.settings.data_dir) as handle:
        client = handle.client
        robots = ImportedRobots(lambda: client)
        for host, expires_s in migrated.seed.robots_future.items():
            found = robots.get(host)
            assert found is not None and found.expires_at_ms == expires_s * 1000, host
        big = robots.get("site8-example.com")
        assert big is not None and len(big.body) == MAX_ROBOTS_BYTES
        assert robots.get("site12-example.org") is None  # no expiry: already expired
        assert set(Controls(client).excluded()) == migrated.seed.excluded_domains
        scheduler = Scheduler.from_settings(migrated.settings, client)
        state = scheduler.domain_state(partition_for("site5-example.com", 4), "site5-example.com")
        assert state.next_fetch_at_ms == (1_800_000_000 + 5) * 1000
    details = migrated.report.tables["domain_metadata"].details
    assert details["robots_truncated"] == migrated.seed.robots_truncated
    assert details["robots_expired"] >= 1 and details["excluded_host_widened_to_domain"] == 1


def test_a_second_run_changes_nothing(migrated: Migrated) -> None:
    data_dir = migrated.settings.data_dir
    files, keys = tree_digest(data_dir), redis_dump(data_dir)
    again = run_migration(migrated.settings, migrated.dsn, content_root=migrated.content_root, dataset_id=DATASET)
    assert again.already_complete
    assert report_json(again) == report_json(migrated.report)
    assert tree_digest(data_dir) == files
    assert redis_dump(data_dir) == keys


def test_a_restart_adds_no_frontier_url_twice(migrated: Migrated, tmp_path: Path) -> None:
    """--restart reads every row again: the Bloom filter says every URL was seen."""
    before = frontier_files(migrated.settings.data_dir)
    settings = migrated.settings
    again = run_migration(settings, migrated.dsn, dataset_id=DATASET, restart=True, publish=False)
    assert again.tables["frontier"].outcomes["queued"] == 0
    assert frontier_files(settings.data_dir) == before


class Crash(Exception):
    pass


def crash_at(table: str, batch: int):  # type: ignore[no-untyped-def]
    def on_batch(name: str, n: int) -> None:
        if name == table and n == batch:
            raise Crash(f"{name} batch {n}")

    return on_batch


def test_a_crash_mid_frontier_resumes_to_the_same_state_as_one_run(
    migrated: Migrated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside a checkpoint, after the frontier appends and before the Bloom snapshots: the
    journal marks the appended URLs seen, so the resumed run appends nothing twice and ends with
    the uninterrupted run's files and bits."""
    settings = migrate_settings(tmp_path / "data")
    kwargs = {"content_root": migrated.content_root, "dataset_id": DATASET, "batch_rows": 300, "checkpoint_rows": 700}
    phase = {"table": ""}
    snapshot = Deduper.flush_partition

    def crash_in_frontier_checkpoint(self: Deduper, partition: int, offset: int | None) -> Path:
        if phase["table"] == "frontier":
            raise Crash("killed between the frontier appends and the Bloom snapshots")
        return snapshot(self, partition, offset)

    def track(name: str, n: int) -> None:
        phase["table"] = name if n >= 3 else ""  # the second checkpoint of the frontier table

    monkeypatch.setattr(Deduper, "flush_partition", crash_in_frontier_checkpoint)
    with pytest.raises(Crash):
        run_migration(settings, migrated.dsn, on_batch=track, **kwargs)
    monkeypatch.setattr(Deduper, "flush_partition", snapshot)
    assert frontier_files(settings.data_dir)  # some appends are there, beyond the last checkpoint
    resumed = run_migration(settings, migrated.dsn, **kwargs)
    assert resumed.resumed and resumed.journal_recovered_urls > 0
    assert frontier_files(settings.data_dir) == frontier_files(migrated.settings.data_dir)
    assert set(lake_rows(settings.data_dir, DATASET)) == set(lake_rows(migrated.settings.data_dir, DATASET))
    for partition in range(4):
        ours, theirs = Deduper.from_settings(settings), Deduper.from_settings(migrated.settings)
        ours.load_partition(partition)
        theirs.load_partition(partition)
        assert ours.filter(partition).bits == theirs.filter(partition).bits

    def state(data_dir: Path) -> dict[str, object]:  # the change counter counts calls, not state
        dump = redis_dump(data_dir)
        return {k: v for k, v in dump.items() if not k.startswith("cs:sched:") and k != "cs:ctl:version"}

    assert state(settings.data_dir) == state(migrated.settings.data_dir)


def test_a_resume_refuses_a_table_rewritten_since_the_checkpoint(
    database: str, shared_data: Path, tmp_path: Path
) -> None:
    load_seed_crawl(database, shared_data, tmp_path / "content", 2000)
    settings = migrate_settings(tmp_path / "data")
    with pytest.raises(Crash):
        run_migration(settings, database, batch_rows=100, checkpoint_rows=200, on_batch=crash_at("visited_urls", 5))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("VACUUM FULL visited_urls")
    with pytest.raises(ConfigError, match="--restart"):
        run_migration(settings, database)
    assert run_migration(settings, database, restart=True).tables["visited_urls"].done
