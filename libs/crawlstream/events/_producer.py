"""Sending events and dead letters through a bus ``Producer``.

Every event is keyed by its registered domain (UTF-8, so Kafka tooling shows it) and sent
to an explicit partition, ``partition_for(domain, P)`` = domain checksum mod P, so all of a
domain's events land in the same partition number of every topic (DESIGN.md).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from crawlstream.bus import Message, Producer
from crawlstream.errors import InvalidUrl
from crawlstream.events._codec import EventCodec
from crawlstream.events._model import TOPIC_EVENTS, Event, UrlRecord
from crawlstream.topics import dlq_topic

__all__ = ["DLQ_HEADERS", "EventProducer", "dead_letter", "event_domain"]

logger = logging.getLogger(__name__)

DLQ_HEADERS = ("error", "error_type", "source_topic", "source_partition", "source_offset", "failed_at_ms")
"""Headers a dead letter carries, after the original message's own headers."""

_MAX_ERROR_CHARS = 2000


def event_domain(event: Event) -> str:
    """The registered domain an event is keyed and partitioned by.

    A ``UrlRecord`` without ``domain`` gets it derived from its URL (``InvalidUrl`` if the URL
    has no host).
    """
    domain = event.domain
    if domain:
        return domain
    assert isinstance(event, UrlRecord)
    from crawlstream.urls import registered_domain

    host = urlsplit(event.url).hostname
    if not host:
        raise InvalidUrl(f"expected an absolute URL with a host, found {event.url!r}", url=event.url, reason="host")
    return registered_domain(host)


class EventProducer:
    """Encodes events and produces them keyed and partitioned by domain.

    ``send`` only queues; ``flush`` makes everything sent durable (or raises
    ``BusUnavailable``), and a service commits its input only after ``flush`` returns.
    """

    def __init__(self, producer: Producer, codec: EventCodec) -> None:
        from crawlstream.urls import partition_for

        self._producer = producer
        self._codec = codec
        self._partition_for = partition_for
        self._partitions: dict[str, int] = {}

    @property
    def producer(self) -> Producer:
        return self._producer

    def partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = self._partitions[topic] = self._producer.partition_count(topic)
        return count

    def send(
        self,
        topic: str,
        event: Event,
        *,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Queue ``event`` on ``topic`` (whose value type it must be, for the fixed topics)."""
        expected = TOPIC_EVENTS.get(topic)
        if expected is not None and type(event) is not expected:
            raise TypeError(f"topic {topic!r} carries {expected.__name__}, not {type(event).__name__}")
        domain = event_domain(event)
        if isinstance(event, UrlRecord) and event.domain is None:
            event = dataclasses.replace(event, domain=domain)
        value = self._codec.encode(event, topic)
        self._producer.produce(
            topic,
            value,
            partition=self._partition_for(domain, self.partition_count(topic)),
            key=domain.encode("utf-8"),
            timestamp_ms=timestamp_ms,
            headers=headers,
        )

    def flush(self, timeout_s: float = 30.0) -> None:
        self._producer.flush(timeout_s)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def dead_letter(
    producer: Producer,
    message: Message,
    error: BaseException,
    *,
    clock_ms: Callable[[], int] = _wall_clock_ms,
) -> None:
    """Queue ``message``'s original bytes on ``<topic>.dlq`` with headers naming the error.

    The key is kept and the partition is the source partition modulo the DLQ's partition
    count, so an operator can find a domain's dead letters where its events were. The
    caller flushes ``producer`` before committing past ``message``.
    """
    topic = dlq_topic(message.topic)
    text = str(error) or type(error).__name__
    headers = [
        *message.headers,
        ("error", text[:_MAX_ERROR_CHARS].encode("utf-8", "replace")),
        ("error_type", type(error).__name__.encode("ascii", "replace")),
        ("source_topic", message.topic.encode("utf-8")),
        ("source_partition", str(message.partition).encode("ascii")),
        ("source_offset", str(message.offset).encode("ascii")),
        ("failed_at_ms", str(clock_ms()).encode("ascii")),
    ]
    partition = message.partition % producer.partition_count(topic)
    producer.produce(
        topic,
        message.value,
        partition=partition,
        key=message.key,
        headers=headers,
        timestamp_ms=message.timestamp_ms or None,
    )
