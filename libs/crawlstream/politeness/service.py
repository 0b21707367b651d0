"""Scheduler wiring: ``urls.frontier`` + ``fetch.results`` in, ``fetch.requests`` out, politely.

The group subscribes to both topics; both are partitioned by domain checksum with the same
count, so the member owning partition p of one owns p of the other (range assignment) and
with it those domains' frontier files and Redis state. After every batch (and every poll
timeout) it asks ``crawlstream.politeness.Scheduler`` which domains are due and emits one
request for each. A revisit's request carries the page's previous validators (ADR 022); URLs
sent by ``crawlstream refetch`` (source ``refetch``) are fetched unconditionally. A URL with a
``priority`` above 0 waits in its domain's priority lane, fetched before the domain's other URLs
(ADR 016).
A ticket's lease runs out by how far the member has read ``fetch.results`` (the result
produced latest, or the partition's end once caught up), not by the wall clock: a member
behind on its input does not time out requests whose results are waiting for it (ADR 035).
"""

from __future__ import annotations

import contextlib
import time

import redis

from crawlstream.bus import Message, TopicPartition
from crawlstream.events import DiscoveredUrl, EventProducer, FetchRequest, FetchResult
from crawlstream.fetch import REVISITABLE_OUTCOMES
from crawlstream.frontier import FrontierEntry, lane_priority
from crawlstream.metrics import PolitenessMetrics, per_registry
from crawlstream.politeness import (
    EXCLUDED_ERROR,
    REFETCH_SOURCE,
    ROBOTS_UNAVAILABLE_ERROR,
    FetchOutcome,
    ResultsWatermark,
    Scheduler,
    Validators,
)
from crawlstream.runtime import EventHandler, Host, LoopService, run_standalone
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS, URLS_FRONTIER

GROUP = "crawlstream.scheduler"
TOPICS = (URLS_FRONTIER, FETCH_RESULTS)

# fetch.results outcome -> the scheduler's error vocabulary (what back-off and retry key on)
_ERRORS = {
    "timeout": "timeout",
    "connect_error": "connect",
    "dns_error": "dns",
    "robots_disallowed": "robots",
    "blocked_private": "blocked",
    "too_large": "too_large",
    "error": "error",
    "excluded": EXCLUDED_ERROR,
}


def _validators(result: FetchResult) -> Validators | None:
    if result.outcome not in REVISITABLE_OUTCOMES:
        return None
    headers = result.headers
    return Validators(headers.get("etag") or None, headers.get("last-modified") or None, result.content_hash)


def _error(result: FetchResult) -> str | None:
    if result.outcome == "robots_disallowed" and result.retry_after_s is not None:
        # Only a robots.txt that could not be read asks for a back-off (fetch_result.avsc):
        # the URL is retried once it may be readable, a transient failure must not drop it.
        return ROBOTS_UNAVAILABLE_ERROR
    return _ERRORS.get(result.outcome)


def to_outcome(result: FetchResult) -> FetchOutcome:
    return FetchOutcome(
        status=result.status,
        elapsed_ms=float(result.elapsed_ms),
        retry_after_s=result.retry_after_s,
        crawl_delay_s=result.crawl_delay_s,
        error=_error(result),
        validators=_validators(result),
    )


