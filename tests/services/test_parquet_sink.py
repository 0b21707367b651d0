"""parquet-sink: content.stored + urls.records -> lake files, staged durably, replay-safe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from crawlstream.events import ContentLocation, ContentStored, UrlRecord
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.lake._staging import StagingLog
from crawlstream.lake.service import build
from crawlstream.settings import Settings
from crawlstream.topics import CONTENT_STORED, URLS_RECORDS, dlq_topic
from crawlstream.urls import canonicalize, url_key
from tests.services._support import drain, host_for, read_topic

pytestmark = pytest.mark.timeout(60)

CRAWL_DATASET = 1
EXTERNAL_DATASET = 42
RECORD_URLS = [f"HTTP://Shop.Example.COM/item/{i}?b=2&a=1#frag" for i in range(30)] + [
    f"https://news.example.net/{i}" for i in range(20)
]
CRAWLED_URLS = [f"https://blog.example.org/post/{i}" for i in range(25)]


def stored(url: str) -> ContentStored:
    canon = canonicalize(url)
    return ContentStored(
        url=canon.url, url_key=url_key(canon), domain=canon.domain, content_hash="ab" * 16,
        location=ContentLocation("hot/0000000001.seg", 0, 100, 0, "hot"), size_bytes=1000, stored_bytes=100,
        status=200, fetched_at_ms=1_700_000_000_000, content_type="text/html", title="T",
    )


def send_events(settings: Settings, *, invalid: bool = False) -> None:
    with host_for(settings) as host:
        out = host.event_producer()
        for u in CRAWLED_URLS:
            out.send(CONTENT_STORED, stored(u))
        for u in RECORD_URLS:
            out.send(URLS_RECORDS, UrlRecord(dataset_id=EXTERNAL_DATASET, url=u, ts_ms=1_600_000_000_000,
                                             extras={"src": "list"}))
        if invalid:
            out.send(URLS_RECORDS, UrlRecord(dataset_id=EXTERNAL_DATASET, url="http://exa mple.com:99999/x",
                                             domain="example.com"))
        out.flush()


def run_sink(settings: Settings, *, instance: str = "sink-0") -> int:
    with host_for(settings) as host:
        service = build(host, instance=instance)
        try:
            return drain(service.loop)
        finally:
            service.close()


def lake_count(root: Path, where: str = "true") -> int:
    sql = (f"select count(*) from read_parquet('{root}/urls/**/*.parquet', hive_partitioning=true) "
           f"where {where}")
    return int(duckdb.sql(sql).fetchall()[0][0])


def served(root: Path, *, build: bool = True) -> dict[tuple[str, int], tuple[int, list[str]]]:
    """(domain, dataset) -> (count, every URL) as the index serves them (built first when ``build``)."""
    if build:
        IndexBuilder(root).build()
    reader = IndexReader(root)
    try:
        out = {}
        with reader.pin() as idx:
            for domain in ("example.com", "example.net", "example.org"):
                for dc in idx.datasets_for_domain(domain) or []:
                    page = idx.urls(domain, dc.dataset_id, 0, 1000)
                    assert page is not None
                    out[(domain, dc.dataset_id)] = (dc.url_count, [i.url for i in page.items])
        return out
    finally:
        reader.close()


EXPECTED_SERVED = {
    ("example.com", EXTERNAL_DATASET): (30, sorted(canonicalize(u).url for u in RECORD_URLS[:30])),
    ("example.net", EXTERNAL_DATASET): (20, sorted(canonicalize(u).url for u in RECORD_URLS[30:])),
    ("example.org", CRAWL_DATASET): (25, sorted(CRAWLED_URLS)),
}


def test_events_become_lake_rows_readable_by_duckdb(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    send_events(settings)
    assert run_sink(settings) == len(CRAWLED_URLS) + len(RECORD_URLS)
    root = settings.data_dir
    assert lake_count(root) == 75
    assert lake_count(root, f"dataset_id = {CRAWL_DATASET} and domain = 'example.org'") == 25
    assert lake_count(root, "host_prefix || domain = 'shop.example.com' and path_query like '/item/%?a=1&b=2'") == 30
    extras = duckdb.sql(
        f"select distinct extras from read_parquet('{root}/urls/**/*.parquet', hive_partitioning=true) "
        f"where dataset_id = {CRAWL_DATASET}"
    ).fetchall()
    assert extras == [('{"content_hash":"' + "ab" * 16 + '","content_type":"text/html","status":200,"title":"T"}',)]
    assert served(root) == EXPECTED_SERVED


def test_replaying_events_does_not_change_what_the_index_serves(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    send_events(settings)
    run_sink(settings)
    first = served(settings.data_dir)
    send_events(settings)  # the same events again, as a producer retry or a topic replay would
    run_sink(settings)
    assert lake_count(settings.data_dir) == 150, "the replay is in the lake twice..."
    assert served(settings.data_dir) == first == EXPECTED_SERVED, "...but served once"


def test_invalid_record_url_goes_to_dlq(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    send_events(settings, invalid=True)
    run_sink(settings)
    with host_for(settings) as host:
        [dead] = read_topic(host, dlq_topic(URLS_RECORDS), 1)
    assert dict(dead.headers)["error_type"] == b"InvalidUrl"
    assert lake_count(settings.data_dir) == 75


def test_rows_are_published_in_bulk_not_per_batch(make_settings: Callable[..., Settings]) -> None:
    """Below the flush thresholds, batches only reach the staging log; the flush writes one file per partition."""
    settings = make_settings(CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S="3600")
    send_events(settings)
    with host_for(settings) as host:
        service = build(host, instance="sink-0")
        service.loop._batch_size = 10  # many small batches
        drain(service.loop)
        assert service.handler.files_published == 0 and service.staging.rows == 75
        assert not (settings.data_dir / "urls").exists()
        service.close()
    files = list((settings.data_dir / "urls").rglob("*.parquet"))
    partitions = {p.parent for p in files}
    assert len(files) == len(partitions) and lake_count(settings.data_dir) == 75


def test_crash_before_commit_loses_nothing(make_settings: Callable[..., Settings]) -> None:
    """Killed after staging, before the commit and before any lake file: reopen serves every row."""
    settings = make_settings(CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S="3600")
    send_events(settings)
    with host_for(settings) as host:
        service = build(host, instance="sink-0")
        service.loop._consumer.commit = lambda offsets=None: None  # type: ignore[method-assign]
        drain(service.loop)
        # the crash: no close(), so no flush; the process's locks and files just go away
        service.staging.close()
        service.loop.close()
    assert not (settings.data_dir / "urls").exists()
    run_sink(settings)  # recovers the staging log, then re-consumes the uncommitted batch
    assert served(settings.data_dir) == EXPECTED_SERVED


def test_staging_of_a_vanished_instance_is_adopted(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S="3600")
    send_events(settings)
    with host_for(settings) as host:
        service = build(host, instance="pod-a")
        drain(service.loop)  # committed, staged, not published
        service.staging.close()
        service.loop.close()
    run_sink(settings, instance="pod-b")  # nothing left on the bus; pod-a never returns
    assert served(settings.data_dir) == EXPECTED_SERVED


def test_two_members_on_one_host_each_stage_apart_and_tag_their_files(make_settings: Callable[..., Settings]) -> None:
    """A second member whose host name is taken stages in ``<name>.2`` (it used to retry forever
    on the locked directory); both join the group and the lake holds every row once."""
    settings = make_settings()
    send_events(settings)
    with host_for(settings) as host:
        first = build(host, instance="node")
        second = build(host, instance="node")
        try:
            assert (first.staging.directory.name, second.staging.directory.name) == ("node", "node.2")
            drain(first.loop)
            drain(second.loop)
        finally:
            first.close()
            second.close()
    names = [f.name for f in (settings.data_dir / "urls").rglob("*.parquet")]
    assert names and all("-node-" in n or "-node.2-" in n for n in names), names
    assert served(settings.data_dir) == EXPECTED_SERVED


def test_a_live_member_adopts_a_dead_members_staging_after_its_next_publish(
    make_settings: Callable[..., Settings],
) -> None:
    """Rows a member staged and committed are published by a live member that never restarts:
    at its next publish it finds the dead member's directory unlocked and publishes its rows."""
    settings = make_settings(CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S="3600")
    send_events(settings)
    with host_for(settings) as host:
        live = build(host, instance="pod-b")  # running before pod-a dies; holds no partition's rows yet
        dead = build(host, instance="pod-a")
        drain(dead.loop)  # consumed and committed everything, staged, published nothing
        assert dead.staging.rows == 75
        dead.staging.close()  # the kill: its lock goes with the process, its rows stay on disk
        dead.loop.close()
        assert not (settings.data_dir / "urls").exists()
        live.handler.flush()  # its next publish (by size or age in service)
        live.close()
    assert served(settings.data_dir) == EXPECTED_SERVED
    staged = settings.data_dir / "parquet-sink" / "staging" / "pod-a" / "rows.log"
    assert staged.stat().st_size == 0, "adopted rows are cleared once published"


