"""Revisit planning (ADR 022): which closed tickets come back, and putting them back when due.

With ``revisit_after_s`` > 0 every page fetched (2xx, or 304 to a revisit) is put back in its
domain's frontier that long after, carrying its ETag / Last-Modified / body hash for a
conditional request. The schedule itself is on disk (``RevisitFiles``); Redis holds each
partition's read cursor and the validators of revisits released and not completed yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import redis

from crawlstream.frontier import FrontierEntry, decode_records
from crawlstream.politeness._keys import PartitionKeys, as_int
from crawlstream.politeness._revisit import RevisitCursor, RevisitFiles, RevisitRecord, Validators
from crawlstream.politeness._state import FetchOutcome
from crawlstream.politeness._tickets import ticket_field

Enqueue = Callable[[int, Sequence[FrontierEntry]], int]


class RevisitPlanner:
    """Plans the revisits of closed tickets and releases them to the frontier once due."""

    def __init__(self, files: RevisitFiles, client: redis.Redis, stats: Counter[str], after_ms: int) -> None:
        self.files = files
        self._redis = client
        self._stats = stats
        self._after_ms = after_ms
        self._next_due_ms: dict[int, int | None] = {}  # per partition; absent = look at the files

    def forget(self, partition: int) -> None:
        self._next_due_ms.pop(partition, None)

    def plan(
        self,
        keys: PartitionKeys,
        field: bytes,
        raw: bytes,
        domain: str,
        outcome: FetchOutcome,
        previous: Validators | None,
        now: int,
        pipe: Any,
        out: list[RevisitRecord],
    ) -> None:
        """A closed ticket (not retried, not parked): when to fetch its page again, and with what.

        A page (2xx, or 304 to a revisit) comes back after ``revisit_after_s`` with what it said;
        a revisit that failed for good on a transient error (5xx, timeout ...) comes back with the
        validators it had; anything else (404, a redirect, robots) ends its revisits."""
        if previous is not None:
            pipe.hdel(keys.validators, field)
        if outcome.validators is not None:
            keep = previous.after(outcome.validators, outcome.status) if previous is not None else outcome.validators
            if outcome.status == 304:
                self._stats["not_modified"] += 1
        elif previous is not None and outcome.retryable:
            keep = previous
            self._stats["revisits_failed"] += 1
        else:
            return
        entry = decode_records(raw, domain)[0][0][0]
        out.append(RevisitRecord(now + self._after_ms, entry.url_key, entry.depth, domain, entry.url, keep))

    def schedule(self, partition: int, records: Sequence[RevisitRecord]) -> None:
        """Append planned revisits to the files (before their tickets close: a crash in between
        plans them again, twice at worst, and loses none)."""
        self.files.append(partition, records)
        self._stats["revisits_scheduled"] += len(records)
        if partition in self._next_due_ms:  # absent: the next due_all looks at the files anyway
            first = min(r.due_ms for r in records)
            known = self._next_due_ms[partition]
            self._next_due_ms[partition] = first if known is None else min(known, first)

    def release(self, partitions: Sequence[int], now: int, enqueue: Enqueue, limit: int = 1000) -> None:
        """Put pages whose revisit is due back in their domains' frontiers (the caller holds the
        partitions' locks). Steps, do not reorder: 1. their validators into ``val``, 2. the
        frontier append (``enqueue``), 3. store the new cursor, 4. delete files read to the end.
        A crash before 3 hands the same records out again (a page fetched twice at worst); no
        order loses one. Costs nothing while no record is due (the next due time is cached)."""
        due = [p for p in partitions if (at := self._next_due_ms.get(p, 0)) is not None and at <= now]
        if not due:
            return
        read = self._redis.pipeline(transaction=False)
        for partition in due:
            read.hmget(PartitionKeys(partition).revisit_cursor, "b", "off")
        for partition, (bucket, offset) in zip(due, read.execute(), strict=True):
            keys = PartitionKeys(partition)
            cursor = RevisitCursor(as_int(bucket), as_int(offset))
            records, after, next_due = self.files.read_due(partition, cursor, now, limit)
            self._next_due_ms[partition] = next_due
            if records:
                fields = {ticket_field(r.domain, r.url): r.validators.encode() for r in records}
                self._redis.hset(keys.validators, mapping=fields)  # type: ignore[arg-type]  # 1.
                entries = [FrontierEntry(r.domain, r.url, r.url_key, r.depth, now, 0) for r in records]
                enqueue(partition, entries)  # 2.
                self._stats["revisits_released"] += len(records)
            if after != cursor:
                self._redis.hset(keys.revisit_cursor, mapping={"b": after.bucket_ms, "off": after.offset})  # 3.
                self.files.remove_read(partition, after)  # 4.
