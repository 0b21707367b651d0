"""Fetcher wiring: consume ``fetch.requests``, fetch each batch concurrently, emit ``fetch.results``.

Every request produces exactly one result, whatever happened (ok, HTTP error, timeout, DNS
failure, robots disallowed, blocked address, redirect): the scheduler needs it to release
the domain's slot. Redirects are reported, not followed; the link extractor sends the
location back through dedupe. A batch is committed only after all its results are flushed.
"""

from __future__ import annotations

import asyncio

import zstandard

from crawlstream.bus import Message
from crawlstream.events import EventProducer, FetchRequest, FetchResult
from crawlstream.fetch import Fetcher, FetchOutcome
from crawlstream.runtime import EventHandler, LoopService, ServiceLoop
from crawlstream.services._host import Host, run_standalone
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS

GROUP = "crawlstream.fetcher"
TOPICS = (FETCH_REQUESTS,)


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
    )


class FetchHandler(EventHandler):
    def __init__(self, fetcher: Fetcher, out: EventProducer) -> None:
        self._fetcher = fetcher
        self._out = out
        self._batch: list[FetchRequest] = []
        self._aio = asyncio.new_event_loop()
        self._compressor = zstandard.ZstdCompressor(level=3)
        self.fetched = 0

    def handle(self, event: FetchRequest, message: Message) -> None:
        self._batch.append(event)

    def end_batch(self) -> None:
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        outcomes = self._aio.run_until_complete(self._fetch_all(batch))
        for request, outcome in zip(batch, outcomes, strict=True):
            self._out.send(FETCH_RESULTS, to_result(request, outcome, self._compressor))
        self.fetched += len(batch)

    async def _fetch_all(self, batch: list[FetchRequest]) -> list[FetchOutcome]:
        # gather() must be called inside the running loop: outside it, it looks for the
        # thread's current loop, which a service thread does not have.
        return await asyncio.gather(*(self._fetcher.afetch(r.url, attempt=r.attempt) for r in batch))

    def close(self) -> None:
        self._aio.run_until_complete(self._fetcher.aclose())
        self._aio.close()


def build(host: Host, *, resolve_map: dict[str, tuple[str, int]] | None = None) -> LoopService:
    settings = host.settings
    consumer = host.bus.consumer(GROUP)
    out = host.event_producer()
    handler = FetchHandler(Fetcher.from_settings(settings, resolve_map=resolve_map), out)
    loop = ServiceLoop(
        service="fetcher",
        consumer=consumer,
        topics=list(TOPICS),
        codec=host.codec,
        handler=handler,
        dlq_producer=host.bus.producer(),
        producers=[out],
        batch_size=settings.fetch.concurrency,
        poll_timeout_s=min(settings.bus.poll_timeout_s, 0.2),
        registry=host.registry,
        stop_event=host.stop_event,
    )
    return LoopService(loop, handler, on_close=handler.close)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
