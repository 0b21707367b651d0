"""bucket-compressor: fetch.results -> content store -> content.stored, at least once."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from crawlstream.bus import Message
from crawlstream.errors import BadDataError
from crawlstream.events import ContentStored, EventCodec, FetchResult
from crawlstream.settings import Settings
from crawlstream.status import read_store_stats
from crawlstream.store import Location, ShardedStore, open_store
from crawlstream.store.service import CompressHandler, build, extract_title
from crawlstream.topics import CONTENT_STORED, FETCH_RESULTS, dlq_topic
from crawlstream.urls import canonicalize, domain_checksum, url_key
from tests.services._support import drain, host_for, read_topic

pytestmark = pytest.mark.timeout(60)

_zstd = zstandard.ZstdCompressor(level=3)


def fetch_result(url: str, body: bytes, *, content_type: str | None = "text/html; charset=utf-8",
                 status: int = 200, outcome: str = "ok", truncated: bool = False) -> FetchResult:
    canon = canonicalize(url)
    return FetchResult(
        url=canon.url, url_key=url_key(canon), domain=canon.domain, depth=0, status=status, outcome=outcome,
        fetched_at_ms=1_700_000_000_000, elapsed_ms=12, attempt=0, content_type=content_type,
        body_zstd=_zstd.compress(body) if body else b"", body_size_bytes=len(body), truncated=truncated,
        dataset_id=7,
    )


def send_results(settings: Settings, results: list[FetchResult]) -> None:
    with host_for(settings) as host:
        out = host.event_producer()
        for r in results:
            out.send(FETCH_RESULTS, r)
        out.flush()


def stored_events(settings: Settings, expected: int) -> list[ContentStored]:
    with host_for(settings) as host:
        codec: EventCodec = host.codec
        return [codec.decode(m.value, ContentStored) for m in read_topic(host, CONTENT_STORED, expected)]


def segment_bytes(settings: Settings) -> int:
    return sum(p.stat().st_size for p in (settings.data_dir / "store").rglob("*.seg"))


def _index_changes(settings: Settings) -> tuple[int, int]:
    """(rows, last sequence number) of every shard's index: what a put that changes anything moves."""
    rows = seq = 0
    for path in (settings.data_dir / "store").rglob("index.sqlite"):
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows += db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            seq += db.execute("SELECT COALESCE(MAX(value), 0) FROM meta WHERE key = 'seq'").fetchone()[0]
    return rows, seq


def run_service(settings: Settings) -> int:
    with host_for(settings) as host:
        service = build(host)
        try:
            return drain(service.loop)
        finally:
            service.close()


def test_closing_saves_the_store_numbers_for_the_status_page(
    make_settings: Callable[..., Settings], html_pages: list[tuple[str, bytes]]
) -> None:
    settings = make_settings()
    send_results(settings, [fetch_result(url, html) for url, html in html_pages])
    run_service(settings)
    saved = read_store_stats(settings.data_dir)
    assert saved is not None
    assert saved["urls"] == len(html_pages)
    assert saved["raw_bytes"] == sum(len(html) for _, html in html_pages)


def test_real_pages_are_stored_and_announced_byte_identical(
    make_settings: Callable[..., Settings], html_pages: list[tuple[str, bytes]]
) -> None:
    settings = make_settings()
    send_results(settings, [fetch_result(url, html) for url, html in html_pages])
    assert run_service(settings) == len(html_pages)

    events = stored_events(settings, len(html_pages))
    assert sorted(e.url for e in events) == sorted(canonicalize(u).url for u, _ in html_pages)
    bodies = {canonicalize(u).url: html for u, html in html_pages}
    with open_store(settings) as store:
        for e in events:
            loc = Location(e.location.segment, e.location.offset, e.location.length, e.location.dict_id,
                           e.location.tier)
            assert e.location.shard == domain_checksum(e.domain)  # the event names the shard
            body = store.read_location(loc, shard=e.location.shard, expected_hash=bytes.fromhex(e.content_hash))
            assert body == bodies[e.url]
            assert e.size_bytes == len(body) and e.stored_bytes == e.location.length
            assert (e.status, e.dataset_id, e.url_key) == (200, 7, url_key(e.url))
    titled = [e for e in events if e.title]
    assert len(titled) >= len(events) - 1, "real article pages carry a <title>"
    for e in titled:
        assert e.title == extract_title(bodies[e.url], e.content_type)


