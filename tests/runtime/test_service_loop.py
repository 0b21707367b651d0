"""The service loop: decode, handle, flush, commit; bad data to the DLQ; transient errors replay."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from crawlstream import topics
from crawlstream.bus import Bus, Consumer, Message, TopicPartition
from crawlstream.errors import BadDataError, BusUnavailable
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer, FetchRequest
from crawlstream.runtime import EventHandler, ServiceLoop
from crawlstream.urls import partition_for

SOURCE = topics.URLS_DISCOVERED
DLQ = topics.dlq_topic(SOURCE)
WAIT_S = 20.0


class RecordingHandler(EventHandler):
    """Records what it handles; ``fail`` decides per event whether to raise."""

    def __init__(self, fail: Callable[[Any], BaseException | None] = lambda event: None) -> None:
        self.handled: list[Any] = []
        self.assigned: list[TopicPartition] = []
        self.revoked: list[TopicPartition] = []
        self.batches = 0
        self.fail = fail

    def handle(self, event: Any, message: Message) -> None:
        error = self.fail(event)
        if error is not None:
            raise error
        self.handled.append(event)

    def end_batch(self) -> None:
        self.batches += 1

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned.extend(partitions)

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.revoked.extend(partitions)


def _url(n: int, domain: str = "example.com") -> DiscoveredUrl:
    return DiscoveredUrl(
        url=f"https://{domain}/{n}",
        domain=domain,
        url_key=n,
        depth=0,
        discovered_at_ms=1_700_000_000_000,
        source="seed",
    )


def _send(bus: Bus, codec: EventCodec, events: list[DiscoveredUrl], topic: str = SOURCE) -> None:
    producer = bus.producer()
    sender = EventProducer(producer, codec)
    for event in events:
        sender.send(topic, event)
    sender.flush()
    producer.close()


def _loop(
    bus: Bus,
    codec: EventCodec,
    handler: EventHandler,
    group: str = "svc",
    batch_size: int = 100,
    topic: str = SOURCE,
    **kw: Any,
) -> ServiceLoop:
    return ServiceLoop(
        service="test",
        consumer=bus.consumer(group),
        topics=[topic],
        codec=codec,
        handler=handler,
        dlq_producer=bus.producer(),
        batch_size=batch_size,
        poll_timeout_s=0.2,
        **kw,
    )


def _run_until(loop: ServiceLoop, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        loop.run_once()


def _read_all(bus: Bus, topic: str, count: int) -> list[Message]:
    consumer: Consumer = bus.consumer("reader")
    consumer.subscribe([topic])
    out: list[Message] = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.consume(100, 0.2))
    consumer.close()
    return out


def _committed(bus: Bus, partition: int, topic: str = SOURCE) -> int | None:
    consumer = bus.consumer("svc")
    try:
        return consumer.committed([TopicPartition(topic, partition)])[TopicPartition(topic, partition)]
    finally:
        consumer.close()


def test_corrupt_message_goes_to_dlq_with_headers_and_the_loop_commits_past_it(any_bus: Bus, codec: EventCodec) -> None:
    # A topic of its own: the Kafka broker is the session's, where other tests write to the
    # crawl's topics (a fresh group would read their events from the earliest offset too).
    bus, source = any_bus, f"{SOURCE}.{uuid.uuid4().hex[:8]}"
    partition = partition_for("example.com", 4)
    _send(bus, codec, [_url(1)], source)
    producer = bus.producer()
    producer.produce(source, b"\x00\x00\x00\x00\x01garbage!", partition=partition, key=b"example.com")
    producer.flush()
    producer.close()
    _send(bus, codec, [_url(2)], source)

    handler = RecordingHandler()
    registry = CollectorRegistry()
    with _loop(bus, codec, handler, registry=registry, clock_ms=lambda: 1234, topic=source) as loop:
        _run_until(loop, lambda: len(handler.handled) == 2)
        assert [e.url_key for e in handler.handled] == [1, 2]
        assert _committed(bus, partition, source) == 3

    dlq = topics.dlq_topic(source)
    (dead,) = _read_all(bus, dlq, 1)
    assert dead.value == b"\x00\x00\x00\x00\x01garbage!"
    assert dead.key == b"example.com"
    assert dead.partition == partition % bus.partition_count(dlq)
    headers = dict(dead.headers)
    assert headers["error_type"] == b"EventDecodeError"
    assert b"does not match schema id 1" in headers["error"]
    assert headers["source_topic"] == source.encode()
    assert headers["source_partition"] == str(partition).encode()
    assert headers["source_offset"] == b"1"
    assert headers["failed_at_ms"] == b"1234"
    labels = {"service": "test", "topic": source}
    assert registry.get_sample_value("crawlstream_events_processed_total", labels) == 2
    assert (
        registry.get_sample_value(
            "crawlstream_events_dead_lettered_total", {**labels, "error_type": "EventDecodeError"}
        )
        == 1
    )


def test_handler_bad_data_error_dead_letters_only_that_message(bus: Bus, codec: EventCodec) -> None:
    _send(bus, codec, [_url(n) for n in range(5)])
    handler = RecordingHandler(lambda e: BadDataError("no such scheme") if e.url_key == 3 else None)
    with _loop(bus, codec, handler) as loop:
        _run_until(loop, lambda: len(handler.handled) == 4)
    (dead,) = _read_all(bus, DLQ, 1)
    assert dict(dead.headers)["error"] == b"no such scheme"
    assert codec.decode(dead.value) == _url(3)


def test_transient_error_leaves_the_offset_uncommitted_and_the_message_replays(bus: Bus, codec: EventCodec) -> None:
    partition = partition_for("example.com", 4)
    _send(bus, codec, [_url(1), _url(2)])
    handler = RecordingHandler(lambda e: BusUnavailable("redis down") if e.url_key == 2 else None)
    loop = _loop(bus, codec, handler)
    with pytest.raises(BusUnavailable):
        _run_until(loop, lambda: False)
    loop.close()
    assert _committed(bus, partition) is None  # the batch holding url 1 was not committed either

    again = RecordingHandler()
    with _loop(bus, codec, again) as loop:
        _run_until(loop, lambda: len(again.handled) == 2)
    assert [e.url_key for e in again.handled] == [1, 2]
    assert _committed(bus, partition) == 2


def test_outputs_are_flushed_before_the_input_is_committed(bus: Bus, codec: EventCodec) -> None:
    _send(bus, codec, [_url(n, domain) for n, domain in enumerate(["a.com", "b.org", "c.net"])])
    out_producer = bus.producer()
    out = EventProducer(out_producer, codec)

    class Forward(EventHandler):
        def handle(self, event: Any, message: Message) -> None:
            out.send(
                topics.FETCH_REQUESTS,
                FetchRequest(
                    url=event.url,
                    url_key=event.url_key,
                    domain=event.domain,
                    depth=event.depth,
                    attempt=1,
                    requested_at_ms=event.discovered_at_ms,
                ),
            )

    with _loop(bus, codec, Forward(), producers=[out]) as loop:
        _run_until(loop, lambda: sum(_committed(bus, p) or 0 for p in range(4)) == 3)
    requests = _read_all(bus, topics.FETCH_REQUESTS, 3)
    assert sorted(m.key or b"" for m in requests) == [b"a.com", b"b.org", b"c.net"]
    for message in requests:
        assert message.partition == partition_for(message.key.decode(), 4)  # type: ignore[union-attr]
    out_producer.close()


def test_stop_ends_run_after_the_current_batch_and_partition_hooks_fire(bus: Bus, codec: EventCodec) -> None:
    _send(bus, codec, [_url(1)])
    handler = RecordingHandler()
    loop = _loop(bus, codec, handler)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not handler.handled and time.monotonic() < deadline:
        time.sleep(0.02)
    loop.stop()
    thread.join(timeout=WAIT_S)
    assert not thread.is_alive()
    loop.close()
    assert handler.handled == [_url(1)]
    assert {tp.topic for tp in handler.assigned} == {SOURCE}
    assert handler.batches >= 1


def test_end_batch_runs_even_when_nothing_arrives(bus: Bus, codec: EventCodec) -> None:
    """Timed work (the scheduler releasing due domains) hangs off end_batch."""
    handler = RecordingHandler()
    with _loop(bus, codec, handler) as loop:
        for _ in range(3):
            assert loop.run_once() == 0
    assert handler.batches == 3


def test_caught_up_names_the_partitions_read_to_their_end_as_of_before_the_ends_were_read(
    bus: Bus, codec: EventCodec
) -> None:
    """The scheduler's lease clock (ADR 035): a partition is reported only once every message
    in it is handled, with a time taken before its end was read."""

    class CatchUps(RecordingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.read: dict[int, int] = {}  # partition -> messages handled
            self.caught: list[tuple[dict[int, int], int]] = []  # (handled per caught partition, as of)

        def handle(self, event: Any, message: Message) -> None:
            super().handle(event, message)
            self.read[message.partition] = self.read.get(message.partition, 0) + 1

        def caught_up(self, partitions: list[TopicPartition], as_of_ms: int) -> None:
            self.caught.append(({tp.partition: self.read.get(tp.partition, 0) for tp in partitions}, as_of_ms))

    events = [_url(n, f"d{n}.example") for n in range(40)]
    sent_ms = int(time.time() * 1000)
    _send(bus, codec, events)
    ends = bus.end_offsets(SOURCE)
    assert sum(1 for end in ends if end > 0) > 1
    handler = CatchUps()
    loop = _loop(bus, codec, handler, batch_size=1, end_offsets=bus.end_offsets, lag_interval_s=0.0)
    _run_until(loop, lambda: len(handler.handled) == len(events))
    loop.run_once()
    for caught, as_of_ms in handler.caught:
        assert all(handled == ends[p] for p, handled in caught.items())  # never one with messages left
        assert as_of_ms >= sent_ms
    assert len({frozenset(c) for c, _ in handler.caught}) > 1  # partitions joined as they were read
    assert set(handler.caught[-1][0]) == {tp.partition for tp in handler.assigned}
