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

Members scale by the domain checksum (ADR 028): the store is 128 shards, one per checksum, and
a member owns the shards of the ``fetch.results`` partitions it holds (``c mod P == p``): it takes
them in ``on_assign`` and syncs and closes them in ``on_revoke`` / ``on_lost`` (their locks drop,
so the next owner opens them; a write after that is refused). A message whose domain is not in its
partition (a producer that did not partition by the domain checksum) is dead-lettered.

Store maintenance runs beside the loop (``StoreMaintainer``, a background thread): every
``store.maintenance_interval_s`` one bounded step, on the next owned shard with work, moves the
oldest pages due for a deeper tier (``store.warm_after_s`` …) or compacts segments with dead
space (ADR 018). Events already sent keep the location they were stored at (``shard`` names the
shard); readers look pages up by URL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import zstandard

from crawlstream.bus import Message, TopicPartition
from crawlstream.errors import BadDataError, CrawlstreamError, ShardNotOwned
from crawlstream.events import ContentLocation, ContentStored, EventProducer, FetchResult
from crawlstream.links import DEFAULT_AGENT_TOKEN, RobotsDirectives, extract_title, is_html, page_directives
from crawlstream.metrics import StoreMetrics, per_registry
from crawlstream.robots import product_token
from crawlstream.runtime import EventHandler, Host, LoopService, run_standalone
from crawlstream.settings import Settings
from crawlstream.status import save_store_stats
from crawlstream.store._maintenance import StoreMaintainer
from crawlstream.store._model import Location
from crawlstream.store._shards import ALL_CHECKSUMS, SHARDS, ShardedStore, open_store
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
        store: ShardedStore,
        out: EventProducer,
        *,
        max_body_bytes: int,
        partition_count: Callable[[], int] | None = None,
        agent: str = DEFAULT_AGENT_TOKEN,
        obey_directives: bool = True,
        metrics: StoreMetrics | None = None,
    ) -> None:
        self._store = store
        self._partition_count = partition_count
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
        location = self._put(event, message, body, title, tags)
        entry = self._store.entry(event.url)
        assert entry is not None, "a put entry is readable at once"
        stored = ContentStored(
            url=entry.url,
            url_key=entry.url_key,
            domain=entry.domain,
            content_hash=entry.content_hash.hex(),
            location=ContentLocation(
                location.segment,
                location.offset,
                location.length,
                location.dict_id,
                location.tier,
                self._store.shard_of(entry.domain),
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

    def _put(self, event: FetchResult, message: Message, body: bytes, title: str | None, tags: list[str]) -> Location:
        try:
            return self._store.put(
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
        except ShardNotOwned as exc:
            raise BadDataError(
                f"{event.url!r} at {message.topic}[{message.partition}]@{message.offset} is not in the partition "
                f"its domain's checksum maps to, so its content-store shard belongs to another member ({exc}); "
                "producers must partition fetch.results by the domain checksum (schemas/README.md)"
            ) from exc

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

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        self._store.own(self._checksums(partitions))

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        # Every handled batch was synced in end_batch; release syncs and closes the shards, so
        # the next owner can open them (and this member can no longer write them).
        self._store.release(self._checksums(partitions))

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        # Records already written stay valid (puts are idempotent); the shards are closed now.
        self._pending.clear()
        self._store.release(self._checksums(partitions))

    def _checksums(self, partitions: list[TopicPartition]) -> set[int]:
        """The domain checksums of ``partitions``: c with c mod P == p (P divides 128)."""
        count = self._partition_count() if self._partition_count is not None else 1
        mine = {tp.partition for tp in partitions if tp.topic == FETCH_RESULTS}
        return {c for c in range(SHARDS) if c % count in mine}


def build(host: Host) -> LoopService:
    """Wire the service on ``<data_dir>/store``: it writes the shards of the partitions it holds."""
    settings = host.settings
    store = open_store(settings, owned=())
    out = host.event_producer()
    metrics = per_registry(StoreMetrics, host.registry)

    def save_stats() -> None:
        """The status page's last known numbers when no process holds the store (ADR 020). Only a
        member that still owns every shard at close counts them (the embedded crawl): another
        member's shards are its own (opening one would wait for its lock), and a partial count
        would mislead. A Kafka member has given its partitions back by then (the consumer's close
        revokes them): ``crawlstream store stats`` saves the numbers too."""
        if store.owned != ALL_CHECKSUMS:
            return
        try:
            save_store_stats(settings.data_dir, store.stats())
        except (OSError, CrawlstreamError) as exc:
            logger.warning("bucket-compressor: cannot count the store for the status page: %s", exc)

    handler = CompressHandler(
        store,
        out,
        max_body_bytes=settings.fetch.max_body_bytes,
        partition_count=lambda: out.partition_count(FETCH_RESULTS),
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
        metrics.watch_codec_cache(None)
        if maintainer is not None:
            maintainer.stop()
        save_stats()  # when the consumer's close did not revoke first (the embedded log)
        store.close()

    if maintainer is not None:
        maintainer.start()
    metrics.watch(store.stats, settings.metrics.store_interval_s)
    metrics.watch_codec_cache(store.codec_cache)
    return LoopService(loop, handler, on_close=close)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
