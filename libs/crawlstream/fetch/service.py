"""Fetcher wiring: consume ``fetch.requests``, keep ``fetch.concurrency`` fetches running, emit ``fetch.results``.

Every request produces exactly one result, whatever happened (ok, HTTP error, timeout, DNS
failure, robots disallowed, blocked address, redirect): the scheduler needs it to release
the domain's slot. The exception is a request replayed after a crash or a rebalance whose
result the scheduler already has (``ReplayFence``): fetching it again would be impolite.
A request whose domain the operator excluded after it was released (``crawlstream exclude``;
the excluded set is re-read once per batch when it changed) is not fetched: its result, outcome
``excluded``, tells the scheduler to park the URL until the domain is included again.
Redirects are reported, not followed; the link extractor sends the location back through
dedupe. A revisit's request carries the previous validators and body hash (ADR 022): the
fetcher sends them as conditional headers and reports ``not_modified`` / ``unchanged``.
Each result is sent as soon as its fetch ends (the next request of that domain waits
on it); an offset is committed only after its result and every earlier one of its partition
were flushed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping

import zstandard

from crawlstream.bus import Message, TopicPartition
from crawlstream.errors import ConfigError
from crawlstream.events import EventProducer, FetchRequest, FetchResult
from crawlstream.fetch import ERROR_OUTCOMES, Fetcher, FetchOutcome
from crawlstream.logs import log_fields
from crawlstream.metrics import FetchMetrics, per_registry
from crawlstream.politeness import ExcludedDomains, RedisIpGate, ReplayFence
from crawlstream.robots import ImportedRobots, ImportedRobotsTxt
from crawlstream.runtime import EventHandler, Host, LoopService, new_event_loop, run_standalone
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS
from crawlstream.urls import partition_for

GROUP = "crawlstream.fetcher"
TOPICS = (FETCH_REQUESTS,)

logger = logging.getLogger(__name__)


# A body is compressed once on its way in: the bucket compressor stores this frame as the hot
# copy (``ContentStore.put(body_frame=...)``) while the domain has no dictionary, so it is made
# at the store's default hot level (3: 117 us per 33 KB page; compressing at 1 here and at 3 in
# the store cost 91 + 23 + 117 us; ADR 009, session 8).
TRANSIT_ZSTD_LEVEL = 3


def to_result(request: FetchRequest, outcome: FetchOutcome, compressor: zstandard.ZstdCompressor) -> FetchResult:
    """The event for one outcome; the body travels zstd-compressed (capped before)."""
    return FetchResult(
        url=request.url,
        url_key=request.url_key,
        domain=request.domain,
        depth=request.depth,
        status=outcome.status,
        outcome=outcome.outcome,
        fetched_at_ms=outcome.fetched_at_ms,
        elapsed_ms=int(outcome.elapsed_ms),
        attempt=request.attempt,
        error=outcome.error or None,
        final_url=outcome.final_url or None,
        redirect_location=outcome.redirect_location,
        content_type=outcome.content_type or None,
        headers=dict(outcome.headers),
        body_zstd=compressor.compress(outcome.body) if outcome.body else b"",
        body_size_bytes=outcome.body_size_bytes,
        truncated=outcome.truncated,
        dataset_id=request.dataset_id,
        retry_after_s=outcome.retry_after_s,
        crawl_delay_s=outcome.crawl_delay_s,
        robots_sitemaps=list(outcome.robots_sitemaps) if outcome.robots_sitemaps is not None else None,
        content_hash=outcome.content_hash or None,
        response_head=outcome.response_head or None,
        ip_address=outcome.ip_address or None,
        request_head=outcome.request_head or None,
    )


class FetchHandler(EventHandler):
    """Keeps up to ``concurrency`` fetches running and emits each result as soon as it is done.

    Fetches run on an asyncio loop of a private thread; the service loop's thread starts them
    (``handle``), sends finished ones (``end_batch``) and commits only offsets whose result was
    sent (``unfinished``). A slow page holds back nothing but its own offset's commit.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        out: EventProducer,
        concurrency: int,
        wait_s: float = 0.2,
        fence: ReplayFence | None = None,
        excluded: ExcludedDomains | None = None,
        metrics: FetchMetrics | None = None,
        event_loop: str = "auto",
    ) -> None:
        self._fetcher = fetcher
        self._metrics = metrics
        self._out = out
        self._concurrency = concurrency
        self._wait_s = wait_s
        self._fence = fence
        self._excluded = excluded
        self._batch: list[_Started] = []  # handled, not started: checked at the end of the batch
        self._compressor = zstandard.ZstdCompressor(level=TRANSIT_ZSTD_LEVEL)
        self._done: queue.SimpleQueue[_Started] = queue.SimpleQueue()
        self._started: dict[TopicPartition, dict[int, _Started]] = {}  # not yet sent, by offset
        self._count = 0
        self._aio = new_event_loop(event_loop)  # uvloop unless settings.event_loop says otherwise
        self._aio_thread = threading.Thread(target=self._aio.run_forever, name="fetcher-aio", daemon=True)
        self._aio_thread.start()
        self.fetched = 0
        self.skipped = 0  # replayed requests not fetched again (see ReplayFence)
        self.excluded = 0  # requests of domains excluded after their release: not fetched

    def room(self, batch_size: int) -> int:
        return max(0, min(batch_size, self._concurrency - self._count))

    def handle(self, event: FetchRequest, message: Message) -> None:
        started = _Started(message.topic_partition, message.offset, event)
        self._started.setdefault(started.tp, {})[started.offset] = started
        self._count += 1
        self._batch.append(started)

    def _start_batch(self) -> None:
        """Start the batch's fetches, but for excluded domains and closed replays. Steps: 1. one
        read of the excluded set (a GET when it did not change), 2. one round trip for the
        possible replays (none in steady state), 3. start the rest."""
        batch = [s for s in self._batch if not s.dropped]
        self._batch.clear()
        excluded = self._excluded.current() if self._excluded is not None else frozenset()  # 1.
        suspects: list[_Started] = []
        for started in batch:
            if started.request.domain in excluded:
                self._send_excluded(started)
            elif self._fence is not None and self._fence.suspect(started.tp, started.request.requested_at_ms):
                suspects.append(started)
            else:
                self._start(started)  # 3.
        if suspects:
            self._start_suspects(suspects)  # 2. and 3.

    def _send_excluded(self, started: _Started) -> None:
        request = started.request
        outcome = FetchOutcome(
            url=request.url,
            final_url=request.url,
            status=0,
            outcome="excluded",
            error="domain excluded by the operator",
            attempt=request.attempt,
            fetched_at_ms=int(time.time() * 1000),
        )
        self._out.send(FETCH_RESULTS, to_result(request, outcome, self._compressor))
        self._observe(started, outcome)
        self._retire(started)
        self.excluded += 1

    def _start(self, started: _Started) -> None:
        request = started.request
        fetch = self._fetcher.afetch(
            request.url,
            attempt=request.attempt,
            if_none_match=request.if_none_match,
            if_modified_since=request.if_modified_since,
            previous_content_hash=request.previous_content_hash,
            domain=request.domain,
        )
        future = asyncio.run_coroutine_threadsafe(fetch, self._aio)
        started.future = future
        future.add_done_callback(lambda _f: self._done.put(started))

    def _start_suspects(self, suspects: list[_Started]) -> None:
        """Fetch the possibly replayed requests still in flight at the scheduler; drop the rest."""
        assert self._fence is not None
        keep = self._fence.keep([(s.request.domain, s.request.url) for s in suspects])
        for started, fetch in zip(suspects, keep, strict=True):
            if fetch:
                self._start(started)
            else:  # its result was already sent and taken: nothing to send, the offset is done
                self._retire(started)
                self.skipped += 1

    def _retire(self, started: _Started) -> None:
        """Its offset no longer holds back the commit, and its slot is free."""
        del self._started[started.tp][started.offset]
        self._count -= 1

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        if self._fence is not None:
            self._fence.assigned(partitions)

    def end_batch(self) -> None:
        if self._batch:
            self._start_batch()
        # At full capacity nothing new can start: wait for a slot (bounded, so stop is seen).
        self._send_done(wait_s=self._wait_s if self._count >= self._concurrency else 0.0)
        if self._metrics is not None:
            self._metrics.in_flight.set(self._count)

    def unfinished(self) -> Mapping[TopicPartition, int]:
        return {tp: min(by_offset) for tp, by_offset in self._started.items() if by_offset}

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        # Finish the revoked partitions' fetches so their offsets can be committed now.
        revoked = set(partitions)
        if self._batch:
            self._start_batch()
        while any(self._started.get(tp) for tp in revoked):
            self._send_done(wait_s=self._wait_s)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        # Another member owns them now and will fetch these again: send nothing for them. The
        # replay may come back here, where robots.txt is cached: the sitemaps a dropped fetch
        # read from it are owed to the next fetch of its origin.
        for tp in partitions:
            for started in self._started.pop(tp, {}).values():
                started.dropped = True
                self._count -= 1
                self._fetcher.owe_sitemaps(started.request.url)

    def _send_done(self, wait_s: float) -> None:
        try:
            started = self._done.get(timeout=wait_s) if wait_s > 0 else self._done.get_nowait()
        except queue.Empty:
            return
        while True:
            if not started.dropped:
                outcome = started.result()  # afetch raises only for bugs: let them stop the service
                self._out.send(FETCH_RESULTS, to_result(started.request, outcome, self._compressor))
                self._observe(started, outcome)
                self._retire(started)
                self.fetched += 1
            try:
                started = self._done.get_nowait()
            except queue.Empty:
                return

    def _observe(self, started: _Started, outcome: FetchOutcome) -> None:
        if self._metrics is not None:
            self._metrics.observe(outcome.outcome, outcome.status, outcome.elapsed_ms, outcome.body_size_bytes)
        if outcome.outcome in ERROR_OUTCOMES:  # logged (DEBUG) per URL, with its partition and url_key
            request = started.request
            logger.debug(
                "fetch of %s: %s (%s)",
                request.url,
                outcome.outcome,
                outcome.error,
                extra=log_fields(partition=started.tp.partition, url_key=request.url_key, domain=request.domain),
            )

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._fetcher.aclose(), self._aio).result()
        self._aio.call_soon_threadsafe(self._aio.stop)
        self._aio_thread.join()
        self._aio.close()


