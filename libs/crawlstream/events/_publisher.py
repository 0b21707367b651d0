"""Precompiled Avro values produced straight to the bus, for the bulk paths.

``EventProducer.send`` builds a dict per event and runs fastavro's generic writer (~15 us for a
``UrlRecord``). Bulk seeding (millions of seed lines, ADR 023) and the PostgreSQL migration
(millions of rows, ADR 017) send events that differ in a few fields, so their values are
assembled from Avro primitives (``avro_long``, ``avro_string``) around parts encoded once, and
produced by an ``AvroPublisher``: keyed by registered domain and partitioned by its checksum
exactly as ``EventProducer.send`` does, counted, and flushed every ``flush_every`` values.

``UrlRecordPublisher`` is the one writer of ``urls.records`` values (a seeding's raw forms, a
migration's lake rows). Every precompiled encoder checks its bytes against the codec on probe
events when it is built and, if they ever differ (another field order, a registry schema),
sends everything through ``EventProducer.send`` instead.

Loaded on first use (``crawlstream.events.__getattr__``): its tables take ~20 ms to build,
which a service that never bulk-sends should not pay.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from crawlstream.events._codec import EventCodec
from crawlstream.events._model import UrlRecord
from crawlstream.events._producer import EventProducer
from crawlstream.topics import URLS_RECORDS
from crawlstream.urls import MAX_URL_LENGTH, compose_key, domain_checksum

__all__ = ["AvroPublisher", "DomainParts", "UrlRecordPublisher", "avro_long", "avro_string"]

logger = logging.getLogger(__name__)

_SURROGATES = "surrogatepass"
_DOMAINS_MAX = 1 << 16  # domains remembered before a cache starts over


# ---------------------------------------------------------------------------------------------
# Avro primitives


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# 14 bits as two varint bytes that both continue; the top byte of a >= 2**56 zigzag value.
_NINE_GROUPS = 1 << 56
_PAIRS = [bytes(((x & 0x7F) | 0x80, ((x >> 7) & 0x7F) | 0x80)) for x in range(1 << 14)]
_TOPS = [_varint(y) for y in range(256)]
_LENGTHS = [_varint(2 * n) for n in range(4 * MAX_URL_LENGTH + 1)]
_MAX_LENGTH = len(_LENGTHS)


def avro_long(n: int) -> bytes:
    """Avro ``long`` (or ``int``): zigzag, then a base-128 varint, least significant group first.

    A url_key with a non-zero domain checksum (127 of 128 domains) is >= 2**56, so its zigzag
    form has nine full 7-bit groups: four table lookups of 14 bits each and one of the top
    byte (~0.35 us instead of ~1 us for the loop).
    """
    z = (n << 1) ^ (n >> 63)
    if z < _NINE_GROUPS:
        return _varint(z)
    return _PAIRS[z & 0x3FFF] + _PAIRS[(z >> 14) & 0x3FFF] + _PAIRS[(z >> 28) & 0x3FFF] + \
        _PAIRS[(z >> 42) & 0x3FFF] + _TOPS[z >> 56]


def avro_string(data: bytes) -> bytes:
    """Avro ``string`` / ``bytes``: the length as a ``long``, then the bytes."""
    n = len(data)
    return (_LENGTHS[n] if n < _MAX_LENGTH else _varint(2 * n)) + data


# ---------------------------------------------------------------------------------------------
# Producing


class DomainParts(NamedTuple):
    """What every message of one registered domain shares, computed once per domain."""

    key: bytes
    """The message key: the domain in UTF-8."""
    avro: bytes
    """The domain as an Avro string (a ``domain`` field's bytes)."""
    partition: int
    """Domain checksum mod the topic's partitions (``crawlstream.urls.partition_for``)."""
    key_bits: int
    """The domain's bits of every url_key in it (``compose_key(checksum, 0)``)."""


class AvroPublisher:
    """Produces precompiled values onto ``topic`` of ``out``'s bus as ``EventProducer.send``
    would (key, partition, ``headers``), counting them in ``sent``.

    ``flush_every`` (0: never) flushes the producer after that many values: it bounds what an
    embedded producer buffers (it holds everything until ``flush``). ``flush`` makes what was
    sent durable (or raises ``BusUnavailable``), as ``EventProducer.flush`` does.
    """

    def __init__(
        self, out: EventProducer, topic: str, *, headers: Sequence[tuple[str, bytes]] = (), flush_every: int = 0
    ) -> None:
        self.out = out
        self.topic = topic
        self.headers = list(headers)
        self.partitions = out.partition_count(topic)
        self.flush_every = flush_every
        self.sent = 0
        self._produce = out.producer.produce
        self._flush_at = flush_every or -1
        self._domains: dict[str, DomainParts] = {}

    def domain(self, domain: str) -> DomainParts:
        """The parts of ``domain`` (cached; a bulk input repeats domains)."""
        parts = self._domains.get(domain)
        if parts is None:
            if len(self._domains) >= _DOMAINS_MAX:
                self._domains.clear()
            key = domain.encode("utf-8")
            checksum = domain_checksum(domain)
            parts = DomainParts(key, avro_string(key), checksum % self.partitions, compose_key(checksum, 0))
            self._domains[domain] = parts
        return parts

    def produce(self, value: bytes, parts: DomainParts, timestamp_ms: int | None = None) -> None:
        """Queue ``value`` keyed and partitioned by the domain of ``parts``."""
        self._produce(
            self.topic, value, partition=parts[2], key=parts[0], headers=self.headers, timestamp_ms=timestamp_ms
        )
        self.sent += 1
        if self.sent == self._flush_at:
            self.flush()

    def counted(self) -> None:
        """Count one value sent another way (through the codec), as ``produce`` counts its own."""
        self.sent += 1
        if self.sent == self._flush_at:
            self.flush()

    def flush(self) -> None:
        self.out.flush()
        if self.flush_every:
            self._flush_at = self.sent + self.flush_every


# ---------------------------------------------------------------------------------------------
# urls.records


_RECORD_PROBES = (
    UrlRecord(7, "http://a.example/x?y=1", 1_700_000_000_000, {"status": "200"}, "a.example"),
    UrlRecord(2**31 - 1, "http://xn--bcher-kva.example/\u00e9", None, {}, "xn--bcher-kva.example"),
    UrlRecord(0, "http://b.example/", -5, {"target": "http://c.example/", "status": "301"}, "b.example"),
)
_VISITED_PROBES = (
    (5, "http://a.example/x?y=1", "a.example", 1_700_000_000_000, 200),
    (2**31 - 1, "http://xn--bcher-kva.example/%C3%A9", "xn--bcher-kva.example", None, None),
    (0, "http://10.0.0.1/", "10.0.0.1", 0, 0),
)
_EXTRAS_MAX = 4096  # encoded extras maps remembered: statuses repeat, redirect targets do not


def _status_extras(status: int | None) -> dict[str, str]:
    """The ``extras`` map of a visited URL's record: ``{"status": "N"}``, or empty without one."""
    return {} if status is None else {"status": str(status)}


class UrlRecordPublisher(AvroPublisher):
    """``UrlRecord`` values onto ``topic`` (``urls.records``): ``publisher(dataset_id, url,
    domain, ts_ms, extras)`` for any record, ``visited(dataset_id, url, domain, ts_ms, status)``
    for the record of a visited URL (its map only ``{"status": "N"}``, empty without a status).

    A value is the header and dataset id (cached per id), the URL, the time, then the extras
    map and the domain (``visited`` caches those per status and domain: one lookup, two
    varints and a join per row, ~3 us instead of ~15 us for ``EventProducer.send``).
    """

    def __init__(
        self,
        out: EventProducer,
        codec: EventCodec,
        headers: Sequence[tuple[str, bytes]] = (),
        topic: str = URLS_RECORDS,
        *,
        flush_every: int = 0,
    ) -> None:
        super().__init__(out, topic, headers=headers, flush_every=flush_every)
        self._header = codec.encode(_RECORD_PROBES[0], topic)[:5]
        self._extras: dict[tuple[tuple[str, str], ...], bytes] = {}
        self._datasets: dict[int, bytes] = {}  # header + dataset_id: a migration writes two ids
        self._tails: dict[int | None, dict[str, tuple[DomainParts, bytes]]] = {}
        self.precompiled = all(
            self._value(p.dataset_id, p.url, self.domain(p.domain or ""), p.ts_ms, p.extras) == codec.encode(p, topic)
            for p in _RECORD_PROBES
        ) and all(
            self._row(ds, url, ts_ms, self._tail(domain, status)[1])
            == codec.encode(UrlRecord(ds, url, ts_ms, _status_extras(status), domain), topic)
            for ds, url, domain, ts_ms, status in _VISITED_PROBES
        )
        if not self.precompiled:
            logger.warning("urls.records values are encoded by the codec: the UrlRecord schema's field order changed")

    def _map(self, extras: Mapping[str, str]) -> bytes:
        if not extras:
            return b"\x00"
        items = tuple(extras.items())
        data = self._extras.get(items)
        if data is None:
            parts = [avro_long(len(items))]
            for name, value in items:
                parts.append(avro_string(name.encode("utf-8")))
                parts.append(avro_string(value.encode("utf-8", _SURROGATES)))
            parts.append(b"\x00")
            data = b"".join(parts)
            if len(self._extras) < _EXTRAS_MAX:
                self._extras[items] = data
        return data

    def _value(
        self, dataset_id: int, url: str, parts: DomainParts, ts_ms: int | None, extras: Mapping[str, str]
    ) -> bytes:
        return self._row(dataset_id, url, ts_ms, b"".join((self._map(extras), b"\x02", parts.avro)))

    def _row(self, dataset_id: int, url: str, ts_ms: int | None, tail: bytes) -> bytes:
        """A record's value: the header and dataset id (cached), the URL, the time, then ``tail``
        (the encoded extras map and domain, which ``visited`` caches per status and domain)."""
        head = self._datasets.get(dataset_id)
        if head is None:
            head = self._datasets[dataset_id] = self._header + avro_long(dataset_id)
        time_part = b"\x00" if ts_ms is None else b"\x02" + avro_long(ts_ms)
        return b"".join((head, avro_string(url.encode("utf-8", _SURROGATES)), time_part, tail))

    def _tail(self, domain: str, status: int | None) -> tuple[DomainParts, bytes]:
        """(parts of ``domain``, the value's bytes after the time) of ``domain``'s records with ``status``."""
        tails = self._tails.get(status)
        if tails is None:
            tails = self._tails[status] = {}
        info = tails.get(domain)
        if info is None:
            if len(tails) >= _DOMAINS_MAX:
                tails.clear()
            parts = self.domain(domain)
            info = tails[domain] = (parts, b"".join((self._map(_status_extras(status)), b"\x02", parts.avro)))
        return info

    def __call__(self, dataset_id: int, url: str, domain: str, ts_ms: int | None, extras: dict[str, str]) -> None:
        if not self.precompiled:
            self.out.send(self.topic, UrlRecord(dataset_id, url, ts_ms, extras, domain), headers=self.headers)
            self.counted()
            return
        parts = self.domain(domain)
        self.produce(self._value(dataset_id, url, parts, ts_ms, extras), parts)

    def visited(self, dataset_id: int, url: str, domain: str, ts_ms: int | None, status: int | None) -> None:
        """The record of a visited URL: ``{"status": "N"}`` as its map (empty when ``status`` is None)."""
        if not self.precompiled:
            self(dataset_id, url, domain, ts_ms, _status_extras(status))
            return
        parts, tail = self._tail(domain, status)
        self.produce(self._row(dataset_id, url, ts_ms, tail), parts)
