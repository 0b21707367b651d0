"""The migration's precompiled ``urls.records`` sends are byte for byte what ``EventProducer.send``
would have put on the bus (value, key, partition, headers), for every field shape a row has."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus
from crawlstream.events import EventCodec, EventProducer, LocalSchemaIds, UrlRecord, UrlRecordPublisher
from crawlstream.lake import REDIRECTS_DATASET
from crawlstream.topics import IN_LAKE_HEADER, URLS_RECORDS

ROWS = [
    (1, "https://www.example.com/a?b=1", "example.com", 1_700_000_000_000, {"status": "200"}),
    (1, "http://xn--bcher-kva.example/%C3%A9", "xn--bcher-kva.example", None, {}),
    (0, "http://10.0.0.1/", "10.0.0.1", 0, {"status": "404"}),
    (
        2**31 - 1,
        "http://a.example/r",
        "a.example",
        253_402_300_799_000,
        {"target": "http://b.example/\u00e9", "status": "301", "location": "/\u00e9"},
    ),
    (REDIRECTS_DATASET, "http://c.example/" + "x" * 9000, "c.example", 5, {"target": "http://c.example/"}),
]


def _read(root: Path) -> list[tuple[int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]]:
    with EmbeddedBus(root, default_partitions=16, fsync="never") as bus:
        consumer = bus.consumer("reader")
        consumer.subscribe([URLS_RECORDS])
        out: list[tuple[int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]] = []
        while batch := consumer.consume(1000, 0.3):
            out.extend((m.partition, m.key, m.value, m.headers) for m in batch)
        consumer.close()
    return out


@pytest.mark.parametrize("rows", [ROWS, ROWS * 3])
def test_publisher_messages_equal_the_event_producers(tmp_path: Path, rows: list[tuple]) -> None:
    codec = EventCodec(LocalSchemaIds.bundled())
    header = [(IN_LAKE_HEADER, b"1")]
    with EmbeddedBus(tmp_path / "fast", default_partitions=16, fsync="never") as bus:
        publisher = UrlRecordPublisher(EventProducer(bus.producer(), codec), codec, header)
        assert publisher.precompiled
        for row in rows:
            publisher(*row)
        publisher.flush()
    with EmbeddedBus(tmp_path / "slow", default_partitions=16, fsync="never") as bus:
        events = EventProducer(bus.producer(), codec)
        for ds, url, domain, ts_ms, extras in rows:
            events.send(URLS_RECORDS, UrlRecord(ds, url, ts_ms, extras, domain), headers=header)
        events.flush()
    fast, slow = _read(tmp_path / "fast"), _read(tmp_path / "slow")
    assert len(fast) == len(rows) and fast == slow
    decoded = sorted(repr(codec.decode(v, UrlRecord)) for _, _, v, _ in fast)  # read partition by partition
    assert decoded == sorted(repr(UrlRecord(ds, url, ts, extras, domain)) for ds, url, domain, ts, extras in rows)


VISITED = [
    (5, "https://www.example.com/a?b=1", "example.com", 1_700_000_000_000, 200),
    (5, "https://www.example.com/b", "example.com", 1_700_000_000_001, 200),  # same (status, domain): cached tail
    (5, "https://www.example.com/c", "example.com", None, None),
    (5, "http://xn--bcher-kva.example/%C3%A9", "xn--bcher-kva.example", 0, 0),
    (2**31 - 1, "http://10.0.0.1/", "10.0.0.1", 253_402_300_799_000, 999),
    (0, "http://c.example/" + "x" * 9000, "c.example", 5, 404),
]


def test_visited_sends_equal_the_generic_ones_with_a_status_map(tmp_path: Path) -> None:
    """``visited(ds, url, domain, ts, status)`` is ``publisher(ds, url, domain, ts, {"status": "N"})``
    (an empty map without a status), interleaved with generic sends as a migration does."""
    codec = EventCodec(LocalSchemaIds.bundled())
    header = [(IN_LAKE_HEADER, b"1")]
    redirect = (REDIRECTS_DATASET, "http://a.example/r", "a.example", 7, {"target": "http://b.example/"})
    with EmbeddedBus(tmp_path / "fast", default_partitions=16, fsync="never") as bus:
        publisher = UrlRecordPublisher(EventProducer(bus.producer(), codec), codec, header)
        assert publisher.precompiled
        for row in VISITED:
            publisher.visited(*row)
            publisher(*redirect)
        publisher.flush()
    with EmbeddedBus(tmp_path / "slow", default_partitions=16, fsync="never") as bus:
        events = EventProducer(bus.producer(), codec)
        for ds, url, domain, ts_ms, status in VISITED:
            extras = {} if status is None else {"status": str(status)}
            events.send(URLS_RECORDS, UrlRecord(ds, url, ts_ms, extras, domain), headers=header)
            events.send(URLS_RECORDS, UrlRecord(*redirect[:2], redirect[3], redirect[4], redirect[2]), headers=header)
        events.flush()
    fast, slow = _read(tmp_path / "fast"), _read(tmp_path / "slow")
    assert len(fast) == 2 * len(VISITED) and fast == slow
