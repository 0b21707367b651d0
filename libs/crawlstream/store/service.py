"""The bucket compressor service: consume ``fetch.results``, store each body, emit ``content.stored``.

Only ``outcome == "ok"`` results with a non-empty body are stored (2xx; a truncated body
is stored too, tagged ``truncated``). A page's robots directives (``<meta name=robots>``,
``X-Robots-Tag``; ``crawl.obey_robots_directives``) tag it ``noindex`` / ``nofollow`` in the
store and travel on ``content.stored`` as ``robots_directives`` (directive -> source): the
parquet sink keeps ``noindex`` pages out of the lake, hence out of the URL index. Error
pages, redirects and failures are not stored: the store keeps one live body per URL, so a
transient 503 page would replace the good copy, and the lake downstream answers "which
URLs does this crawl hold", which error pages are not.

Order within one loop iteration (do not reorder: it is the at-least-once guarantee):

1. ``handle``: decompress (bounded by ``fetch.max_body_bytes``) and ``store.put`` each
   body, handing the store the fetcher's frame too (kept as the hot copy while the domain has
   no dictionary: one compression per page); ``put`` is idempotent by (url, content hash), so
   a replayed batch writes nothing;
2. ``end_batch``: ``store.sync()`` (fsync segments, then the index) so every put of the
   batch is durable even against power loss;
3. ``end_batch``: only then queue the ``ContentStored`` events;
4. the loop flushes the producer and commits. A crash before 4 replays the batch: the
   puts are no-ops and the events are sent again (sinks are idempotent).

Store maintenance runs beside the loop (``StoreMaintainer``, a background thread): every
``store.maintenance_interval_s`` one bounded step moves the oldest pages due for a deeper
tier (``store.warm_after_s`` …) or compacts segments with dead space (ADR 018). Events
already sent keep the location they were stored at; readers look pages up by URL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import zstandard

from crawlstream.bus import Message, TopicPartition
from crawlstream.errors import BadDataError, CrawlstreamError
from crawlstream.events import ContentLocation, ContentStored, EventProducer, FetchResult
from crawlstream.links import DEFAULT_AGENT_TOKEN, RobotsDirectives, extract_title, is_html, page_directives
from crawlstream.metrics import StoreMetrics, per_registry
from crawlstream.robots import product_token
from crawlstream.runtime import EventHandler, Host, LoopService, run_standalone
from crawlstream.settings import Settings
from crawlstream.status import save_store_stats
from crawlstream.store._maintenance import StoreMaintainer
from crawlstream.store._store import ContentStore
from crawlstream.topics import CONTENT_STORED, FETCH_RESULTS

GROUP = "crawlstream.bucket-compressor"
TOPICS = (FETCH_RESULTS,)

logger = logging.getLogger(__name__)


@dataclass
class _Stored:
    event: ContentStored
    message: Message


class CompressHandler(EventHandler):
    """Stores bodies in ``handle``; makes them durable, then announces them, in ``end_batch``."""

    def __init__(
        self,
        store: ContentStore,
        out: EventProducer,
        *,
        max_body_bytes: int,
        agent: str = DEFAULT_AGENT_TOKEN,
        obey_directives: bool = True,
        metrics: StoreMetrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._out = out
        self._max_body_bytes = max_body_bytes
        self._agent = agent
        self._obey_directives = obey_directives
        self._decompressor = zstandard.ZstdDecompressor()
        self._pending: list[_Stored] = []
        self.stored = 0
        self.skipped = 0

    def handle(self, event: FetchResult, message: Message) -> None:
        if event.outcome != "ok" or not event.body_zstd:
            self.skipped += 1
            return
        body = self._decompress(event, message)
        html = is_html(event.content_type, body)
        title = extract_title(body, event.content_type) if html else None
        directives = (
            page_directives(
                body,
                content_type=event.content_type,
                x_robots_tag=event.headers.get("x-robots-tag"),
                agent=self._agent,
                html=html,
            )
            if self._obey_directives
            else RobotsDirectives()
        )
        recorded = directives.as_map()
        tags = sorted(recorded) + (["truncated"] if event.truncated else [])
        # InvalidUrl (a BadDataError) dead-letters the message: the store canonicalizes.
        location = self._store.put(
            event.url,
            body,
            content_type=event.content_type,
            title=title,
            status=event.status,
            fetched_at_ms=event.fetched_at_ms,
            tags=tags,
            response_head=event.response_head,  # kept for WARC export (ADR 022); None from older fetchers
            ip_address=event.ip_address,
            request_head=event.request_head,  # the WARC request record; None from older fetchers
            body_frame=event.body_zstd,  # decompressed to ``body`` above: stored as is (ADR 009)
        )
        entry = self._store.entry(event.url)
        assert entry is not None, "a put entry is readable at once"
        stored = ContentStored(
            url=entry.url,
            url_key=entry.url_key,
            domain=entry.domain,
            content_hash=entry.content_hash.hex(),
            location=ContentLocation(
                location.segment, location.offset, location.length, location.dict_id, location.tier
            ),
            size_bytes=len(body),
            stored_bytes=location.length,
            status=event.status,
            fetched_at_ms=event.fetched_at_ms,
            content_type=event.content_type,
            title=title,
            dataset_id=event.dataset_id,
            robots_directives=recorded,
        )
        self._pending.append(_Stored(stored, message))

    def _decompress(self, event: FetchResult, message: Message) -> bytes:
        try:
            # max_output_size only bounds frames without a content size: check the header too.
            declared = zstandard.frame_content_size(event.body_zstd)
            if declared > self._max_body_bytes:
                raise zstandard.ZstdError(f"frame declares {declared} bytes")
            # exactly one frame: the store keeps this frame as the body's (ContentStore.put)
            return self._decompressor.decompress(
                event.body_zstd, max_output_size=self._max_body_bytes, allow_extra_data=False
            )
        except zstandard.ZstdError as exc:
            raise BadDataError(
                f"expected body_zstd to be one zstd frame of at most {self._max_body_bytes} bytes "
                f"(fetch.max_body_bytes), found an undecodable or larger body for {event.url!r} at "
                f"{message.topic}[{message.partition}]@{message.offset}: {exc}; the producer must "
                "cap and compress bodies as the fetcher does"
            ) from exc

    def end_batch(self) -> None:
        if not self._pending:
            return
        # 2. durable first (see the module docstring), 3. then announced.
        self._store.sync()
        for item in self._pending:
            self._out.send(CONTENT_STORED, item.event)
            if self._metrics is not None:
                self._metrics.observe_put(item.event.size_bytes, item.event.stored_bytes)
        self.stored += len(self._pending)
        logger.debug("stored and announced %d bodies", len(self._pending))
        self._pending.clear()

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        # Every handled batch was synced in end_batch; sync again in case a caller
        # drives handle() without end_batch (cheap when nothing is dirty).
        self._store.sync()

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        # Records already written stay valid (puts are idempotent); nothing to drop.
        self._pending.clear()


def build(host: Host) -> LoopService:
    """Wire the service on ``<data_dir>/store`` (one writer process per store root)."""
    settings = host.settings
    store = ContentStore.from_settings(settings)
    out = host.event_producer()
    metrics = per_registry(StoreMetrics, host.registry)
    handler = CompressHandler(
        store,
        out,
        max_body_bytes=settings.fetch.max_body_bytes,
        agent=product_token(settings.fetch.user_agent),
        obey_directives=settings.crawl.obey_robots_directives,
        metrics=metrics,
    )
    loop = host.service_loop("bucket-compressor", GROUP, TOPICS, handler, producers=[out], batch_size=256)
    # Store maintenance (tiering by age, compaction) runs beside the loop on its own thread, one
    # bounded step every store.maintenance_interval_s; it blocks puts only while a step swaps
    # its batch in. Closing cancels a step in progress first, then closes the store.
    maintainer = StoreMaintainer.from_settings(store, settings)

    def close() -> None:
        metrics.watch(None)
        if maintainer is not None:
            maintainer.stop()
        try:  # the status page's last known numbers when no process holds the store (ADR 020)
            save_store_stats(settings.data_dir, store.stats())
        except (OSError, CrawlstreamError) as exc:
            logger.warning("bucket-compressor: cannot count the store for the status page: %s", exc)
        store.close()

    if maintainer is not None:
        maintainer.start()
    metrics.watch(store.stats, settings.metrics.store_interval_s)
    return LoopService(loop, handler, on_close=close)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
