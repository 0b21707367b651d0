"""EventProducer keys and partitions by domain; dead_letter keeps the bytes and names the error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream import topics
from crawlstream.bus import Message
from crawlstream.bus._embedded import EmbeddedBus
from crawlstream.errors import EventDecodeError
from crawlstream.events import DLQ_HEADERS, DiscoveredUrl, EventCodec, EventProducer, UrlRecord, dead_letter
from crawlstream.urls import partition_for, registered_domain


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[EmbeddedBus]:
    with EmbeddedBus(tmp_path / "bus", default_partitions=8, fsync="never") as embedded:
        yield embedded


def _read(bus: EmbeddedBus, topic: str, count: int) -> list[Message]:
    consumer = bus.consumer("reader")
    consumer.subscribe([topic])
    out: list[Message] = []
    deadline = time.monotonic() + 10
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.consume(1000, 0.1))
    consumer.close()
    return out


def _discovered(url: str, domain: str) -> DiscoveredUrl:
    return DiscoveredUrl(url=url, domain=domain, url_key=1, depth=0, discovered_at_ms=0, source="seed")


def test_all_of_a_domains_events_share_one_partition_keyed_by_the_domain(bus: EmbeddedBus, codec: EventCodec) -> None:
    domains = ["example.com", "example.org", "bücher.de", "xn--bcher-kva.de", "a.co.uk"]
    producer = EventProducer(bus.producer(), codec)
    for n in range(50):
        domain = domains[n % len(domains)]
        producer.send(topics.URLS_DISCOVERED, _discovered(f"https://{domain}/{n}", domain))
    producer.flush()
    messages = _read(bus, topics.URLS_DISCOVERED, 50)
    assert len(messages) == 50
    partitions_by_key: dict[bytes, set[int]] = {}
    for message in messages:
        assert message.key is not None
        partitions_by_key.setdefault(message.key, set()).add(message.partition)
        assert codec.decode(message.value).domain.encode("utf-8") == message.key  # type: ignore[union-attr]
    assert set(partitions_by_key) == {d.encode("utf-8") for d in domains}
    for key, partitions in partitions_by_key.items():
        assert partitions == {partition_for(key.decode("utf-8"), 8)}


def test_url_record_without_domain_is_keyed_by_the_registered_domain_of_its_host(
    bus: EmbeddedBus, codec: EventCodec
) -> None:
    producer = EventProducer(bus.producer(), codec)
    producer.send(topics.URLS_RECORDS, UrlRecord(dataset_id=4, url="https://news.bbc.co.uk/a"))
    producer.flush()
    (message,) = _read(bus, topics.URLS_RECORDS, 1)
    expected = registered_domain("news.bbc.co.uk")
    assert message.key == expected.encode()
    assert message.partition == partition_for(expected, 8)
    decoded = codec.decode(message.value)
    assert isinstance(decoded, UrlRecord) and decoded.domain == expected


def test_sending_an_event_to_a_topic_of_another_type_is_refused(bus: EmbeddedBus, codec: EventCodec) -> None:
    producer = EventProducer(bus.producer(), codec)
    with pytest.raises(TypeError, match=r"'fetch\.requests' carries FetchRequest, not DiscoveredUrl"):
        producer.send(topics.FETCH_REQUESTS, _discovered("https://example.com/", "example.com"))


def test_dead_letter_keeps_bytes_key_and_headers_and_maps_the_partition(bus: EmbeddedBus) -> None:
    bus.create_topics([topics.dlq_topic(topics.FETCH_RESULTS)], 2)
    original = Message(
        topic=topics.FETCH_RESULTS,
        partition=7,
        offset=12345,
        key=b"example.com",
        value=b"\x07not avro",
        headers=(("trace", b"abc"),),
        timestamp_ms=99,
    )
    producer = bus.producer()
    dead_letter(producer, original, EventDecodeError("expected magic byte 0, found 0x07"), clock_ms=lambda: 42)
    producer.flush()
    (dead,) = _read(bus, topics.dlq_topic(topics.FETCH_RESULTS), 1)
    assert (dead.value, dead.key, dead.partition) == (b"\x07not avro", b"example.com", 7 % 2)
    assert [name for name, _ in dead.headers] == ["trace", *DLQ_HEADERS]
    assert dict(dead.headers) == {
        "trace": b"abc",
        "error": b"expected magic byte 0, found 0x07",
        "error_type": b"EventDecodeError",
        "source_topic": b"fetch.results",
        "source_partition": b"7",
        "source_offset": b"12345",
        "failed_at_ms": b"42",
    }
