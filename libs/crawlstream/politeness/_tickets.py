"""A ticket in Redis: the field that names it and the value that records its URL.

A ticket is one request in flight: its field (``"domain\\nurl"``) sits in the partition's
``inflight`` hash (value: the frontier record, for a retry) and ``leases`` set (score: the
lease deadline), and names the URL's validators in ``val`` while a revisit waits.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import replace

import redis

from crawlstream.frontier import FrontierEntry, decode_records, encode_record
from crawlstream.politeness._keys import PartitionKeys

_TICKET_PRIORITY = struct.Struct("<i")


def ticket_field(domain: str, url: str) -> bytes:
    """A ticket's field in ``inflight`` and ``leases`` (any URL round-trips: surrogates kept)."""
    return f"{domain}\n{url}".encode("utf-8", "surrogatepass")


def ticket_record(entry: FrontierEntry) -> bytes:
    """A ticket's value in ``inflight``: the frontier record, then the priority (4 bytes) of a
    lane entry. The suffix is shorter than a record prefix, so a reader that does not know it
    decodes the record and stops there."""
    record = encode_record(entry)
    return record + _TICKET_PRIORITY.pack(entry.priority) if entry.priority > 0 else record


def ticket_entry(raw: bytes, domain: str) -> FrontierEntry:
    """The entry of a ticket value written by ``ticket_record``."""
    entry, end = decode_records(raw, domain, limit=1)[0][0]
    if len(raw) - end == _TICKET_PRIORITY.size:
        entry = replace(entry, priority=_TICKET_PRIORITY.unpack_from(raw, end)[0])
    return entry


def open_tickets(client: redis.Redis, requests: Sequence[tuple[int, str, str]]) -> list[bool | None]:
    """Whether each ``(partition, domain, url)`` request still has its ticket in flight.

    None where the partition holds no scheduler state at all (a Redis that is not the
    scheduler's, or one that lost its data): nothing can be concluded there. One round trip.
    Raises ``redis.RedisError``.
    """
    pipe = client.pipeline(transaction=False)
    partitions = sorted({p for p, _, _ in requests})
    for partition in partitions:
        pipe.exists(PartitionKeys(partition).domains)
    for partition, domain, url in requests:
        pipe.hexists(PartitionKeys(partition).inflight, ticket_field(domain, url))
    replies = pipe.execute()
    known = {p for p, n in zip(partitions, replies, strict=False) if n}
    return [
        bool(hit) if partition in known else None
        for (partition, _, _), hit in zip(requests, replies[len(partitions) :], strict=True)
    ]
