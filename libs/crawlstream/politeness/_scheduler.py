"""The per-domain politeness scheduler: frontier files on disk, metadata in Redis.

The Redis layout (all O(domains), never O(URLs)) is in ``_keys``.

With ``revisit_after_s`` > 0 every page fetched (2xx, or 304 to a revisit) is put back in its
domain's frontier that long after, carrying its ETag / Last-Modified / body hash for a
conditional request; the schedule itself is on disk (``RevisitFiles``, ``<data_dir>/revisit``;
planned and released by ``_revisit_plan``).

Priority (issue 14, ADR 016): an entry with ``priority`` > 0 goes to its domain's priority lane
(``_lanes``), read before its FIFO file; politeness does not change (one claim per domain,
the same delays and slots).

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
``urls.frontier`` batch replayed after a crash before its offsets were committed is skipped up
to the mark of what was appended (``appended_through``, ADR 037; the stores downstream are
idempotent by url_key all the same).

``Scheduler`` is the public surface; each job is a part of its own, built around one shared
``_context`` (the settings as ``Limits``, the Redis client, the files, ``stats``):
``_ownership`` (owner tokens, fencing), ``_enqueue`` (appends), ``_dispatch`` (claims and
tickets), ``_completion`` (next fetch time, back-off, retries, parked URLs), ``_lanes``
(priority lanes), ``_revisit_plan`` (revisits), ``_file_states`` (Redis checked against the
files), ``_tickets`` (ticket encoding), ``_keys`` (the Redis layout), ``_lua`` (loads the
scripts in ``lua/``), ``_locks`` (per-partition locks), ``_inspect`` (``domain_state``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from crawlstream.errors import RedisUnavailable
from crawlstream.frontier import AppendMarks, FrontierEntry, FrontierFiles
from crawlstream.politeness._completion import Completer
from crawlstream.politeness._context import Limits, SchedulerContext
from crawlstream.politeness._dispatch import Dispatcher
from crawlstream.politeness._enqueue import Appender
from crawlstream.politeness._file_states import FileStates
from crawlstream.politeness._inspect import read_domain_state
from crawlstream.politeness._keys import PartitionKeys, as_int, as_text
from crawlstream.politeness._lanes import PriorityLanes
from crawlstream.politeness._locks import PartitionLocks
from crawlstream.politeness._lua import scripts
from crawlstream.politeness._ownership import Ownership
from crawlstream.politeness._revisit import RevisitFiles
from crawlstream.politeness._revisit_plan import RevisitPlanner
from crawlstream.politeness._state import DomainState, FetchOutcome, FetchTicket

if TYPE_CHECKING:
    from crawlstream.metrics import PolitenessMetrics
    from crawlstream.settings import Settings

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)

Clock = Callable[[], float]


class Scheduler:
    """Politeness and frontier bookkeeping for the partitions this instance owns.

    ``clock`` returns seconds (``time.time``; tests pass a hand-moved clock). Delays:
    next fetch = now + max(``min_delay_s``, robots Crawl-delay, ``response_time_factor`` x last
    response time); 429/503/timeouts/DNS failures double a back-off capped at ``max_backoff_s``, and a
    Retry-After is honoured up to the same cap. A URL is retried ``max_retries`` times at
    most; deeper than ``max_depth`` it is never stored; beyond ``max_pages_per_domain``
    dispatches a domain is not scheduled again. A ticket not completed within ``lease_s``
    counts as a timeout (its request was lost): by the wall clock, or by how far the caller has
    read the results (``due_all(expire_through=...)``, ADR 035). Files are compacted once at least
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
        self.marks = AppendMarks(frontier_root, clock=clock)
        self.clock = clock
        self.limits = Limits(
            min_delay_ms=int(min_delay_s * 1000),
            response_time_factor=response_time_factor,
            max_in_flight=max_in_flight_per_domain,
            max_backoff_ms=int(max_backoff_s * 1000),
            max_retries=max_retries,
            max_pages=max_pages_per_domain,
            max_depth=max_depth,
            lease_ms=int(lease_s * 1000),
            compact_min_bytes=compact_min_bytes,
            revisit_after_ms=int(revisit_after_s * 1000),
        )
        self._copy_limits()
        # One file per 1/100 of the age (at least a minute): about 100 files per partition.
        self.revisits = (
            RevisitFiles(
                revisit_root if revisit_root is not None else Path(frontier_root).parent / "revisit",
                max(60_000, self.revisit_after_ms // 100),
            )
            if self.revisit_after_ms > 0
            else None
        )
        self.stats: Counter[str] = Counter()
        self._locks = PartitionLocks()
        self._compose_parts()

    def _copy_limits(self) -> None:
        """The settings as attributes, as callers read them (``limits`` is what the parts read)."""
        limits = self.limits
        self.min_delay_ms = limits.min_delay_ms
        self.response_time_factor = limits.response_time_factor
        self.max_in_flight = limits.max_in_flight
        self.max_backoff_ms = limits.max_backoff_ms
        self.max_retries = limits.max_retries
        self.max_pages = limits.max_pages
        self.max_depth = limits.max_depth
        self.lease_ms = limits.lease_ms
        self.compact_min_bytes = limits.compact_min_bytes
        self.revisit_after_ms = limits.revisit_after_ms

    def _compose_parts(self) -> None:
        """Build the parts around one shared context (the Redis client, the files, ``stats`` ...)."""
        client, files, stats = self.redis, self.files, self.stats
        states = FileStates(files, client)
        planner = None
        if self.revisits is not None:
            planner = RevisitPlanner(self.revisits, client, stats, self.limits.revisit_after_ms)
        self._ctx = SchedulerContext(
            redis=client,
            files=files,
            marks=self.marks,
            limits=self.limits,
            scripts=scripts(),
            states=states,
            lanes=PriorityLanes(files, client, states, stats),
            ownership=Ownership(stats),
            planner=planner,
            stats=stats,
            metrics=self.metrics,
        )
        self._appender = Appender(self._ctx)
        self._dispatcher = Dispatcher(self._ctx)
        self._completer = Completer(self._ctx)

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

    @property
    def fenced(self) -> set[int]:
        """Partitions another instance loaded since this one did (see ``_ownership``)."""
        return self._ctx.ownership.fenced

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- ownership ------------------------------------------------------------------------

    def load_partition(self, partition: int) -> int:
        """Take ownership: clear claims left by a crashed owner, recount in-flight slots from the
        recorded tickets (their results may still arrive; expired ones are reclaimed by ``due``)
        and rebuild the ready queue. Returns the number of domains in the partition."""
        keys = PartitionKeys(partition)
        now = self.now_ms()
        with self._locks.lock(partition):
            self._ctx.states.reset(partition)
            self._forget_revisits(partition)
            try:
                self._ctx.ownership.take(self.redis, partition)
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
            self._ctx.scripts.requeue(
                keys=[keys.ready, keys.domain(d), keys.pready],
                args=self.limits.requeue_args(d, now, release=True),
                client=pipe,
            )
        pipe.execute()

    def flush_partition(self, partition: int) -> int:
        """fsync frontier (and revisit) files appended to since the last flush (call before
        committing offsets)."""
        with self._locks.lock(partition):
            if self.revisits is not None:
                self.revisits.sync()
            synced = self.files.sync()
            self.marks.sync()
            return synced

    def drop_partition(self, partition: int) -> None:
        """Forget process-local state of ``partition``; Redis and files stay for the next owner."""
        with self._locks.lock(partition):
            self._ctx.states.forget(partition)
            self._forget_revisits(partition)
            self._ctx.ownership.release(partition)

    def _forget_revisits(self, partition: int) -> None:
        if self._ctx.planner is not None:
            self._ctx.planner.forget(partition)

    # -- imported state (``crawlstream migrate``) ---------------------------------------------

    def hold_until(self, partition: int, next_fetch_ms: Mapping[str, int]) -> int:
        """Send no request to each domain before its time (ms): its ``next`` only ever grows, and a
        queued domain moves back to it. Idempotent; returns how many domains were held later."""
        keys = PartitionKeys(partition)
        pipe = self.redis.pipeline(transaction=False)
        for domain, at_ms in next_fetch_ms.items():
            self._ctx.scripts.hold(
                keys=[keys.domain(domain), keys.ready, keys.pready], args=[domain, int(at_ms)], client=pipe
            )
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
        with self._locks.lock(partition):
            try:
                for domain in domains:
                    self._ctx.states.recheck(partition, domain)
                    row = list(self.redis.hmget(keys.domain(domain), "gen", "off", "size", "lg", "lo", "ls"))
                    state = self._ctx.states.fifo(partition, domain, row, keys)
                    lane, _, _ = self._ctx.states.lane(partition, domain, row[3:6], keys, None)
                    if state.unread_bytes > 0 or lane.unread_bytes > 0:
                        self.redis.sadd(keys.domains, domain)
                        self._ctx.scripts.requeue(
                            keys=[keys.ready, keys.domain(domain), keys.pready],
                            args=self.limits.requeue_args(domain, now),
                            client=self.redis,
                        )
                        ready += 1
            except redis.RedisError as exc:
                raise RedisUnavailable(f"adopt_files on scheduler partition {partition} failed ({exc})") from exc
        return ready

    # -- the three operations ------------------------------------------------------------------

    def enqueue(
        self,
        partition: int,
        entries: Sequence[FrontierEntry],
        *,
        unconditional: bool = False,
        through: int | None = None,
    ) -> int:
        """Append new URLs to their domains' files and make those domains ready; return how many
        were stored. Too deep, invalid-domain and over-budget entries are counted and skipped.
        ``unconditional`` (``crawlstream refetch``): forget validators of a revisit of these URLs
        still waiting, so the fetch asks for the full page whatever the copy we hold.
        ``through``: the next ``urls.frontier[partition]`` offset these entries complete, recorded
        with them (``appended_through``)."""
        now = self.now_ms()
        by_domain = self._appender.by_domain(entries)
        if not by_domain:
            return 0
        with self._locks.lock(partition):
            try:
                accepted = self._appender.append(partition, entries, by_domain, now, unconditional, through)
            except redis.RedisError as exc:
                raise RedisUnavailable(f"enqueue to scheduler partition {partition} failed ({exc})") from exc
        self.stats["enqueued"] += accepted
        return accepted

    def appended_through(self, partition: int) -> int:
        """The next ``urls.frontier[partition]`` offset not appended yet (0: none recorded). A
        message below it is already in the frontier: queueing it again would fetch it twice.

        Appends the log beside the files holds past the Redis mark lost their Redis pipeline
        (Redis came back without it, or the writer died before it): their domains are adopted
        (sizes corrected from the files, registered, queued) and the mark moved up to them."""
        keys = PartitionKeys(partition)
        try:
            recorded = as_int(self.redis.get(keys.appended))
            lost = self.marks.read(partition, after=recorded)
            if not lost:
                return recorded
            domains = sorted({d for m in lost for d in m.domains})
            self.adopt_files(partition, domains)
            through = max(m.through for m in lost)
            self.redis.set(keys.appended, through)
        except redis.RedisError as exc:
            raise RedisUnavailable(f"read of scheduler partition {partition}'s frontier mark failed ({exc})") from exc
        self.stats["appends_adopted"] += len(lost)
        logger.warning(
            "scheduler partition %d: Redis had appended through %d, the files through %d; "
            "%d appends of %d domains adopted",
            partition,
            recorded,
            through,
            len(lost),
            len(domains),
        )
        return through

    def due(self, partition: int, now_ms: int | None = None, limit: int = 100) -> list[FetchTicket]:
        """Hand out the next URL of up to ``limit`` domains whose next fetch time has come.

        Each ticket holds one of its domain's in-flight slots until ``complete``.
        """
        return self.due_all([partition], now_ms, limit)

    def due_all(
        self,
        partitions: Sequence[int],
        now_ms: int | None = None,
        limit: int = 100,
        *,
        expire_through: Mapping[int, int] | None = None,
    ) -> list[FetchTicket]:
        """``due`` over several partitions (``limit`` domains each) in two Redis round trips.

        ``expire_through`` (``ResultsWatermark.bounds``): per partition, the time up to which
        every result has been read; a ticket expires only once that has passed its deadline
        (none of a partition missing from it). None: by the wall clock (``now``).
        """
        now = self.now_ms() if now_ms is None else now_ms
        ordered = sorted(set(partitions) - self.fenced)
        if not ordered:
            return []
        with self._locks.holding(ordered):
            try:
                if self._ctx.planner is not None:
                    self._ctx.planner.release(ordered, now, self.enqueue)
                claimed = self._dispatcher.claim(ordered, now, limit, self._reclaim_expired, expire_through)
                if not claimed:
                    return []
                return self._dispatcher.dispatch(claimed, now)
            except redis.RedisError as exc:
                raise RedisUnavailable(f"due() on scheduler partitions {ordered} failed ({exc})") from exc

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
        with self._locks.holding(ordered):
            try:
                return self._completer.complete_all(ordered, results, now)
            except redis.RedisError as exc:
                raise RedisUnavailable(f"complete() on scheduler partitions {ordered} failed ({exc})") from exc

    def _reclaim_expired(self, partition: int, expired: Sequence[Any]) -> None:
        """Tickets whose lease ran out were lost on the way (a crash before produce, a fetcher
        that dropped them): time them out through ``complete``, like a result that said so."""
        for field in expired:
            domain, url = as_text(field).split("\n", 1)
            self.stats["leases_expired"] += 1
            logger.warning("scheduler: ticket for %s (%s) expired; treating it as a timeout", url, domain)
            self.complete(partition, domain, url, FetchOutcome(status=0, error="lease_expired"))

    # -- inspection ------------------------------------------------------------------------

    def domain_state(self, partition: int, domain: str) -> DomainState:
        """The stored state of ``domain`` (print it: ``str(state)`` reads like Scrapy's Slot);
        ``max_in_flight`` and ``max_pages`` are the effective ones (an operator override wins)."""
        return read_domain_state(self.redis, self.limits, partition, domain, self.now_ms())

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
