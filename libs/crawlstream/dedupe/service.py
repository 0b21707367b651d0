"""Deduper wiring: consume ``urls.discovered``, forward never-seen URLs to ``urls.frontier``
(and the raw form of each one first seen non-canonical to ``urls.records``, ADR 024).

State: one Bloom filter per owned partition (``crawlstream.dedupe``), snapshotted with the
bus offset it covers. On assignment the partition is replayed from its snapshot's offset:
messages before the group's committed offset were forwarded already, so during the replay
they only re-enter the filter; after it, new URLs are forwarded again as usual. A raw-forms
row goes through the same producer as its forward, so both are flushed before the snapshot
and the commit that cover them.

Delivery (ADR 038). On Kafka (``dedupe.transactional``, the default) forwards and offsets
commit in one transaction, and a snapshot is written only after the commit that covers it
(``after_commit``), never past the committed offset: a member that dies, is fenced, or loses
its partitions with a transaction open has forwarded nothing a reader sees, and its successor
forwards those URLs once. On the embedded bus (one process) and with transactions off it is
at-least-once: the forwards are flushed before the snapshot and the commit, and what a member
forwarded after its last commit is forwarded again by the next owner.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

from crawlstream.bus import Consumer, Message, TopicPartition
from crawlstream.dedupe import Deduper, raw_form_record
from crawlstream.events import DiscoveredUrl, EventProducer
from crawlstream.runtime import EventHandler, Host, LoopService, run_standalone
from crawlstream.settings import Settings
from crawlstream.topics import URLS_DISCOVERED, URLS_FRONTIER, URLS_RECORDS
from crawlstream.urls import canonicalize, url_key

GROUP = "crawlstream.deduper"
TOPICS = (URLS_DISCOVERED,)

logger = logging.getLogger(__name__)


def transactional_id(group: str = GROUP) -> str:
    """This member's ``transactional.id``: unique among live members (two would fence each other),
    and the same for a service rebuilt in this process or a container restarted in its pod (same
    host name, PID 1), whose ``init_transactions`` then aborts what its predecessor left open at
    once. A new pod has a new name: its predecessor's open transaction stalls read_committed
    readers of the partitions it wrote to until ``bus.transaction_timeout_s`` (ADR 038)."""
    return f"{group}.{socket.gethostname()}.{os.getpid()}"


class DedupeHandler(EventHandler):
    """Dedupes a batch per partition in ``end_batch``; see the module docstring for the state.

    ``transactional``: the loop commits forwards and offsets in one transaction; snapshots are
    then written after a commit (``after_commit``) and never cover an offset not committed.
    """

    def __init__(
        self,
        deduper: Deduper,
        consumer: Consumer,
        out: EventProducer,
        snapshot_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        transactional: bool = False,
    ) -> None:
        self._deduper = deduper
        self._transactional = transactional
        self._committed: dict[int, int] = {}  # transactional: what the filter may cover when written
        self._consumer = consumer
        self._out = out
        self._snapshot_interval_s = snapshot_interval_s
        self._clock = clock
        self._replay_until: dict[int, int] = {}
        self._next_offset: dict[int, int] = {}
        self._pending: list[tuple[DiscoveredUrl, Message]] = []
        self._last_snapshot = clock()
        self.forwarded = 0
        self.raw_forms = 0  # raw-forms rows published (URLs first seen non-canonical)

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        committed = self._consumer.committed(partitions)
        for tp in partitions:
            snapshot_offset = self._deduper.load_partition(tp.partition)
            # What the filter covers until this member reads more: a partition given back unread
            # is written back at its snapshot's offset, not at none (a replay from the start).
            self._forget(tp.partition)
            if snapshot_offset is not None:
                self._next_offset[tp.partition] = snapshot_offset
            done = committed.get(tp)
            self._committed[tp.partition] = max(done or 0, snapshot_offset or 0)
            start = snapshot_offset if snapshot_offset is not None else 0
            if done is not None and start < done:
                self._consumer.seek(tp, start)
                self._replay_until[tp.partition] = done

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        # A snapshot may only cover URLs whose forwards are durable (transactional: committed;
        # the loop committed them before this call).
        if not self._transactional:
            self._out.flush()
        for tp in partitions:
            if tp.partition in self._deduper.owned_partitions:
                self._write(tp.partition, self._next_offset.get(tp.partition))
                self._deduper.drop_partition(tp.partition)
            self._forget(tp.partition)

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._deduper.drop_partition(tp.partition)
            self._forget(tp.partition)

    def _forget(self, partition: int) -> None:
        """Offsets of a partition this member no longer owns: a later assignment starts from its snapshot."""
        self._next_offset.pop(partition, None)
        self._replay_until.pop(partition, None)
        self._committed.pop(partition, None)

    def handle(self, event: DiscoveredUrl, message: Message) -> None:
        # Producers outside this system may send any string: re-derive the identity.
        canonical = canonicalize(event.url)
        key = url_key(canonical)
        if (canonical.url, canonical.domain, key) != (event.url, event.domain, event.url_key):
            # A non-canonical URL is its own raw form unless the producer said how it was written.
            raw = event.raw_url if event.raw_url is not None or event.url == canonical.url else event.url
            event = dataclasses.replace(event, url=canonical.url, domain=canonical.domain, url_key=key, raw_url=raw)
        self._pending.append((event, message))

    def end_batch(self) -> None:
        by_partition: dict[int, list[tuple[DiscoveredUrl, Message]]] = {}
        for event, message in self._pending:
            by_partition.setdefault(message.partition, []).append((event, message))
        self._pending.clear()
        for partition, items in by_partition.items():
            fresh = self._deduper.check_and_add(partition, [(e.url_key, e.url) for e, _ in items])
            replay_until = self._replay_until.get(partition, -1)
            for (event, message), is_new in zip(items, fresh, strict=True):
                if is_new and message.offset >= replay_until:
                    self._out.send(URLS_FRONTIER, event)
                    self.forwarded += 1
                    if event.raw_url is not None:
                        record = raw_form_record(event)
                        if record is not None:
                            self._out.send(URLS_RECORDS, record)
                            self.raw_forms += 1
            self._next_offset[partition] = items[-1][1].offset + 1
        if not self._transactional and self._clock() - self._last_snapshot >= self._snapshot_interval_s:
            self.snapshot()

    def after_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not self._transactional:
            return
        for tp, offset in offsets.items():
            self._committed[tp.partition] = max(offset, self._committed.get(tp.partition, 0))
        if self._clock() - self._last_snapshot >= self._snapshot_interval_s:
            self.snapshot()

    def snapshot(self) -> None:
        """Write each owned partition's filter with the offset it covers. The forwards of those
        URLs are flushed first: a snapshot ahead of them would, after a kill -9, mark URLs seen
        whose frontier events never reached the bus (the restart replays from the committed
        offset and finds them in the filter), and they would never be crawled. Transactional:
        a partition whose filter holds URLs of a transaction not committed is skipped (on close
        after a failed commit: its forwards were aborted)."""
        if not self._transactional:
            self._out.flush()
        for partition in self._deduper.owned_partitions:
            if partition in self._next_offset:
                self._write(partition, self._next_offset[partition])
        self._last_snapshot = self._clock()

    def _write(self, partition: int, offset: int | None) -> None:
        if self._transactional and offset is not None and offset > self._committed.get(partition, 0):
            logger.info("dedupe partition %d: no snapshot at offset %d, past the committed %d",
                        partition, offset, self._committed.get(partition, 0))
            return
        self._deduper.flush_partition(partition, offset)


def build(host: Host) -> LoopService:
    settings = host.settings
    consumer = host.bus.consumer(GROUP)
    transaction = None
    if settings.dedupe.transactional and host.bus.transactions:
        out, transaction = host.transactional_event_producer(transactional_id())
    else:
        out = host.event_producer()
    handler = DedupeHandler(Deduper.from_settings(settings), consumer, out, settings.dedupe.snapshot_interval_s,
                            transactional=transaction is not None)
    loop = host.service_loop("deduper", GROUP, TOPICS, handler, producers=[out], consumer=consumer,
                             transaction=transaction)
    return LoopService(loop, handler, on_close=handler.snapshot)


def run(settings: Settings) -> int:
    return run_standalone(settings, build)