class _Started:
    """One request whose fetch was started and whose result was not sent yet."""

    __slots__ = ("dropped", "future", "offset", "request", "tp")

    def __init__(self, tp: TopicPartition, offset: int, request: FetchRequest) -> None:
        self.tp = tp
        self.offset = offset
        self.request = request
        self.future: concurrent.futures.Future[FetchOutcome] | None = None
        self.dropped = False

    def result(self) -> FetchOutcome:
        assert self.future is not None
        return self.future.result()


def replay_fence(host: Host, out: EventProducer) -> ReplayFence | None:
    """The fence when this process reaches the scheduler's Redis: on the embedded bus (one data
    dir, one Redis) or with ``REDIS_URL``. A standalone fetcher without it starts no Redis."""
    settings = host.settings
    if settings.kafka_bootstrap_servers is not None and settings.redis_url is None:
        return None
    # The scheduler owns the domain's tickets under the partition its results arrive on.
    return ReplayFence(
        lambda: host.redis,
        lambda domain: partition_for(domain, out.partition_count(FETCH_RESULTS)),
        lease_s=settings.scheduler.lease_s,
    )


def excluded_domains(host: Host) -> ExcludedDomains | None:
    """The operator's excluded set when this process reaches the scheduler's Redis (as the fence)."""
    settings = host.settings
    if settings.kafka_bootstrap_servers is not None and settings.redis_url is None:
        return None
    return ExcludedDomains(lambda: host.redis)