def test_binary_body_is_stored_without_title(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    blob = os.urandom(3000) + b"<title>not html</title>"
    binary = fetch_result("https://files.example.org/a.bin", blob, content_type="application/octet-stream")
    send_results(settings, [binary])
    run_service(settings)
    [event] = stored_events(settings, 1)
    assert event.title is None and event.content_type == "application/octet-stream"
    with open_store(settings) as store:
        assert store.get(event.url) == blob


def test_only_successful_fetches_with_a_body_are_stored(make_settings: Callable[..., Settings]) -> None:
    """Error pages would replace a good stored copy; failures have nothing to store."""
    settings = make_settings()
    send_results(settings, [
        fetch_result("https://a.example.org/404", b"<html>gone</html>", status=404, outcome="http_error"),
        fetch_result("https://a.example.org/t", b"", status=0, outcome="timeout"),
        fetch_result("https://a.example.org/ok", b"<html><head><title> Hi\n there </title></head></html>"),
    ])
    run_service(settings)
    events = stored_events(settings, 1)
    assert [(e.url, e.title) for e in events] == [("https://a.example.org/ok", "Hi there")]


def test_replayed_batch_is_not_stored_twice(
    make_settings: Callable[..., Settings], html_pages: list[tuple[str, bytes]]
) -> None:
    """A crash after storing but before the commit replays the batch: the store dedupes."""
    settings = make_settings()
    send_results(settings, [fetch_result(url, html) for url, html in html_pages])
    with host_for(settings) as host:
        service = build(host)
        service.loop._consumer.commit = lambda offsets=None: None  # type: ignore[method-assign]  # the crash
        assert drain(service.loop) == len(html_pages)
        service.close()
    size_after_first = segment_bytes(settings)
    index_after_first = _index_changes(settings)

    assert run_service(settings) == len(html_pages), "the uncommitted batch is delivered again"
    assert segment_bytes(settings) == size_after_first
    assert _index_changes(settings) == index_after_first
    events = stored_events(settings, 2 * len(html_pages))
    assert len(events) == 2 * len(html_pages)  # announced twice: sinks are idempotent
    assert len({(e.url, e.content_hash, e.location) for e in events}) == len(html_pages)
    with open_store(settings) as store:
        assert len(store) == len(html_pages)


def test_corrupt_fetch_result_goes_to_dlq(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(CRAWLSTREAM_FETCH_MAX_BODY_BYTES="1000")
    good = fetch_result("https://b.example.org/", b"<html>fine</html>")
    too_big = fetch_result("https://b.example.org/big", b"x" * 1001)
    with host_for(settings) as host:
        raw = host.bus.producer()
        raw.produce(FETCH_RESULTS, b"\x00\x00\x00\x00\x01not avro at all", partition=0, key=b"b.example.org")
        raw.flush()
        out = host.event_producer()
        out.send(FETCH_RESULTS, good)
        out.send(FETCH_RESULTS, too_big)
        out.flush()
    run_service(settings)
    with host_for(settings) as host:
        dead = read_topic(host, dlq_topic(FETCH_RESULTS), 2)
        errors = sorted(dict(m.headers)["error_type"].decode() for m in dead)
        assert errors == ["BadDataError", "EventDecodeError"]
        assert any(m.value == b"\x00\x00\x00\x00\x01not avro at all" for m in dead)
    assert [e.url for e in stored_events(settings, 1)] == ["https://b.example.org/"]


def test_the_fetchers_frame_is_stored_as_is_and_a_two_frame_body_is_dead_lettered(
    make_settings: Callable[..., Settings], html_pages: list[tuple[str, bytes]]
) -> None:
    """One compression per page on the way in (issue 15): the store keeps the event's frame.
    A body_zstd of two frames (the contract says one) would be stored as more than the body."""
    settings = make_settings()
    (url, html), (other, more) = html_pages[0], html_pages[1]
    kept = fetch_result(url, html)
    doubled = dataclasses.replace(
        fetch_result(other, more + more), body_zstd=_zstd.compress(more) + _zstd.compress(more)
    )
    send_results(settings, [kept, doubled])
    run_service(settings)
    shard = settings.data_dir / "store" / "shards" / f"{domain_checksum(canonicalize(url).domain):03d}"
    assert kept.body_zstd in (shard / "segments" / "hot" / "0000000001.seg").read_bytes()
    with host_for(settings) as host:
        [dead] = read_topic(host, dlq_topic(FETCH_RESULTS), 1)
        assert dict(dead.headers)["error_type"] == b"BadDataError"
    assert [e.url for e in stored_events(settings, 1)] == [kept.url]
    with open_store(settings) as store:
        assert store.get(kept.url) == html and store.verify().ok


def test_title_is_read_from_the_head_with_the_declared_charset() -> None:
    page = "<html><head><meta charset='iso-8859-1'><title>Caf\xe9</title></head><body>x</body></html>"
    assert extract_title(page.encode("latin-1"), None) == "Café"
    assert extract_title(b"<html><body>no title</body></html>", "text/html") is None


def test_stored_location_survives_a_reopen(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    """content.stored is emitted only after store.sync(): a reopened store serves it."""
    settings = make_settings()
    send_results(settings, [fetch_result("https://c.example.org/p", b"<html>persist</html>")])
    run_service(settings)
    [event] = stored_events(settings, 1)
    with open_store(settings) as store:
        assert store.get(event.url) == b"<html>persist</html>"


_NOINDEX_PAGE = b'<html><head><meta name="robots" content="noindex"></head><body>x</body></html>'


def _directive_results() -> list[FetchResult]:
    pdf = fetch_result("http://a.com/h.pdf", b"%PDF-1.4", content_type="application/pdf")
    return [
        fetch_result("http://a.com/m", _NOINDEX_PAGE),
        dataclasses.replace(pdf, headers={"x-robots-tag": "otherbot: noarchive, crawlstream: nofollow, noindex"}),
        fetch_result("http://a.com/p", b"<html><body>plain</body></html>"),
    ]


def test_robots_directives_tag_the_page_and_travel_on_content_stored(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    send_results(settings, _directive_results())
    assert run_service(settings) == 3
    recorded = {e.url: dict(e.robots_directives) for e in stored_events(settings, 3)}
    assert recorded == {
        "http://a.com/m": {"noindex": "meta"},
        "http://a.com/h.pdf": {"noindex": "x-robots-tag", "nofollow": "x-robots-tag"},
        "http://a.com/p": {},
    }
    with open_store(settings) as store:
        assert {u: store.entry(u).tags for u in recorded} == {  # type: ignore[union-attr]
            "http://a.com/m": {"noindex"},
            "http://a.com/h.pdf": {"noindex", "nofollow"},
            "http://a.com/p": set(),
        }


def test_robots_directives_are_not_recorded_when_the_crawl_ignores_them(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(CRAWLSTREAM_CRAWL_OBEY_ROBOTS_DIRECTIVES="false")
    send_results(settings, _directive_results())
    assert run_service(settings) == 3
    assert all(not e.robots_directives for e in stored_events(settings, 3))


def test_two_members_close_at_once_without_opening_each_others_shards(
    make_settings: Callable[..., Settings],
) -> None:
    """Two members share fetch.results (issue 25): each writes the shards of its partitions. On
    close a member must not count the whole store (for the status page) by opening the shards
    the other holds: that waited store.shard_lock_wait_s on each while the other, closing too,
    waited on its own, so neither exited in time and neither saved its numbers."""
    import time

    settings = make_settings(CRAWLSTREAM_STORE_SHARD_LOCK_WAIT_S="10")
    pages = {f"https://site{i}.example/": f"<html><title>{i}</title>{'words ' * 40}</html>".encode() for i in range(16)}
    with host_for(settings) as host:
        members = [build(host), build(host)]
        try:
            # the embedded group splits the partitions between the two (a rebalance on each poll)
            for _ in range(10):
                assert sum(member.loop.run_once() for member in members) == 0
            owned = [member.handler._store.owned for member in members]  # type: ignore[attr-defined]
            assert all(owned) and owned[0].isdisjoint(owned[1])
            out = host.event_producer()
            for url, body in pages.items():
                out.send(FETCH_RESULTS, fetch_result(url, body))
            out.flush()
            stored = [0, 0]
            for _ in range(50):
                for i, member in enumerate(members):
                    stored[i] += member.loop.run_once()
                if sum(stored) == len(pages):
                    break
            assert all(stored) and sum(stored) == len(pages), stored
        finally:
            started = time.monotonic()
            for member in members:
                member.close()
            assert time.monotonic() - started < 5
    # neither held the whole store: no whole-store numbers for the status page (a partial count would mislead)
    assert read_store_stats(settings.data_dir) is None
    with open_store(settings) as store:
        for url, body in pages.items():
            assert store.get(url) == body


def test_the_service_runs_store_maintenance_on_its_own(
    make_settings: Callable[..., Settings], html_pages: list[tuple[str, bytes]]
) -> None:
    """A short interval and tier ages of 0: pages leave the hot tier without any command, while
    the loop goes on storing; closing stops the maintenance thread."""
    import threading
    import time

    settings = make_settings(
        CRAWLSTREAM_STORE_MAINTENANCE_INTERVAL_S="0.05",
        CRAWLSTREAM_STORE_WARM_AFTER_S="0",
        CRAWLSTREAM_STORE_COLD_AFTER_S="0",
        CRAWLSTREAM_STORE_ARCHIVE_AFTER_S="0",
        CRAWLSTREAM_STORE_COLD_LEVEL="3",
        CRAWLSTREAM_STORE_ARCHIVE_LEVEL="3",
    )
    send_results(settings, [fetch_result(url, html) for url, html in html_pages])
    before = {t.name for t in threading.enumerate()}
    with host_for(settings) as host:
        service = build(host)
        try:
            assert drain(service.loop) == len(html_pages)
            store = service.handler._store  # type: ignore[attr-defined]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if all(e.location.tier == "archive" for e in store.search()):
                    break
                time.sleep(0.05)
            tiers = {e.location.tier for e in store.search()}
            assert tiers == {"archive"}, tiers
            assert "store-maintenance" in {t.name for t in threading.enumerate()} - before
        finally:
            started = time.monotonic()
            service.close()
            assert time.monotonic() - started < 5
    assert "store-maintenance" not in {t.name for t in threading.enumerate()}
    bodies = {canonicalize(u).url: html for u, html in html_pages}
    with open_store(settings) as store:
        assert len(store) == len(html_pages)
        for url, body in bodies.items():
            assert store.get(url) == body
            assert store.entry(url).location.tier == "archive"  # type: ignore[union-attr]


def _many_domains(count: int) -> list[FetchResult]:
    return [
        fetch_result(f"https://www.site{i}.example/p/{j}", f"<html><title>{i}/{j}</title>{'w' * j}</html>".encode())
        for i in range(count)
        for j in range(2)
    ]


def _shards_on_disk(settings: Settings) -> set[int]:
    return {int(p.name) for p in (settings.data_dir / "store" / "shards").iterdir()}


def test_two_members_write_disjoint_shards_and_the_survivor_takes_the_others_over(
    make_settings: Callable[..., Settings],
) -> None:
    """Two members of the group split fetch.results: each writes only the shards of its partitions
    (c mod P == p). When one leaves, the other owns its partitions, opens its shards and writes them."""
    settings = make_settings()
    first_half, second_half = _many_domains(24), _many_domains(48)[48:]
    send_results(settings, first_half)
    with host_for(settings) as host:
        a, b = build(host), build(host)  # two consumers of the group, two stores (disjoint shards)
        for _ in range(60):  # both join, the group splits the partitions, both drain their share
            a.loop.run_once()
            b.loop.run_once()
        owned_a, owned_b = a.loop._handler._store.owned, b.loop._handler._store.owned
        assert owned_a and owned_b and not owned_a & owned_b and len(owned_a | owned_b) == 128
        written = _shards_on_disk(settings)
        expected = {domain_checksum(r.domain) for r in first_half}
        assert written == expected
        a.close()  # a leaves; b gets every partition on its next polls
        out = host.event_producer()
        for result in second_half:
            out.send(FETCH_RESULTS, result)
        out.flush()
        drain(b.loop)
        assert b.loop._handler._store.owned == frozenset(range(128))
        b.close()
    events = stored_events(settings, len(first_half) + len(second_half))
    assert {e.url for e in events} == {r.url for r in first_half + second_half}
    assert all(e.location.shard == domain_checksum(e.domain) for e in events)
    with open_store(settings) as store:
        assert len(store) == len(first_half) + len(second_half)
        assert all(store.get(r.url) for r in first_half + second_half) and store.verify().ok


def test_a_result_whose_shard_another_member_owns_is_bad_data_not_written(tmp_path: Path) -> None:
    """A producer that did not partition by the domain checksum: the member holding that partition
    does not own the page's shard, so the message is dead-lettered (BadDataError), never written."""
    result = fetch_result("https://www.misrouted.example/", b"<html>x</html>")
    mine = (domain_checksum(result.domain) + 1) % 128
    store = ShardedStore(tmp_path / "store", owned={mine})
    handler = CompressHandler(store, None, max_body_bytes=1 << 20)  # type: ignore[arg-type]  # sends nothing
    message = Message(FETCH_RESULTS, mine % 4, 17, result.domain.encode(), b"", ())
    with store, pytest.raises(BadDataError, match=r"fetch\.results\[\d\]@17 is not in the partition"):
        handler.handle(result, message)
    assert not (tmp_path / "store" / "shards").exists()
