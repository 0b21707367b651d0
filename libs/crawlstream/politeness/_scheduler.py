"""The per-domain politeness scheduler: frontier files on disk, metadata in Redis.

The Redis layout (all O(domains), never O(URLs)) is in ``_keys``; a ticket's encoding in ``_tickets``.

With ``revisit_after_s`` > 0 every page fetched (2xx, or 304 to a revisit) is put back in its
domain's frontier that long after, carrying its ETag / Last-Modified / body hash for a
conditional request; the schedule itself is on disk (``RevisitFiles``, ``<data_dir>/revisit``).

Priority (issue 14, ADR 016): an entry with ``priority`` > 0 goes to its domain's priority lane
(``FrontierFiles`` with ``lane=True``), kept in read order (highest priority, then arrival) by
appending when the new records sort last and by a rewrite (generation + 1, the compaction's
crash-safe steps) when one must go before unread records. A domain reads its lane before its
FIFO file, and while the lane has unread records it waits in ``pready``, which the claim
empties first. Politeness does not change: one claim per domain, the same delays and slots. A
ticket from the lane carries its priority after the record (``_tickets``), so a retry
or a parked URL goes back to the lane.

Caller's contract (the scheduler service): one instance owns a partition at a time
(``load_partition`` on assign; ``flush_partition`` then ``drop_partition`` on revoke;
``drop_partition`` alone on lost). ``load_partition`` writes a fresh owner token; an instance
that finds another token there (its Kafka session expired and another member took the
partition before it noticed) is *fenced* for that partition: its claims, enqueues and
completions of it are refused until it loads the partition again, so a stale member stops
dispatching the new owner's domains and appending to its files (the token is checked inside
the claim script, and in the same round trip as the enqueue's and completion's reads: a load
between that read and the append is the window left). ``enqueue`` for each ``urls.frontier``
batch, then ``flush_partition`` before committing its offsets; ``complete`` for each ``fetch.results``
event; ``due`` in a loop, producing one ``fetch.requests`` event per ticket. Calls on one
instance are serialized per partition. ``due`` is also safe across instances: a domain is
claimed in Redis by a Lua script, so two callers never hand out the same domain's slot twice.
The batch forms ``complete_all`` and ``due_all`` cover every owned partition in two round
trips each, however many results and domains: per-hop latency is what bounds a polite crawl
(each domain's next request waits for its previous result).

The operator controls (``cs:ctl:*``, see ``_keys``; written by ``Controls``) are read inside
the claim and requeue scripts: an excluded domain is never claimed and its URLs stay parked
in its file; a per-domain override replaces the delay, max in flight and page budget.

Delivery is at-least-once: a ticket is recorded (with a lease) before ``due`` returns it, so
a crash before its request is produced re-dispatches the URL once the lease expires; a
``urls.frontier`` batch replayed after a crash before its offsets were committed is appended
again (the URL may be fetched twice; the stores downstream are idempotent by url_key).
"""

from __future__ import annotations

import heapq
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from crawlstream.errors import ChecksumMismatch, InvalidDomain, RedisUnavailable
from crawlstream.frontier import (
    HEADER_SIZE,
    LANE_SUFFIX,
    FileState,
    FrontierEntry,
    FrontierFiles,
    decode_records,
    validate_domain,
)
from crawlstream.politeness._keys import EXCLUDED_KEY, OVERRIDE_PREFIX, PartitionKeys, as_int, as_text
from crawlstream.politeness._lua import CLAIM_WIDTH, FENCED, scripts
from crawlstream.politeness._revisit import RevisitCursor, RevisitFiles, RevisitRecord, Validators
from crawlstream.politeness._state import DomainState, FetchOutcome, FetchTicket
from crawlstream.politeness._tickets import ticket_entry, ticket_field, ticket_record
from crawlstream.robots import MAX_CRAWL_DELAY_S

if TYPE_CHECKING:
    from crawlstream.metrics import PolitenessMetrics
    from crawlstream.settings import Settings

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)

Clock = Callable[[], float]

_MAX_BACKOFF_LEVEL = 40


def _seconds(value: float | None) -> float | None:
    """A delay from a fetch result, which may come from any producer: NaN is none, and
    anything else is held to 0..MAX_CRAWL_DELAY_S (an inf would overflow ``int``)."""
    if value is None or value != value:
        return None
    return min(max(value, 0.0), MAX_CRAWL_DELAY_S)


def _lane_order(entry: FrontierEntry) -> int:
    return -entry.priority