def test_staging_log_truncates_a_torn_tail(tmp_path: Path) -> None:
    log = StagingLog(tmp_path / "s")
    log.append([(1, "https://a.example/", "a.example", None, None)])
    log.close()
    with open(tmp_path / "s" / "rows.log", "ab") as fh:
        fh.write(b"\x00\x00\x01\x00garbage")  # a batch cut short by a crash
    log = StagingLog(tmp_path / "s")
    assert log.replay() == [(1, "https://a.example/", "a.example", None, None)]
    log.append([(2, "https://b.example/", "b.example", 7, "{}")])
    assert [r[0] for r in log.replay()] == [1, 2]
    with pytest.raises(Exception, match="locked by another"):
        StagingLog(tmp_path / "s")
    log.close()


def test_records_ingest_already_wrote_to_the_lake_are_skipped_live(make_settings: Callable[..., Settings]) -> None:
    """`crawlstream ingest` writes its rows to the lake itself and marks their urls.records copies:
    the live sink must not write them twice (replay, skip_in_lake=False, does write them)."""
    from crawlstream.topics import IN_LAKE_HEADER

    settings = make_settings()
    with host_for(settings) as host:
        out = host.event_producer()
        for i in range(10):
            out.send(URLS_RECORDS, UrlRecord(EXTERNAL_DATASET, f"https://in-lake.example.com/{i}"),
                     headers=[(IN_LAKE_HEADER, b"1")])
        out.send(URLS_RECORDS, UrlRecord(EXTERNAL_DATASET, "https://external.example.com/"))
        out.flush()
    assert run_sink(settings) == 11
    assert lake_count(settings.data_dir) == 1, "only the unmarked record"


def test_a_page_that_asked_noindex_stays_out_of_the_lake(make_settings: Callable[..., Settings]) -> None:
    """Stored (content.stored says so) but not a row: the index never lists it; replay agrees."""
    settings = make_settings()
    with host_for(settings) as host:
        out = host.event_producer()
        out.send(CONTENT_STORED, stored("https://blog.example.org/kept"))
        hidden = dataclasses.replace(stored("https://blog.example.org/hidden"), robots_directives={"noindex": "meta"})
        out.send(CONTENT_STORED, hidden)
        nofollow = dataclasses.replace(
            stored("https://blog.example.org/nofollow"), robots_directives={"nofollow": "x-robots-tag"}
        )
        out.send(CONTENT_STORED, nofollow)
        out.flush()
    assert run_sink(settings) == 3
    assert lake_count(settings.data_dir) == 2
    assert lake_count(settings.data_dir, "path_query = '/hidden'") == 0
