"""The deduper records the raw form a URL was first seen in (ADR 024), on the real embedded bus.

A URL forwarded for the first time whose event carries a ``raw_url`` adds one row of the
raw-forms dataset to ``urls.records``; a URL seen canonical, seen again, replayed after a
restart, or a seed (recorded by its intake) adds none. The rows travel with the forwards
through the same producer, so the Bloom snapshot never covers a row still in a buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawlstream.bus import Message
from crawlstream.dedupe import Deduper, raw_form_record
from crawlstream.dedupe.service import DedupeHandler, build
from crawlstream.events import DiscoveredUrl, UrlRecord
from crawlstream.lake import RAW_FORMS_DATASET, extras_json, parse_raw_form
from crawlstream.runtime import Host, open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import URLS_DISCOVERED, URLS_FRONTIER, URLS_RECORDS
from crawlstream.urls import MAX_URL_LENGTH, canonicalize, partition_for, url_key
from tests.services._support import drain, read_topic

T0 = 1_764_000_000_000


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    def make(**env: str) -> Settings:
        base = {
            "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
            "CRAWLSTREAM_BUS_PARTITIONS": "2",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.05",
        }
        return load({**base, **env})

    return make


@pytest.fixture
def host(make_settings: Callable[..., Settings]) -> Iterator[Host]:
    with open_host(make_settings()) as h:
        yield h


def found(url: str, source: str = "link", raw: str | None = None, at: int = T0) -> DiscoveredUrl:
    """A ``urls.discovered`` event for ``url`` (canonical) as the link extractor sends it."""
    c = canonicalize(url)
    return DiscoveredUrl(c.url, c.domain, url_key(c), 1, at, source, "http://a.example/", raw_url=raw)


def sent_as_is(url: str, source: str = "dataset") -> DiscoveredUrl:
    """An outside producer's event: ``url`` as it wrote it, identity fields unchecked."""
    return DiscoveredUrl(url, "whatever", 0, 0, T0, source)


def run_deduper(host: Host, events: list[DiscoveredUrl]) -> None:
    out = host.event_producer()
    for event in events:
        out.send(URLS_DISCOVERED, event)
    out.flush()
    service = build(host)
    try:
        drain(service.loop)
    finally:
        service.close()


def records(host: Host, expected: int, group: str) -> list[UrlRecord]:
    got = [host.codec.decode(m.value) for m in read_topic(host, URLS_RECORDS, expected, group=group, timeout_s=2.0)]
    assert all(isinstance(r, UrlRecord) for r in got)
    return got


def row(url: str, raw: str, source: str, at: int = T0) -> UrlRecord:
    c = canonicalize(url)
    return UrlRecord(RAW_FORMS_DATASET, c.url, at, {"raw": raw, "source": source}, c.domain)


def test_each_url_first_seen_non_canonical_gets_one_row_with_its_first_form(host: Host) -> None:
    run_deduper(
        host,
        [
            found("http://a.example/x", raw="HTTP://A.EXAMPLE/x#top"),
            found("http://a.example/x", raw="http://a.example/x#other", at=T0 + 1),  # seen: no row
            found("http://a.example/plain"),  # first seen canonical: no row
            found("http://a.example/plain", raw="http://a.example:80/plain", at=T0 + 2),  # seen already
            found("http://b.example/s", source="sitemap", raw="http://B.example/s"),
            found("http://c.example/seed", source="seed", raw="C.EXAMPLE/seed"),  # the intake's row
            sent_as_is("http://D.example:80/q?b=1&a=2#f"),  # an outside producer's URL: its own raw form
        ],
    )
    frontier = [host.codec.decode(m.value) for m in read_topic(host, URLS_FRONTIER, 5, group="f", timeout_s=2.0)]
    assert sorted(e.url for e in frontier) == sorted(
        [
            "http://a.example/x",
            "http://a.example/plain",
            "http://b.example/s",
            "http://c.example/seed",
            "http://d.example/q?a=2&b=1",
        ]
    )
    outside = next(e for e in frontier if e.url.startswith("http://d."))
    assert outside.raw_url == "http://D.example:80/q?b=1&a=2#f"
    assert sorted(records(host, 3, "r"), key=lambda r: r.url) == [
        row("http://a.example/x", "HTTP://A.EXAMPLE/x#top", "link"),
        row("http://b.example/s", "http://B.example/s", "sitemap"),
        row("http://d.example/q?a=2&b=1", "http://D.example:80/q?b=1&a=2#f", "dataset"),
    ]


def test_the_row_is_what_the_lake_and_v1_url_parse_back(host: Host) -> None:
    record = raw_form_record(found("http://a.example/x", raw="HTTP://A.example/x#f"))
    assert record is not None
    parsed = parse_raw_form(extras_json(dict(record.extras)))
    assert parsed is not None and (parsed.raw, parsed.source) == ("HTTP://A.example/x#f", "link")
    assert raw_form_record(found("http://a.example/x", raw="http://a.example/x")) is None  # not a raw form
    assert raw_form_record(found("http://a.example/x", raw="h" * (MAX_URL_LENGTH + 1))) is None  # no URL is


def test_a_restart_that_replays_forwarded_urls_publishes_no_second_row(
    host: Host, make_settings: Callable[..., Settings]
) -> None:
    first = [found(f"http://a.example/p{i}", raw=f"http://A.example/p{i}") for i in range(4)]
    run_deduper(host, first)
    assert len(records(host, 4, "r1")) == 4
    # The snapshots are lost (a kill -9 before the first one): the restart replays the
    # partitions from the start into an empty filter, forwarding nothing below the commit.
    for snapshot in (make_settings().data_dir / "dedupe").glob("*.bloom"):
        snapshot.unlink()
    run_deduper(host, [found("http://a.example/new", raw="http://a.example/new#x"), *first])
    assert sorted(r.url for r in records(host, 5, "r2")) == sorted(
        ["http://a.example/new", *(f"http://a.example/p{i}" for i in range(4))]
    )


def test_rows_are_on_the_bus_before_the_snapshot_that_covers_their_urls(make_settings: Callable[..., Settings]) -> None:
    """As the forwards (tests/services/test_deduper_service.py): a snapshot ahead of a row still
    in the producer's buffer would, after a kill -9, leave that URL's raw form unrecorded."""
    settings = make_settings(CRAWLSTREAM_BUS_LINGER_MS="60000")  # nothing leaves the buffer by itself
    with open_host(settings) as h:
        deduper = Deduper.from_settings(settings)
        handler = DedupeHandler(deduper, h.bus.consumer("t"), h.event_producer(), 0.0)
        events = [found(f"http://a.example/p/{i}", raw=f"http://a.example/p/{i}#s") for i in range(3)]
        partition = partition_for(events[0].domain, settings.bus.partitions)
        deduper.load_partition(partition)
        for offset, event in enumerate(events):
            handler.handle(event, Message(URLS_DISCOVERED, partition, offset, b"", b"", (), 0))
        handler.end_batch()  # interval 0: snapshots now, before any loop flush
        assert (handler.forwarded, handler.raw_forms) == (3, 3)
        assert deduper.snapshot_path(partition).exists()
        assert sorted(r.url for r in records(h, 3, "r")) == sorted(e.url for e in events)
