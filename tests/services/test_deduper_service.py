"""The deduper's Bloom snapshot never runs ahead of its forwards (a kill -9 lost URLs so)."""

from __future__ import annotations

from collections.abc import Callable

from crawlstream.bus import Message, TopicPartition
from crawlstream.dedupe import Deduper
from crawlstream.dedupe.service import DedupeHandler
from crawlstream.events import DiscoveredUrl
from crawlstream.settings import Settings
from crawlstream.topics import URLS_DISCOVERED, URLS_FRONTIER
from crawlstream.urls import canonicalize, partition_for, url_key
from tests.services._support import host_for, read_topic


def test_a_snapshot_is_written_only_after_the_forwards_it_covers_are_flushed(
    make_settings: Callable[..., Settings],
) -> None:
    """Seen in the seeded kill -9 schedule: the snapshot (offset past a batch) was written while
    that batch's frontier events sat in the producer's buffer; after SIGKILL the restart read
    from the committed offset, found the URLs in the filter and never forwarded them."""
    settings = make_settings(CRAWLSTREAM_BUS_LINGER_MS="60000")  # nothing leaves the buffer by itself
    with host_for(settings) as host:
        out = host.event_producer()
        deduper = Deduper.from_settings(settings)
        handler = DedupeHandler(deduper, host.bus.consumer("t"), out, 0.0)
        urls = [canonicalize(f"http://a.example.org/p/{i}") for i in range(3)]
        partition = partition_for(urls[0].domain, settings.bus.partitions)
        deduper.load_partition(partition)
        for offset, c in enumerate(urls):
            event = DiscoveredUrl(c.url, c.domain, url_key(c), 0, 1_700_000_000_000, "link")
            handler.handle(event, Message(URLS_DISCOVERED, partition, offset, b"", b"", (), 0))
        handler.end_batch()  # interval 0: snapshots now, before any loop flush
        assert handler.forwarded == 3
        forwarded = read_topic(host, URLS_FRONTIER, 3, timeout_s=2.0)
        assert sorted(host.codec.decode(m.value).url for m in forwarded) == sorted(c.url for c in urls)


def test_a_partition_given_back_unread_keeps_the_offset_its_snapshot_covers(
    make_settings: Callable[..., Settings],
) -> None:
    """Seen in session 18's 2-hour soak: a member assigned a partition and revoked before it read
    from it wrote the snapshot back with no offset, so the next owner replayed the partition
    from its first message (the log: "loaded snapshot (56622 members, offset None)"), which
    costs time and memory that grow with the topic's history."""
    settings = make_settings()
    with host_for(settings) as host:
        c = canonicalize("http://a.example.org/p/0")
        tp = TopicPartition(URLS_DISCOVERED, partition_for(c.domain, settings.bus.partitions))
        first = DedupeHandler(Deduper.from_settings(settings), host.bus.consumer("t"), host.event_producer(), 0.0)
        first.on_assign([tp])
        for offset in range(3):
            u = canonicalize(f"http://a.example.org/p/{offset}")
            event = DiscoveredUrl(u.url, u.domain, url_key(u), 0, 1_700_000_000_000, "link")
            first.handle(event, Message(URLS_DISCOVERED, tp.partition, offset, b"", b"", (), 0))
        first.end_batch()
        first.on_revoke([tp])
        assert Deduper.from_settings(settings).load_partition(tp.partition) == 3

        second = DedupeHandler(Deduper.from_settings(settings), host.bus.consumer("t"), host.event_producer(), 0.0)
        second.on_assign([tp])
        second.on_revoke([tp])  # nothing read in between
        assert Deduper.from_settings(settings).load_partition(tp.partition) == 3
        second.on_assign([tp])  # and back again: the filter still knows the URLs
        assert second._deduper.check_and_add(tp.partition, [(url_key(c), c.url)]) == [False]
