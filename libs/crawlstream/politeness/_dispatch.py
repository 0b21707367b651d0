"""Claiming due domains and dispatching their next URLs as tickets.

A domain is claimed in Redis by the claim script (``lua/claim.lua``), so two callers never
hand out the same domain's slot twice; the claim makes the caller its files' only reader
until the dispatch releases it. Delivery is at-least-once: a ticket is recorded (with a
lease) before ``due`` returns it, so a crash before its request is produced re-dispatches the
URL once the lease expires.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import HEADER_SIZE, FileState, FrontierEntry
from crawlstream.politeness._context import SchedulerContext
from crawlstream.politeness._keys import PartitionKeys, as_int, as_text
from crawlstream.politeness._lua import CLAIM_WIDTH, FENCED
from crawlstream.politeness._revisit import Validators
from crawlstream.politeness._state import FetchTicket
from crawlstream.politeness._tickets import ticket_field, ticket_record

logger = logging.getLogger(__name__)

# per partition: (domain, row) where row is gen, off, size, next, delay override, lg, lo, ls
Claimed = dict[int, list[tuple[str, list[Any]]]]
Reclaim = Callable[[int, Sequence[Any]], None]
_Compaction = tuple[int, str, FileState, bool]  # partition, domain, state after the dispatch, lane


class Dispatcher:
    """Claims due domains (``claim``) and hands out one ticket per claimed domain (``dispatch``)."""

    def __init__(self, ctx: SchedulerContext) -> None:
        self._ctx = ctx

    def claim(
        self,
        partitions: Sequence[int],
        now: int,
        limit: int,
        reclaim: Reclaim,
        expire_through: Mapping[int, int] | None = None,
    ) -> Claimed:
        """Claim up to ``limit`` due domains of each partition, in one round trip that also finds
        the partition's leases that ended by ``now`` (and by ``expire_through[partition]`` when
        given; none where it has no entry); those go to ``reclaim(partition, fields)`` (before
        the dispatch), and a partition whose claim answers FENCED is fenced here."""
        pipe = self._ctx.redis.pipeline(transaction=False)
        lim = self._ctx.limits
        for partition in partitions:
            keys = PartitionKeys(partition)
            ended_by = now if expire_through is None else min(now, expire_through.get(partition, -1))
            pipe.zrangebyscore(keys.leases, "-inf", ended_by, start=0, num=limit)
            args = [now, limit, lim.max_in_flight, lim.max_pages, keys.hash_prefix, HEADER_SIZE]
            token = self._ctx.ownership.token(partition)
            self._ctx.scripts.claim(keys=[keys.ready, keys.pready, keys.owner], args=[*args, token], client=pipe)
        replies = pipe.execute()
        claimed: Claimed = {}
        for i, partition in enumerate(partitions):
            expired, flat = replies[2 * i], replies[2 * i + 1]
            if len(flat) == 1 and as_text(flat[0]) == FENCED:
                self._ctx.ownership.fence(partition)
                continue
            if expired:
                reclaim(partition, expired)
            if flat:
                w = CLAIM_WIDTH
                claimed[partition] = [
                    (as_text(flat[j]), [v or None for v in flat[j + 1 : j + w]]) for j in range(0, len(flat), w)
                ]
        return claimed

    def dispatch(self, claimed: Claimed, now: int) -> list[FetchTicket]:
        """A ticket for the next URL of each domain ``claim`` returned (none where it has none left)."""
        # Steps, do not reorder:
        # 1. read each claimed domain's next record (the claim makes us its only reader);
        # 2. atomically (one Lua call per domain): advance the offset, count the page, space
        #    the next start, record the ticket and its lease, before anything is handed out,
        #    so a crash after this point re-dispatches the URL when its lease expires and
        #    never loses it;
        # 3. compact files whose consumed prefix is large (after 2: the compacted file must
        #    start after the dispatched record, and a crash between the rename and the Redis
        #    update is repaired by FrontierFiles.reconcile; before 4: nobody else may read
        #    the file meanwhile);
        # 4. release the claims, putting each domain back in the ready queue if it may fetch.
        #    Domains not being compacted do 2 and 4 in the same Lua call.
        # The claimed domain reads its priority lane while that has unread records, else its file.
        tickets: list[FetchTicket] = []
        pipe = self._ctx.redis.pipeline(transaction=False)
        to_compact: list[_Compaction] = []
        for partition, rows in claimed.items():
            keys = PartitionKeys(partition)
            for domain, row in rows:
                ticket, compaction = self._dispatch_one(partition, keys, domain, row, now, pipe)  # 1. 2.
                if ticket is not None:
                    tickets.append(ticket)
                if compaction is not None:
                    to_compact.append(compaction)
        if self._ctx.planner is not None and tickets:  # a revisit's validators ride along (same round trip)
            for ticket in tickets:
                pipe.hget(PartitionKeys(ticket.partition).validators, ticket_field(ticket.domain, ticket.url))
            found = pipe.execute()[-len(tickets) :]
            tickets = [replace(t, validators=Validators.decode(v)) for t, v in zip(tickets, found, strict=True)]
        else:
            pipe.execute()
        if to_compact:
            self._compact_and_release(to_compact, now)  # 3. 4.
        self._ctx.stats["dispatched"] += len(tickets)
        return tickets

    def _dispatch_one(
        self, partition: int, keys: PartitionKeys, domain: str, row: list[Any], now: int, pipe: Any
    ) -> tuple[FetchTicket | None, _Compaction | None]:
        """Steps 1 and 2 (and 4 unless compacting: then the compaction to do) for one claimed
        domain; ``row`` as the claim returned it (gen, off, size, next, delay override, lg, lo, ls)."""
        lane = False
        head = ""  # the lane's next priority after this dispatch ('' = not read from the lane)
        if as_int(row[6], HEADER_SIZE) < as_int(row[7], HEADER_SIZE):
            state, _, _ = self._ctx.states.lane(partition, domain, row[5:8], keys, None)
            lane = state.unread_bytes > 0
        if not lane:
            state = self._ctx.states.fifo(partition, domain, row, keys)
        entry, offset = self._next_record(partition, domain, state, lane=lane)  # 1.
        if lane:
            head = str(self._ctx.lanes.head(partition, domain, FileState(state.generation, offset, state.size)))
        consumed = offset - HEADER_SIZE
        compact = consumed >= self._ctx.limits.compact_min_bytes and consumed * 2 > state.size - HEADER_SIZE
        compaction = (partition, domain, FileState(state.generation, offset, state.size), lane) if compact else None
        field: bytes | str = ""
        record: bytes | str = ""
        ticket = None
        deadline = now + self._ctx.limits.lease_ms
        if entry is not None:
            field = ticket_field(domain, entry.url)
            record = ticket_record(entry)
            ticket = FetchTicket(partition, entry, now, deadline)
        next_at = max(as_int(row[3]), now + as_int(row[4], self._ctx.limits.min_delay_ms))
        args = [
            *self._ctx.limits.requeue_args(domain, now, release=not compact),
            offset,
            next_at,
            field,
            record,
            deadline,
            "lo" if lane else "off",
            head,
        ]
        self._ctx.scripts.dispatch(  # 2. (and 4. unless compacting)
            keys=[keys.ready, keys.domain(domain), keys.inflight, keys.leases, keys.pready],
            args=args,
            client=pipe,
        )
        return ticket, compaction

    def _compact_and_release(self, to_compact: Sequence[_Compaction], now: int) -> None:
        """Steps 3 and 4 for the domains whose consumed prefix is large."""
        release = self._ctx.redis.pipeline(transaction=False)
        for partition, domain, state, lane in to_compact:
            keys = PartitionKeys(partition)
            new = self._ctx.files.compact(partition, domain, state, lane=lane)  # 3.
            names = ("lg", "lo", "ls") if lane else ("gen", "off", "size")
            values = (new.generation, new.offset, new.size)
            release.hset(keys.domain(domain), mapping=dict(zip(names, values, strict=True)))
            self._ctx.scripts.requeue(  # 4.
                keys=[keys.ready, keys.domain(domain), keys.pready],
                args=self._ctx.limits.requeue_args(domain, now, release=True),
                client=release,
            )
            self._ctx.stats["compactions"] += 1
        release.execute()

    def _next_record(
        self, partition: int, domain: str, state: FileState, *, lane: bool = False
    ) -> tuple[FrontierEntry | None, int]:
        """The first record at or after ``state.offset`` within ``max_depth`` and the offset after it."""
        offset = state.offset
        while offset < state.size:
            try:
                got = self._ctx.files.read(
                    partition, domain, FileState(state.generation, offset, state.size), limit=8, lane=lane
                )
            except ChecksumMismatch as exc:
                self._ctx.stats["damaged_files"] += 1
                logger.error("frontier %s (partition %d): %s; skipping its unread records", domain, partition, exc)
                return None, state.size
            for entry, end in got:
                offset = end
                if entry.depth <= self._ctx.limits.max_depth:
                    return entry, offset
                self._ctx.stats["skipped_depth"] += 1
        return None, offset