class ScheduleHandler(EventHandler):
    def __init__(
        self,
        scheduler: Scheduler,
        out: EventProducer,
        dataset_id: int,
        due_limit: int = 1000,
        *,
        sync_frontier: bool = True,
    ) -> None:
        self._scheduler = scheduler
        self._sync_frontier = sync_frontier
        self._out = out
        self._dataset_id = dataset_id
        self._due_limit = due_limit
        self._owned: set[int] = set()
        self._incoming: dict[int, list[FrontierEntry]] = {}
        self._forced: dict[int, list[FrontierEntry]] = {}  # crawlstream refetch: unconditional
        self._results: dict[int, list[tuple[str, str, FetchOutcome]]] = {}
        self._read = ResultsWatermark()  # the lease clock (ADR 035)
        self._touched: set[int] = set()  # partitions whose frontier files were appended to
        self._appended: dict[int, int] = {}  # partition -> next urls.frontier offset not appended (ADR 037)
        self._frontier_next: dict[int, int] = {}  # this batch's: partition -> last offset + 1
        self.requested = 0
        self.replayed = 0  # urls.frontier messages read again after they were appended: skipped

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        for p in {tp.partition for tp in partitions} - self._owned:
            self._scheduler.load_partition(p)
            self._appended[p] = self._scheduler.appended_through(p)
            self._read.forget(p)
            self._owned.add(p)

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        for p in {tp.partition for tp in partitions} & self._owned:
            self._scheduler.flush_partition(p)
            self._scheduler.drop_partition(p)
            self._forget(p)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        for p in {tp.partition for tp in partitions} & self._owned:
            self._scheduler.drop_partition(p)
            self._forget(p)

    def _forget(self, partition: int) -> None:
        self._read.forget(partition)
        self._appended.pop(partition, None)
        self._owned.discard(partition)

    def caught_up(self, partitions: list[TopicPartition], as_of_ms: int) -> None:
        for tp in partitions:
            if tp.topic == FETCH_RESULTS and tp.partition in self._owned:
                self._read.caught_up(tp.partition, as_of_ms)

    def handle(self, event: DiscoveredUrl | FetchResult, message: Message) -> None:
        if isinstance(event, DiscoveredUrl):
            if message.offset < self._appended.get(message.partition, 0):
                self.replayed += 1  # a replay after a crash or a failed commit: queued already
                return
            self._frontier_next[message.partition] = message.offset + 1
            entry = FrontierEntry(
                domain=event.domain,
                url=event.url,
                url_key=event.url_key,
                depth=event.depth,
                discovered_at_ms=event.discovered_at_ms,
                priority=lane_priority(event.priority),
            )
            into = self._forced if event.source == REFETCH_SOURCE else self._incoming
            into.setdefault(message.partition, []).append(entry)
            return
        self._results.setdefault(message.partition, []).append((event.domain, event.url, to_outcome(event)))
        # read before the batch's dispatch, which comes after its results are completed
        self._read.read(message.partition, message.timestamp_ms or event.fetched_at_ms)

    def end_batch(self) -> None:
        # 1. close the tickets of the results (complete appends retries to the frontier files
        #    itself: enqueueing them again would fetch a failing URL twice per attempt),
        # 2. append what arrived to the frontier files, 3. then hand out what is due: a URL
        #    enqueued in this batch, or the next one of a domain whose result just came, may
        #    be due at once.
        if self._results:
            self._scheduler.complete_all(self._results)
            self._touched.update(self._results)
            self._results.clear()
        for partition, through in self._frontier_next.items():
            # the last append of the partition's batch records the offset the batch ends at
            incoming, forced = self._incoming.get(partition, []), self._forced.get(partition, [])
            if incoming:
                self._scheduler.enqueue(partition, incoming, through=None if forced else through)
            if forced:
                self._scheduler.enqueue(partition, forced, unconditional=True, through=through)
            self._appended[partition] = through
            self._touched.add(partition)
        self._incoming.clear()
        self._forced.clear()
        self._frontier_next.clear()
        now_ms = int(time.time() * 1000)
        due = self._scheduler.due_all(sorted(self._owned), limit=self._due_limit, expire_through=self._read.bounds())
        for ticket in due:
            entry = ticket.entry
            previous = ticket.validators or Validators()
            self._out.send(
                FETCH_REQUESTS,
                FetchRequest(
                    url=entry.url,
                    url_key=entry.url_key,
                    domain=entry.domain,
                    depth=entry.depth,
                    attempt=entry.attempt,
                    requested_at_ms=now_ms,
                    dataset_id=self._dataset_id,
                    if_none_match=previous.etag,
                    if_modified_since=previous.last_modified,
                    previous_content_hash=previous.content_hash,
                ),
            )
            self.requested += 1

    def before_commit(self) -> None:
        # The commit ends the replay of what was appended: the records must be durable first.
        if self._sync_frontier:
            for partition in self._touched & self._owned:
                self._scheduler.flush_partition(partition)
        self._touched.clear()


def build(host: Host) -> LoopService:
    settings = host.settings
    out = host.event_producer()
    metrics = per_registry(PolitenessMetrics, host.registry)
    scheduler = Scheduler.from_settings(settings, host.redis, metrics=metrics)
    metrics.watch_events(scheduler.stats)
    handler = ScheduleHandler(
        scheduler,
        out,
        settings.crawl.dataset_id,
        # fsync policy 'never' trades power-loss safety for speed everywhere, frontier included
        sync_frontier=settings.bus.fsync != "never",
    )

    def sample_pending(owned: list[TopicPartition]) -> None:
        with contextlib.suppress(redis.RedisError):  # Redis is down: the batch's own calls report it
            metrics.set_pending(*scheduler.pending_all(sorted({tp.partition for tp in owned})))

    loop = host.service_loop(
        "scheduler",
        GROUP,
        TOPICS,
        handler,
        producers=[out],
        poll_timeout_s=min(settings.bus.poll_timeout_s, 0.1),
        samplers=[sample_pending],
    )
    return LoopService(loop, handler)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
