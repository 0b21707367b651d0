"""A member that reads a partition again never moves its group's commit back (issue 28, ADR 038).

The deduper replays a partition from its Bloom snapshot up to the group's committed offset when
it is given the partition; the loop committed what it re-read, below that offset. A revoke or a
death in the middle of the replay then left the next owner a commit behind the forwards already
made, and it forwarded them again. Reproduced on the embedded bus with a handler that seeks back
on assignment, as the deduper does.
"""

from __future__ import annotations

from collections.abc import Callable

from crawlstream.bus import Consumer, Message, TopicPartition
from crawlstream.events import DiscoveredUrl
from crawlstream.runtime import EventHandler
from crawlstream.settings import Settings
from crawlstream.topics import URLS_DISCOVERED
from crawlstream.urls import canonicalize, url_key
from tests.services._support import host_for

GROUP = "test.floor"


class _Reads(EventHandler):
    def __init__(self) -> None:
        self.read: list[int] = []

    def handle(self, event: DiscoveredUrl, message: Message) -> None:
        self.read.append(message.offset)


class _Rereads(_Reads):
    """Seeks every partition it is given back to its first message."""

    def __init__(self, consumer: Consumer) -> None:
        super().__init__()
        self.consumer = consumer

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.consumer.seek(tp, 0)


def test_rereading_a_partition_never_moves_the_group_commit_back(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(CRAWLSTREAM_BUS_PARTITIONS="1", CRAWLSTREAM_BUS_COMMIT_INTERVAL_S="0")
    tp = TopicPartition(URLS_DISCOVERED, 0)
    with host_for(settings) as host:
        out = host.event_producer()
        for i in range(10):
            c = canonicalize(f"http://a.example.org/p/{i}")
            out.send(URLS_DISCOVERED, DiscoveredUrl(c.url, c.domain, url_key(c), 0, 1_700_000_000_000, "link"))
        out.flush(10)
        first = host.bus.consumer(GROUP)
        loop = host.service_loop("first", GROUP, [URLS_DISCOVERED], _Reads(), consumer=first, batch_size=100)
        while loop.run_once():
            pass
        loop.close()
        assert host.bus.consumer(GROUP).committed([tp])[tp] == 10

        again = host.bus.consumer(GROUP)
        handler = _Rereads(again)
        loop = host.service_loop("again", GROUP, [URLS_DISCOVERED], handler, consumer=again, batch_size=3)
        loop.run_once()
        loop.run_once()  # read 0..5 again, and committed after each batch
        assert handler.read[:6] == [0, 1, 2, 3, 4, 5]
        loop.close()
        assert host.bus.consumer(GROUP).committed([tp])[tp] == 10