class Scheduler:
    """Politeness and frontier bookkeeping for the partitions this instance owns.

    ``clock`` returns seconds (``time.time``; tests pass a hand-moved clock). Delays:
    next fetch = now + max(``min_delay_s``, robots Crawl-delay, ``response_time_factor`` x last
    response time); 429/503/timeouts/DNS failures double a back-off capped at ``max_backoff_s``, and a
    Retry-After is honoured up to the same cap. A URL is retried ``max_retries`` times at
    most; deeper than ``max_depth`` it is never stored; beyond ``max_pages_per_domain``
    dispatches a domain is not scheduled again. A ticket not completed within ``lease_s``
    counts as a timeout (its request was lost). Files are compacted once at least
    ``compact_min_bytes`` and more than half of them are consumed. ``revisit_after_s`` > 0
    re-fetches every fetched page that long after its fetch, conditionally (ADR 022; 0 = never,
    the default); revisits count against the page budget like any request.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        frontier_root: Path,
        clock: Clock = time.time,
        *,
        min_delay_s: float = 1.0,
        response_time_factor: float = 2.0,
        max_in_flight_per_domain: int = 1,
        max_backoff_s: float = 3600.0,
        max_retries: int = 2,
        max_pages_per_domain: int = 100_000,
        max_depth: int = 20,
        lease_s: float = 600.0,
        compact_min_bytes: int = 64 * 1024,
        revisit_after_s: float = 0.0,
        revisit_root: Path | None = None,
        metrics: PolitenessMetrics | None = None,
    ) -> None:
        self.redis = redis_client
        self.metrics = metrics  # observes each wait it sets (crawlstream_politeness_wait_seconds)
        self.files = FrontierFiles(frontier_root)
        self.clock = clock
        self.min_delay_ms = int(min_delay_s * 1000)
        self.response_time_factor = response_time_factor
        self.max_in_flight = max_in_flight_per_domain
        self.max_backoff_ms = int(max_backoff_s * 1000)
        self.max_retries = max_retries
        self.max_pages = max_pages_per_domain
        self.max_depth = max_depth
        self.lease_ms = int(lease_s * 1000)
        self.compact_min_bytes = compact_min_bytes
        self.revisit_after_ms = int(revisit_after_s * 1000)
        # One file per 1/100 of the age (at least a minute): about 100 files per partition.
        self.revisits = (
            RevisitFiles(
                revisit_root if revisit_root is not None else Path(frontier_root).parent / "revisit",
                max(60_000, self.revisit_after_ms // 100),
            )
            if self.revisit_after_ms > 0
            else None
        )
        self._next_revisit_ms: dict[int, int | None] = {}  # per partition; absent = look
        self.stats: Counter[str] = Counter()
        lua = scripts()  # the scripts in lua/, read once per process (see _lua)
        self._claim = lua.claim
        self._requeue = lua.requeue
        self._dispatch_script = lua.dispatch
        self._complete_script = lua.complete
        self._hold = lua.hold
        self._verified: dict[int, set[str]] = {}
        self._locks: dict[int, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._warned: set[str] = set()
        self._tokens: dict[int, str] = {}  # owner token per partition loaded here
        self.fenced: set[int] = set()  # partitions another instance loaded since this one did

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        redis_client: redis.Redis,
        clock: Clock = time.time,
        *,
        metrics: PolitenessMetrics | None = None,
    ) -> Scheduler:
        s = settings.scheduler
        return cls(
            redis_client,
            settings.data_dir / "frontier",
            clock,
            min_delay_s=s.min_delay_s,
            response_time_factor=s.response_time_factor,
            max_in_flight_per_domain=s.max_in_flight_per_domain,
            max_backoff_s=s.max_backoff_s,
            max_retries=s.max_retries,
            max_pages_per_domain=s.max_pages_per_domain,
            max_depth=s.max_depth,
            lease_s=s.lease_s,
            compact_min_bytes=s.compact_min_bytes,
            revisit_after_s=s.revisit_after_s,
            revisit_root=settings.data_dir / "revisit",
            metrics=metrics,
        )

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- ownership ------------------------------------------------------------------------

    def load_partition(self, partition: int) -> int:
        """Take ownership: clear claims left by a crashed owner, recount in-flight slots from the
        recorded tickets (their results may still arrive; expired ones are reclaimed by ``due``)
        and rebuild the ready queue. Returns the number of domains in the partition."""
        keys = PartitionKeys(partition)
        now = self.now_ms()
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        with self._lock(partition):
            self._verified[partition] = set()
            self._next_revisit_ms.pop(partition, None)
            try:
                self.redis.set(keys.owner, token)  # first: a stale owner is fenced from here on
                self._tokens[partition] = token
                self.fenced.discard(partition)
                in_flight: Counter[str] = Counter()
                for field in self.redis.hkeys(keys.inflight):
                    in_flight[as_text(field).split("\n", 1)[0]] += 1
                count = 0
                batch: list[str] = []
                for raw in self.redis.sscan_iter(keys.domains, count=1000):
                    batch.append(as_text(raw))
                    if len(batch) >= 1000:
                        self._reset_domains(keys, batch, in_flight, now)
                        count += len(batch)
                        batch = []
                self._reset_domains(keys, batch, in_flight, now)
                count += len(batch)
            except redis.RedisError as exc:
                raise RedisUnavailable(f"load of scheduler partition {partition} failed ({exc})") from exc
        logger.info(
            "scheduler partition %d loaded: %d domains, %d in flight",
            partition,
            count,
            sum(in_flight.values()),
        )
        return count

    def _reset_domains(self, keys: PartitionKeys, domains: list[str], in_flight: Counter[str], now: int) -> None:
        if not domains:
            return
        pipe = self.redis.pipeline(transaction=False)
        for d in domains:
            pipe.hset(keys.domain(d), "infl", in_flight.get(d, 0))
            self._requeue(
                keys=[keys.ready, keys.domain(d), keys.pready],
                args=self._requeue_args(d, now, release=True),
                client=pipe,
            )
        pipe.execute()

    def flush_partition(self, partition: int) -> int:
        """fsync frontier (and revisit) files appended to since the last flush (call before
        committing offsets)."""
        with self._lock(partition):
            if self.revisits is not None:
                self.revisits.sync()
            return self.files.sync()

    def drop_partition(self, partition: int) -> None:
        """Forget process-local state of ``partition``; Redis and files stay for the next owner."""
        with self._lock(partition):
            self._verified.pop(partition, None)
            self._next_revisit_ms.pop(partition, None)
            self._tokens.pop(partition, None)
            self.fenced.discard(partition)

    # -- imported state (``crawlstream migrate``) ---------------------------------------------

    def hold_until(self, partition: int, next_fetch_ms: Mapping[str, int]) -> int:
        """Send no request to each domain before its time (ms): its ``next`` only ever grows, and a
        queued domain moves back to it. Idempotent; returns how many domains were held later."""
        keys = PartitionKeys(partition)
        pipe = self.redis.pipeline(transaction=False)
        for domain, at_ms in next_fetch_ms.items():
            self._hold(keys=[keys.domain(domain), keys.ready, keys.pready], args=[domain, int(at_ms)], client=pipe)
        try:
            return sum(int(n) for n in pipe.execute())
        except redis.RedisError as exc:
            raise RedisUnavailable(f"hold_until on scheduler partition {partition} failed ({exc})") from exc

    def adopt_files(self, partition: int, domains: Sequence[str]) -> int:
        """Make Redis agree with the files of ``domains`` after a writer died between appending
        (``enqueue``) and recording the append: re-check each file, register the domain and queue
        it. Returns how many domains have unread records (in their file or priority lane)."""
        keys = PartitionKeys(partition)
        now = self.now_ms()
        ready = 0
        with self._lock(partition):
            try:
                for domain in domains:
                    self._verified.setdefault(partition, set()).difference_update((domain, domain + LANE_SUFFIX))
                    row = list(self.redis.hmget(keys.domain(domain), "gen", "off", "size", "lg", "lo", "ls"))
                    state = self._reconciled(partition, domain, row, keys)
                    lane, _, _ = self._reconciled_lane(partition, domain, row[3:6], keys, None)
                    if state.unread_bytes > 0 or lane.unread_bytes > 0:
                        self.redis.sadd(keys.domains, domain)
                        self._requeue(
                            keys=[keys.ready, keys.domain(domain), keys.pready],
                            args=self._requeue_args(domain, now),
                            client=self.redis,
                        )
                        ready += 1
            except redis.RedisError as exc:
                raise RedisUnavailable(f"adopt_files on scheduler partition {partition} failed ({exc})") from exc
        return ready

    # -- the three operations ------------------------------------------------------------------

    def enqueue(self, partition: int, entries: Sequence[FrontierEntry], *, unconditional: bool = False) -> int:
        """Append new URLs to their domains' files and make those domains ready; return how many
        were stored. Too deep, invalid-domain and over-budget entries are counted and skipped.
        ``unconditional`` (``crawlstream refetch``): forget validators of a revisit of these URLs
        still waiting, so the fetch asks for the full page whatever the copy we hold."""
        now = self.now_ms()
        keys = PartitionKeys(partition)
        by_domain: dict[str, list[FrontierEntry]] = {}
        for entry in entries:
            if entry.depth > self.max_depth:
                self.stats["skipped_depth"] += 1
                continue
            try:
                validate_domain(entry.domain)
            except InvalidDomain as exc:
                self.stats["skipped_invalid_domain"] += 1
                self._warn_once("invalid_domain", "frontier: skipping URLs of an invalid domain: %s", exc)
                continue
            by_domain.setdefault(entry.domain, []).append(entry)
        if not by_domain:
            return 0
        accepted = 0
        with self._lock(partition):
            try:
                read = self.redis.pipeline(transaction=False)
                read.get(keys.owner)
                for d in by_domain:
                    read.hmget(keys.domain(d), "gen", "off", "size", "pages", "infl", "lg", "lo", "ls", "lp", "lz")
                    read.hget(OVERRIDE_PREFIX + d, "pages")
                owner, *replies = read.execute()
                if self._fenced_by(partition, owner):
                    self.stats["fenced_skipped"] += len(entries)
                    return 0
                rows = [[*row, budget] for row, budget in zip(replies[0::2], replies[1::2], strict=True)]
                pipe = self.redis.pipeline(transaction=False)
                parked: list[tuple[int, int]] = []  # (index of the domain's requeue reply, URLs stored)
                for (domain, group), row in zip(by_domain.items(), rows, strict=True):
                    if as_int(row[3]) >= as_int(row[10], self.max_pages) and as_int(row[4]) <= 0:
                        self.stats["skipped_budget"] += len(group)
                        continue
                    fifo = [e for e in group if e.priority <= 0]
                    lane = [e for e in group if e.priority > 0]
                    h = keys.domain(domain)
                    if fifo:
                        state = self._reconciled(partition, domain, row, keys)
                        new = self.files.append(partition, domain, fifo, state)
                        pipe.hset(h, "size", new.size)
                        pipe.hsetnx(h, "gen", new.generation)
                        pipe.hsetnx(h, "off", new.offset)
                    if lane:
                        bounds = (as_int(row[8]), as_int(row[9]))
                        lane_state, lp, lz = self._reconciled_lane(partition, domain, row[5:8], keys, bounds)
                        new, lp, lz = self._lane_insert(partition, keys, domain, lane_state, lp, lz, lane)
                        pipe.hset(
                            h, mapping={"lg": new.generation, "lo": new.offset, "ls": new.size, "lp": lp, "lz": lz}
                        )
                        self.stats["enqueued_priority"] += len(lane)
                    pipe.sadd(keys.domains, domain)
                    parked.append((len(pipe), len(group)))
                    self._requeue(keys=[keys.ready, h, keys.pready], args=self._requeue_args(domain, now), client=pipe)
                    accepted += len(group)
                if unconditional and self.revisits is not None:
                    pipe.hdel(keys.validators, *(ticket_field(e.domain, e.url) for e in entries))
                # a requeue answering -2 (excluded): the URLs wait parked in the files
                answers = pipe.execute()
                self.stats["parked_excluded"] += sum(n for i, n in parked if int(answers[i]) == -2)
            except redis.RedisError as exc:
                raise RedisUnavailable(f"enqueue to scheduler partition {partition} failed ({exc})") from exc
        self.stats["enqueued"] += accepted
        return accepted

    def due(self, partition: int, now_ms: int | None = None, limit: int = 100) -> list[FetchTicket]:
        """Hand out the next URL of up to ``limit`` domains whose next fetch time has come.

        Each ticket holds one of its domain's in-flight slots until ``complete``.
        """
        return self.due_all([partition], now_ms, limit)

    def due_all(self, partitions: Sequence[int], now_ms: int | None = None, limit: int = 100) -> list[FetchTicket]:
        """``due`` over several partitions (``limit`` domains each) in two Redis round trips."""
        now = self.now_ms() if now_ms is None else now_ms
        ordered = sorted(set(partitions) - self.fenced)
        if not ordered:
            return []
        with ExitStack() as held:
            for partition in ordered:
                held.enter_context(self._lock(partition))
            try:
                if self.revisits is not None:
                    self._release_revisits(ordered, now)
                pipe = self.redis.pipeline(transaction=False)
                for partition in ordered:
                    keys = PartitionKeys(partition)
                    pipe.zrangebyscore(keys.leases, "-inf", now, start=0, num=limit)
                    self._claim(
                        keys=[keys.ready, keys.pready, keys.owner],
                        args=[
                            now,
                            limit,
                            self.max_in_flight,
                            self.max_pages,
                            keys.hash_prefix,
                            HEADER_SIZE,
                            self._tokens.get(partition, ""),
                        ],
                        client=pipe,
                    )
                replies = pipe.execute()
                claimed: dict[int, list[tuple[str, list[Any]]]] = {}
                for i, partition in enumerate(ordered):
                    expired, flat = replies[2 * i], replies[2 * i + 1]
                    if len(flat) == 1 and as_text(flat[0]) == FENCED:
                        self._fence(partition)
                        continue
                    if expired:
                        self._reclaim_expired(partition, expired)
                    if flat:
                        w = CLAIM_WIDTH
                        claimed[partition] = [
                            (as_text(flat[j]), [v or None for v in flat[j + 1 : j + w]]) for j in range(0, len(flat), w)
                        ]
                if not claimed:
                    return []
                return self._dispatch(claimed, now)
            except redis.RedisError as exc:
                raise RedisUnavailable(f"due() on scheduler partitions {ordered} failed ({exc})") from exc

    def _release_revisits(self, partitions: Sequence[int], now: int, limit: int = 1000) -> None:
        """Put pages whose revisit is due back in their domains' frontiers (the caller holds the
        partitions' locks). Steps, do not reorder: 1. their validators into ``val``, 2. the
        frontier append (``enqueue``), 3. store the new cursor, 4. delete files read to the end.
        A crash before 3 hands the same records out again (a page fetched twice at worst); no
        order loses one. Costs nothing while no record is due (the next due time is cached)."""
        assert self.revisits is not None
        due = [p for p in partitions if (at := self._next_revisit_ms.get(p, 0)) is not None and at <= now]
        if not due:
            return
        read = self.redis.pipeline(transaction=False)
        for partition in due:
            read.hmget(PartitionKeys(partition).revisit_cursor, "b", "off")
        for partition, (bucket, offset) in zip(due, read.execute(), strict=True):
            keys = PartitionKeys(partition)
            cursor = RevisitCursor(as_int(bucket), as_int(offset))
            records, after, next_due = self.revisits.read_due(partition, cursor, now, limit)
            self._next_revisit_ms[partition] = next_due
            if records:
                fields = {ticket_field(r.domain, r.url): r.validators.encode() for r in records}
                self.redis.hset(keys.validators, mapping=fields)  # type: ignore[arg-type]  # 1.
                entries = [FrontierEntry(r.domain, r.url, r.url_key, r.depth, now, 0) for r in records]
                self.enqueue(partition, entries)  # 2.
                self.stats["revisits_released"] += len(records)
            if after != cursor:
                self.redis.hset(keys.revisit_cursor, mapping={"b": after.bucket_ms, "off": after.offset})  # 3.
                self.revisits.remove_read(partition, after)  # 4.

    def _dispatch(self, claimed: dict[int, list[tuple[str, list[Any]]]], now: int) -> list[FetchTicket]:
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
        pipe = self.redis.pipeline(transaction=False)
        to_compact: list[tuple[int, str, FileState, bool]] = []
        for partition, rows in claimed.items():
            keys = PartitionKeys(partition)
            for domain, row in rows:  # row: gen, off, size, next, delay override, lg, lo, ls (from the claim)
                lane = False
                head = ""  # the lane's next priority after this dispatch ('' = not read from the lane)
                if as_int(row[6], HEADER_SIZE) < as_int(row[7], HEADER_SIZE):
                    state, _, _ = self._reconciled_lane(partition, domain, row[5:8], keys, None)
                    lane = state.unread_bytes > 0
                if not lane:
                    state = self._reconciled(partition, domain, row, keys)
                entry, offset = self._next_record(partition, domain, state, lane=lane)  # 1.
                if lane:
                    head = str(self._lane_head(partition, domain, FileState(state.generation, offset, state.size)))
                consumed = offset - HEADER_SIZE
                compact = consumed >= self.compact_min_bytes and consumed * 2 > state.size - HEADER_SIZE
                if compact:
                    to_compact.append((partition, domain, FileState(state.generation, offset, state.size), lane))
                field: bytes | str = ""
                record: bytes | str = ""
                deadline = now + self.lease_ms
                if entry is not None:
                    field = ticket_field(domain, entry.url)
                    record = ticket_record(entry)
                    tickets.append(FetchTicket(partition, entry, now, deadline))
                next_at = max(as_int(row[3]), now + as_int(row[4], self.min_delay_ms))
                args = [
                    *self._requeue_args(domain, now, release=not compact),
                    offset,
                    next_at,
                    field,
                    record,
                    deadline,
                    "lo" if lane else "off",
                    head,
                ]
                self._dispatch_script(  # 2. (and 4. unless compacting)
                    keys=[keys.ready, keys.domain(domain), keys.inflight, keys.leases, keys.pready],
                    args=args,
                    client=pipe,
                )
        if self.revisits is not None and tickets:  # a revisit's validators ride along (same round trip)
            for ticket in tickets:
                pipe.hget(PartitionKeys(ticket.partition).validators, ticket_field(ticket.domain, ticket.url))
            found = pipe.execute()[-len(tickets) :]
            tickets = [replace(t, validators=Validators.decode(v)) for t, v in zip(tickets, found, strict=True)]
        else:
            pipe.execute()
        if to_compact:
            release = self.redis.pipeline(transaction=False)
            for partition, domain, state, lane in to_compact:
                keys = PartitionKeys(partition)
                new = self.files.compact(partition, domain, state, lane=lane)  # 3.
                names = ("lg", "lo", "ls") if lane else ("gen", "off", "size")
                values = (new.generation, new.offset, new.size)
                release.hset(keys.domain(domain), mapping=dict(zip(names, values, strict=True)))
                self._requeue(  # 4.
                    keys=[keys.ready, keys.domain(domain), keys.pready],
                    args=self._requeue_args(domain, now, release=True),
                    client=release,
                )
                self.stats["compactions"] += 1
            release.execute()
        self.stats["dispatched"] += len(tickets)
        return tickets

    def _next_record(
        self, partition: int, domain: str, state: FileState, *, lane: bool = False
    ) -> tuple[FrontierEntry | None, int]:
        """The first record at or after ``state.offset`` within ``max_depth`` and the offset after it."""
        offset = state.offset
        while offset < state.size:
            try:
                got = self.files.read(
                    partition, domain, FileState(state.generation, offset, state.size), limit=8, lane=lane
                )
            except ChecksumMismatch as exc:
                self.stats["damaged_files"] += 1
                logger.error("frontier %s (partition %d): %s; skipping its unread records", domain, partition, exc)
                return None, state.size
            for entry, end in got:
                offset = end
                if entry.depth <= self.max_depth:
                    return entry, offset
                self.stats["skipped_depth"] += 1
        return None, offset

    def _lane_head(self, partition: int, domain: str, state: FileState) -> int:
        """The priority of the lane's record at ``state.offset`` (0: none; the claim's tie-break)."""
        try:
            got = self.files.read(partition, domain, state, limit=1, lane=True)
        except ChecksumMismatch:
            return 0  # _next_record reports the damage when it gets there
        return got[0][0].priority if got else 0

    def _lane_insert(
        self,
        partition: int,
        keys: PartitionKeys,
        domain: str,
        state: FileState,
        lp: int,
        lz: int,
        entries: Sequence[FrontierEntry],
    ) -> tuple[FileState, int, int]:
        """Add ``entries`` to the priority lane keeping its read order (priority, then arrival);
        returns the new state and the priorities of its next and last records (``lp``, ``lz``).

        Appends when every new entry sorts after the unread ones (no higher priority than the
        last, ``lz``: the usual case, a migration's ordered rows included); the caller stores
        the state (a crash before that leaves bytes past the stored size, which ``reconcile``
        adopts). Otherwise rewrites the unread records merged with the new ones as generation
        + 1 (``FrontierFiles.rewrite``) and stores the state at once, like a compaction: a
        crash between the rename and that write is repaired by ``reconcile``."""
        ordered = sorted(entries, key=_lane_order)  # stable: arrival order within a priority
        if state.unread_bytes == 0 or ordered[0].priority <= lz:
            new = self.files.append(partition, domain, ordered, state, lane=True)
            return new, ordered[0].priority if state.unread_bytes == 0 else lp, ordered[-1].priority
        try:
            unread = [e for e, _ in self.files.read(partition, domain, state, sys.maxsize, lane=True)]
        except ChecksumMismatch as exc:
            self.stats["damaged_files"] += 1
            logger.error("frontier lane %s (partition %d): %s; dropping its unread records", domain, partition, exc)
            unread = []
        merged = list(heapq.merge(unread, ordered, key=_lane_order))  # ties: the unread ones first
        new = self.files.rewrite(partition, domain, state, merged)
        lp, lz = merged[0].priority, merged[-1].priority
        self.redis.hset(
            keys.domain(domain), mapping={"lg": new.generation, "lo": new.offset, "ls": new.size, "lp": lp, "lz": lz}
        )
        self.stats["lane_rewrites"] += 1
        return new, lp, lz

    def complete(self, partition: int, domain: str, url: str, outcome: FetchOutcome) -> list[FrontierEntry]:
        """Release the slot of the ticket for ``url``, set the domain's next fetch time, and
        re-append the URL (attempt + 1) if the outcome is retryable and retries are left.

        Returns the re-appended entries. A completion for an unknown ticket (already completed,
        or reclaimed after its lease) changes nothing and returns [].
        """
        return self.complete_many(partition, [(domain, url, outcome)])

    def complete_many(self, partition: int, results: Sequence[tuple[str, str, FetchOutcome]]) -> list[FrontierEntry]:
        """``complete`` for a batch of ``(domain, url, outcome)`` in two Redis round trips."""
        return self.complete_all({partition: results})

    def complete_all(self, results: Mapping[int, Sequence[tuple[str, str, FetchOutcome]]]) -> list[FrontierEntry]:
        """``complete_many`` over several partitions at once, still in two round trips."""
        self.stats["fenced_skipped"] += sum(len(batch) for p, batch in results.items() if p in self.fenced)
        ordered = sorted(p for p, batch in results.items() if batch and p not in self.fenced)
        if not ordered:
            return []
        now = self.now_ms()
        with ExitStack() as held:
            for partition in ordered:
                held.enter_context(self._lock(partition))
            try:
                read = self.redis.pipeline(transaction=False)
                plan: list[tuple[int, PartitionKeys, list[bytes], list[str]]] = []
                for partition in ordered:
                    keys = PartitionKeys(partition)
                    fields = [ticket_field(d, u) for d, u, _ in results[partition]]
                    read.get(keys.owner)
                    read.hmget(keys.inflight, *fields)
                    if self.revisits is not None:
                        read.hmget(keys.validators, *fields)
                    domains = list(dict.fromkeys(d for d, _, _ in results[partition]))
                    for d in domains:
                        read.hmget(keys.domain(d), "gen", "off", "size", "next", "cdel", "bo")
                        read.hget(OVERRIDE_PREFIX + d, "delay")
                        read.hmget(keys.domain(d), "lg", "lo", "ls", "lp", "lz")
                    plan.append((partition, keys, fields, domains))
                replies = iter(read.execute())
                pipe = self.redis.pipeline(transaction=False)
                retries: list[FrontierEntry] = []
                for partition, keys, fields, domains in plan:
                    owner = next(replies)
                    raws = next(replies)
                    previous = next(replies) if self.revisits is not None else [None] * len(fields)
                    revisits: list[RevisitRecord] = []
                    # Domain rows are updated in place as the batch goes, so two results of one
                    # domain compose (the second sees the first's back-off and file size). A row:
                    # gen off size next cdel bo, the delay override, then lg lo ls lp lz (the lane).
                    row_of = {d: [*next(replies), next(replies), *next(replies)] for d in domains}
                    if self._fenced_by(partition, owner):  # the new owner completes them (replayed)
                        self.stats["fenced_skipped"] += len(fields)
                        continue
                    done: set[bytes] = set()
                    for (domain, url, outcome), field, raw, before in zip(
                        results[partition], fields, raws, previous, strict=True
                    ):
                        if raw is None or field in done:
                            self.stats["stale_completions"] += 1
                            logger.debug("scheduler: completion for %s in %s has no ticket; ignored", url, domain)
                            continue
                        done.add(field)
                        retry = self._complete_one(
                            partition, keys, domain, field, raw, row_of[domain], outcome, now, pipe
                        )
                        if retry is not None:
                            retries.append(retry)
                        elif self.revisits is not None and not outcome.excluded:
                            was = Validators.decode(before)
                            self._plan_revisit(keys, field, raw, domain, outcome, was, now, pipe, revisits)
                    if revisits:
                        # on disk before the tickets close: a crash in between re-plans (twice at worst)
                        self._schedule_revisits(partition, revisits)
                pipe.execute()
            except redis.RedisError as exc:
                raise RedisUnavailable(f"complete() on scheduler partitions {ordered} failed ({exc})") from exc
        return retries

    def _complete_one(
        self,
        partition: int,
        keys: PartitionKeys,
        domain: str,
        field: bytes,
        raw: bytes,
        row: list[Any],
        outcome: FetchOutcome,
        now: int,
        pipe: Any,
    ) -> FrontierEntry | None:
        entry = ticket_entry(raw, domain)
        if outcome.excluded:  # nothing was fetched: the politeness state stays as it was
            next_at, backoff_level, crawl_delay_ms = max(as_int(row[3]), now), as_int(row[5]), as_int(row[4])
        else:
            next_at, backoff_level, crawl_delay_ms, reason = self._next_fetch(now, row, outcome)
            if self.metrics is not None:
                self.metrics.observe_wait(reason, (next_at - now) / 1000.0)
        row[3], row[4], row[5] = next_at, crawl_delay_ms, backoff_level
        retry = None
        new_size: int | str = ""
        size_field = "size"
        if outcome.excluded:
            # Parked: the URL goes back to the file (or lane) as it was (same attempt, page
            # refunded) and is fetched once the domain is included again.
            new_size, size_field = self._put_back(partition, keys, domain, row, entry, pipe)
            self.stats["parked_excluded"] += 1
        elif outcome.retryable and entry.attempt < self.max_retries:
            retry = replace(entry, attempt=entry.attempt + 1)
            # the retry spends the same page of the budget: refunded
            new_size, size_field = self._put_back(partition, keys, domain, row, retry, pipe)
            self.stats["retried"] += 1
        elif outcome.retryable:
            self.stats["gave_up"] += 1
        self._complete_script(
            keys=[keys.ready, keys.domain(domain), keys.inflight, keys.leases, keys.pready],
            args=[
                *self._requeue_args(domain, now),
                field,
                next_at,
                backoff_level,
                crawl_delay_ms,
                int(outcome.elapsed_ms),
                new_size,
                "1" if outcome.status <= 0 else "0",
                size_field,
            ],
            client=pipe,
        )
        self.stats["completed"] += 1
        return retry

    def _put_back(
        self, partition: int, keys: PartitionKeys, domain: str, row: list[Any], entry: FrontierEntry, pipe: Any
    ) -> tuple[int, str]:
        """Append a retried or parked ``entry`` to its domain's file, or to its lane when it has a
        priority (the lane's other fields go on ``pipe`` before the completion); ``row`` (see
        ``complete_all``) follows. Returns the new size and the field it belongs in."""
        if entry.priority > 0:
            bounds = (as_int(row[10]), as_int(row[11]))
            state, lp, lz = self._reconciled_lane(partition, domain, row[7:10], keys, bounds)
            new, lp, lz = self._lane_insert(partition, keys, domain, state, lp, lz, [entry])
            row[7:12] = [new.generation, new.offset, new.size, lp, lz]
            pipe.hset(keys.domain(domain), mapping={"lg": new.generation, "lo": new.offset, "lp": lp, "lz": lz})
            return new.size, "ls"
        state = self._reconciled(partition, domain, row, keys)
        new = self.files.append(partition, domain, [entry], state)
        row[0], row[1], row[2] = new.generation, new.offset, new.size
        return new.size, "size"

    def _plan_revisit(
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
                self.stats["not_modified"] += 1
        elif previous is not None and outcome.retryable:
            keep = previous
            self.stats["revisits_failed"] += 1
        else:
            return
        entry = decode_records(raw, domain)[0][0][0]
        out.append(RevisitRecord(now + self.revisit_after_ms, entry.url_key, entry.depth, domain, entry.url, keep))

    def _schedule_revisits(self, partition: int, records: Sequence[RevisitRecord]) -> None:
        assert self.revisits is not None
        self.revisits.append(partition, records)
        self.stats["revisits_scheduled"] += len(records)
        if partition in self._next_revisit_ms:  # absent: the next due_all looks at the files anyway
            first = min(r.due_ms for r in records)
            known = self._next_revisit_ms[partition]
            self._next_revisit_ms[partition] = first if known is None else min(known, first)

    def _next_fetch(self, now: int, row: list[Any], outcome: FetchOutcome) -> tuple[int, int, int, str]:
        """(next fetch at ms, back-off level, Crawl-delay ms, what decided the wait) after
        ``outcome``. Pure arithmetic. The reason is one of ``crawlstream.metrics.WAIT_REASONS``:
        the largest term; back-off and Retry-After only when they lengthen the wait."""
        crawl_delay_s = _seconds(outcome.crawl_delay_s)
        crawl_delay_ms = int(crawl_delay_s * 1000) if crawl_delay_s is not None else as_int(row[4])
        overridden = len(row) > 6 and row[6] is not None
        min_delay_ms = as_int(row[6], self.min_delay_ms) if len(row) > 6 else self.min_delay_ms  # operator override
        delay_ms, reason = max(
            (min_delay_ms, "override" if overridden else "min_delay"),
            (crawl_delay_ms, "crawl_delay"),
            (int(self.response_time_factor * outcome.elapsed_ms), "response_time"),
            key=lambda term: term[0],
        )
        level = as_int(row[5])
        if outcome.backs_off:
            level = min(level + 1, _MAX_BACKOFF_LEVEL)
            backoff_ms = min(self.max_backoff_ms, max(delay_ms, 1000) * 2**level)
            if backoff_ms > delay_ms:
                delay_ms, reason = backoff_ms, "backoff"
        else:
            level = 0
        retry_after_s = _seconds(outcome.retry_after_s)
        if retry_after_s is not None and retry_after_s > 0:
            retry_after_ms = min(self.max_backoff_ms, int(retry_after_s * 1000))
            if retry_after_ms > delay_ms:
                delay_ms, reason = retry_after_ms, "retry_after"
        if as_int(row[3]) > now + delay_ms:  # a later next fetch time was set before (a migrated one)
            return as_int(row[3]), level, crawl_delay_ms, "held"
        return now + delay_ms, level, crawl_delay_ms, reason

    def _reclaim_expired(self, partition: int, expired: Sequence[Any]) -> None:
        """Tickets whose lease ran out were lost on the way (a crash before produce): time them out."""
        for field in expired:
            domain, url = as_text(field).split("\n", 1)
            self.stats["leases_expired"] += 1
            logger.warning("scheduler: ticket for %s (%s) expired; treating it as a timeout", url, domain)
            self.complete(partition, domain, url, FetchOutcome(status=0, error="lease_expired"))

    # -- inspection ------------------------------------------------------------------------

    def domain_state(self, partition: int, domain: str) -> DomainState:
        """The stored state of ``domain`` (print it: ``str(state)`` reads like Scrapy's Slot);
        ``max_in_flight`` and ``max_pages`` are the effective ones (an operator override wins)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(OVERRIDE_PREFIX + domain, "delay", "infl", "pages")
        pipe.sismember(EXCLUDED_KEY, domain)
        pipe.hmget(PartitionKeys(partition).domain(domain), "lo", "ls", "lp")
        (delay, infl, pages), excluded, (lane_offset, lane_size, lane_priority) = pipe.execute()
        row = self.redis.hmget(
            PartitionKeys(partition).domain(domain),
            "infl",
            "next",
            "cdel",
            "rtt",
            "bo",
            "pages",
            "gen",
            "off",
            "size",
            "rd",
        )
        return DomainState(
            domain=domain,
            partition=partition,
            in_flight=as_int(row[0]),
            max_in_flight=as_int(infl, self.max_in_flight),
            next_fetch_at_ms=as_int(row[1]),
            now_ms=self.now_ms(),
            crawl_delay_ms=as_int(row[2]),
            last_response_ms=as_int(row[3]),
            backoff_level=as_int(row[4]),
            pages=as_int(row[5]),
            max_pages=as_int(pages, self.max_pages),
            generation=as_int(row[6]),
            offset=as_int(row[7], HEADER_SIZE),
            size=as_int(row[8], HEADER_SIZE),
            reading=row[9] is not None,
            excluded=bool(excluded),
            delay_override_ms=None if delay is None else int(delay),
            lane_offset=as_int(lane_offset, HEADER_SIZE),
            lane_size=as_int(lane_size, HEADER_SIZE),
            lane_priority=as_int(lane_priority),
        )

    def pending(self, partition: int) -> tuple[int, int]:
        """(domains in the ready queues, tickets in flight): (0, 0) means the partition is drained."""
        return self.pending_all([partition])

    def pending_all(self, partitions: Sequence[int]) -> tuple[int, int]:
        """``pending`` summed over ``partitions`` in one round trip (the run's drain check)."""
        pipe = self.redis.pipeline(transaction=False)
        for partition in partitions:
            keys = PartitionKeys(partition)
            pipe.zcard(keys.ready)
            pipe.zcard(keys.pready)
            pipe.hlen(keys.inflight)
        counts = [int(n) for n in pipe.execute()]
        return sum(counts[0::3]) + sum(counts[1::3]), sum(counts[2::3])

    def next_due_ms(self, partition: int) -> int | None:
        """When the earliest ready domain becomes due (for the service's sleep), or None."""
        keys = PartitionKeys(partition)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrange(keys.ready, 0, 0, withscores=True)
        pipe.zrange(keys.pready, 0, 0, withscores=True)
        firsts = [int(first[0][1]) for first in pipe.execute() if first]
        return min(firsts) if firsts else None

    # -- helpers ------------------------------------------------------------------------------

    def _lock(self, partition: int) -> threading.RLock:
        with self._locks_guard:
            lock = self._locks.get(partition)
            if lock is None:
                lock = self._locks[partition] = threading.RLock()
            return lock

    def _requeue_args(self, domain: str, now: int, release: bool = False) -> list[Any]:
        return [domain, now, self.max_in_flight, self.max_pages, "1" if release else "0", HEADER_SIZE]

    def _reconciled(self, partition: int, domain: str, row: list[Any], keys: PartitionKeys) -> FileState:
        """The file state from ``row`` (gen, off, size first); on first touch in this process,
        checked against the file (torn tail, unfinished compaction) and corrected in Redis."""
        state = FileState(as_int(row[0]), as_int(row[1], HEADER_SIZE), as_int(row[2], HEADER_SIZE))
        verified = self._verified.setdefault(partition, set())
        if domain in verified:
            return state
        fixed = self.files.reconcile(partition, domain, state)
        verified.add(domain)
        if fixed != state:
            logger.warning(
                "frontier %s (partition %d): Redis said %s, file says %s; corrected",
                domain,
                partition,
                state,
                fixed,
            )
            self.redis.hset(
                keys.domain(domain),
                mapping={"gen": fixed.generation, "off": fixed.offset, "size": fixed.size},
            )
        return fixed

    def _reconciled_lane(
        self,
        partition: int,
        domain: str,
        row: Sequence[Any],
        keys: PartitionKeys,
        bounds: tuple[int, int] | None,
    ) -> tuple[FileState, int, int]:
        """``_reconciled`` for the priority lane (``row``: lg, lo, ls), with the priorities of its
        next and last unread records (``bounds``: lp, lz as stored; None: not needed). When the
        file corrects Redis they are read again from the file."""
        state = FileState(as_int(row[0]), as_int(row[1], HEADER_SIZE), as_int(row[2], HEADER_SIZE))
        lp, lz = bounds if bounds is not None else (0, 0)
        verified = self._verified.setdefault(partition, set())
        key = domain + LANE_SUFFIX  # '~' is never in a domain
        if key in verified:
            return state, lp, lz
        fixed = self.files.reconcile(partition, domain, state, lane=True)
        verified.add(key)
        if fixed == state:
            return fixed, lp, lz
        try:
            unread = [e for e, _ in self.files.read(partition, domain, fixed, sys.maxsize, lane=True)]
        except ChecksumMismatch:
            unread = []
        lp, lz = (unread[0].priority, unread[-1].priority) if unread else (0, 0)
        logger.warning(
            "frontier lane %s (partition %d): Redis said %s, file says %s; corrected", domain, partition, state, fixed
        )
        self.redis.hset(
            keys.domain(domain),
            mapping={"lg": fixed.generation, "lo": fixed.offset, "ls": fixed.size, "lp": lp, "lz": lz},
        )
        return fixed, lp, lz

    def _fenced_by(self, partition: int, owner: Any) -> bool:
        """True (and the partition fenced here) when ``owner``, the partition's owner token as
        just read, is another instance's: one loaded the partition after this one did."""
        token = self._tokens.get(partition)
        if token is None or owner is None or as_text(owner) == token:
            return False
        self._fence(partition)
        return True

    def _fence(self, partition: int) -> None:
        if partition in self.fenced:
            return
        self.fenced.add(partition)
        self.stats["fenced"] += 1
        logger.warning(
            "scheduler partition %d was loaded by another scheduler since this one loaded it (this one's "
            "group session expired?): no more claims, enqueues or completions of it here until it is "
            "assigned to this one again",
            partition,
        )

    def _warn_once(self, topic: str, message: str, *args: Any) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning(message, *args)