def ip_gate(host: Host) -> RedisIpGate | None:
    """Per-IP turns (``fetch.per_ip_delay_s`` > 0), shared through the scheduler's Redis."""
    settings = host.settings
    if settings.fetch.per_ip_delay_s <= 0:
        return None
    if settings.kafka_bootstrap_servers is not None and settings.redis_url is None:
        raise ConfigError(
            "fetch.per_ip_delay_s needs the scheduler's Redis (set REDIS_URL): every fetcher takes its turns "
            "at an address from there"
        )
    return RedisIpGate(host.redis, settings.fetch.per_ip_delay_s)


def imported_robots(host: Host) -> Callable[[str], ImportedRobotsTxt | None] | None:
    """robots.txt bodies imported by ``crawlstream migrate`` when this process reaches the
    scheduler's Redis (as the fence)."""
    settings = host.settings
    if settings.kafka_bootstrap_servers is not None and settings.redis_url is None:
        return None
    return ImportedRobots(lambda: host.redis).lookup


def build(host: Host, *, resolve_map: dict[str, tuple[str, int]] | None = None) -> LoopService:
    settings = host.settings
    out = host.event_producer()
    handler = FetchHandler(
        Fetcher.from_settings(
            settings, resolve_map=resolve_map, imported_robots=imported_robots(host), ip_gate=ip_gate(host)
        ),
        out,
        settings.fetch.concurrency,
        wait_s=min(settings.bus.poll_timeout_s, 0.2),
        fence=replay_fence(host, out),
        excluded=excluded_domains(host),
        metrics=per_registry(FetchMetrics, host.registry),
        event_loop=settings.event_loop,
    )
    loop = host.service_loop(
        "fetcher",
        GROUP,
        TOPICS,
        handler,
        producers=[out],
        batch_size=settings.fetch.concurrency,
        poll_timeout_s=min(settings.bus.poll_timeout_s, 0.2),
        writes_data_dir=False,  # its only output is the bus (paused all the same on the embedded log)
    )
    return LoopService(loop, handler, on_close=handler.close)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
