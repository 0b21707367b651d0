"""The deduper on a real Kafka broker forwards each URL once across a member's death (ADR 038).

Session 18's soak put 1,733 URLs into ``urls.frontier`` twice or more: each was forwarded after
the deduper's last commit and snapshot, the member died (or its producer was abandoned in an
outage), and the next owner forwarded it again. The service is built as ``crawlstream service
deduper`` builds it (``build(host)``) and driven one ``run_once`` at a time; a member "dies" by
leaving its group without a commit and without closing its producer (a kill -9 closes nothing).
URLs carry a marker domain, so other tests' messages on the session broker's topics do not count.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from crawlstream.bus import KafkaBus
from crawlstream.dedupe import Deduper
from crawlstream.dedupe.service import build
from crawlstream.errors import BusUnavailable
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer, LocalSchemaIds
from crawlstream.runtime import Host, LoopService, open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import URLS_DISCOVERED, URLS_FRONTIER
from crawlstream.urls import canonicalize, url_key

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

URLS = 40
WAIT_S = 60.0


@pytest.fixture
def make_settings(kafka_cluster: Any, tmp_path: Path) -> Callable[..., Settings]:
    """Kafka settings on tmp_path whose loops commit only when idle (a busy batch is not committed
    yet when the member dies) and snapshot only on close."""

    def make(**env: str) -> Settings:
        base = {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_cluster.bootstrap_servers,
            "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
            "CRAWLSTREAM_BUS_PARTITIONS": "4",
            "CRAWLSTREAM_BUS_LINGER_MS": "1",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.2",
            "CRAWLSTREAM_BUS_COMMIT_INTERVAL_S": "3600",
            "CRAWLSTREAM_DEDUPE_SNAPSHOT_INTERVAL_S": "3600",
            # A member that left without a word is replaced within seconds, as in the soak's tests.
            "CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG": "consumer.session.timeout.ms=6000,"
            "consumer.heartbeat.interval.ms=500",
        }
        base.update(env)
        return load(base)

    return make


def _urls(marker: str) -> list[DiscoveredUrl]:
    out = []
    for i in range(URLS):
        c = canonicalize(f"http://d{i % 8}.{marker}.example/p/{i}")
        out.append(DiscoveredUrl(c.url, c.domain, url_key(c), 0, 1_700_000_000_000, "link"))
    return out


def _send(host: Host, events: list[DiscoveredUrl]) -> None:
    producer = host.bus.producer()
    try:
        sender = EventProducer(producer, host.codec)
        for event in events:
            sender.send(URLS_DISCOVERED, event)
        sender.flush()
    finally:
        producer.close()


def _forward_everything(service: LoopService, expected: int) -> None:
    """Run the member until it has consumed ``expected`` new messages of ours (it may replay others
    first). Each busy iteration forwards its batch; the commit waits for an idle poll."""
    handler: Any = service.handler
    deadline = time.monotonic() + WAIT_S
    while handler.forwarded_marked < expected:
        assert time.monotonic() < deadline, f"forwarded {handler.forwarded_marked} of {expected}"
        service.loop.run_once()


def _frontier(bootstrap: str, marker: str, expected: int) -> Counter[str]:
    """How often each URL of ``marker`` is in ``urls.frontier``, as a read_committed reader sees it
    (the scheduler's view): read until ``expected`` distinct URLs arrived, then a little more."""
    bus = KafkaBus(bootstrap)
    codec = EventCodec(LocalSchemaIds.bundled())
    consumer = bus.consumer(f"reader-{marker}")
    consumer.subscribe([URLS_FRONTIER])
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + WAIT_S
    settle = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for message in consumer.consume(500, 0.2):
                url = codec.decode(message.value, DiscoveredUrl).url
                if marker in url:
                    seen[url] += 1
            if settle is None and len(seen) >= expected:
                settle = time.monotonic() + 3.0  # a second copy would be right behind
    finally:
        consumer.close()
        bus.close()
    return seen


class _Marked:
    """Counts the forwards of marked URLs on a built deduper's handler (``forwarded_marked``)."""

    @staticmethod
    def install(service: LoopService, marker: str) -> None:
        handler: Any = service.handler
        handler.forwarded_marked = 0
        send = handler._out.send

        def counting(topic: str, event: Any, **kwargs: Any) -> None:
            if topic == URLS_FRONTIER and marker in event.url:
                handler.forwarded_marked += 1
            send(topic, event, **kwargs)

        handler._out.send = counting


def _member(
    settings: Settings, marker: str, stack: ExitStack, send: list[DiscoveredUrl] | None = None
) -> tuple[Host, LoopService]:
    """A deduper on a host of its own (``send``: discovered URLs put on the bus before it is
    built), counting its forwards of marked URLs."""
    host = stack.enter_context(open_host(settings))
    if send:
        _send(host, send)
    member = build(host)
    _Marked.install(member, marker)
    return host, member


@pytest.fixture
def marker() -> str:
    return f"m{uuid.uuid4().hex[:10]}"


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def test_a_member_killed_before_its_commit_does_not_get_its_forwards_made_twice(
    make_settings: Callable[..., Settings], marker: str, stack: ExitStack
) -> None:
    """Member 1 forwards every URL and dies before it commits; member 2 replays the partitions
    from the last commit. Before ADR 038 each URL reached urls.frontier twice (and was fetched
    twice); now the dead member's forwards were never committed, so only member 2's count."""
    settings = make_settings()
    events = _urls(marker)
    _, first = _member(settings, marker, stack, events)
    _forward_everything(first, URLS)
    first.loop.close()  # leaves the group, commits nothing; the producer is left as it was

    _, second = _member(settings, marker, stack)
    _forward_everything(second, URLS)  # member 1's forwards were not committed: all again
    second.loop.run_once()  # idle: commits
    second.close()

    seen = _frontier(settings.kafka_bootstrap_servers or "", marker, URLS)
    assert sorted(seen) == sorted(e.url for e in events), "every URL forwarded"
    assert {url: n for url, n in seen.items() if n > 1} == {}, "no URL forwarded twice"


def test_a_fenced_member_forwards_nothing_and_its_state_does_not_run_ahead_of_its_commit(
    make_settings: Callable[..., Settings], marker: str, stack: ExitStack
) -> None:
    """A member whose transaction cannot commit (here: another producer took its transactional.id,
    as a restarted member does) raises out of its loop like an outage, and is closed as
    ``run_standalone`` closes it before building it again: its forwards are aborted (a
    read_committed reader never sees them), its snapshot does not cover them, and the rebuilt
    member forwards each URL once."""
    settings = make_settings()
    events = _urls(marker)
    host, first = _member(settings, marker, stack, events)
    _forward_everything(first, URLS)
    transaction: Any = first.loop._transaction
    assert transaction is not None, "the deduper on Kafka forwards in transactions"
    fencer = host.bus.transactional_producer(transaction.transactional_id)  # type: ignore[attr-defined]
    fencer.close()
    with pytest.raises(BusUnavailable, match=r"(?i)fenced"):
        for _ in range(50):
            first.loop.run_once()  # the idle poll commits, and is refused
    first.close()  # the loop's error path: on_close writes what is safe to write
    host.close()
    for partition in range(settings.bus.partitions):
        offset = Deduper.from_settings(settings).load_partition(partition)
        assert offset is None or offset <= _committed(settings, partition), "snapshot ahead of the commit"

    _, second = _member(settings, marker, stack)
    _forward_everything(second, URLS)
    second.loop.run_once()
    second.close()
    seen = _frontier(settings.kafka_bootstrap_servers or "", marker, URLS)
    assert sorted(seen) == sorted(e.url for e in events), "every URL forwarded"
    assert {url: n for url, n in seen.items() if n > 1} == {}, "the aborted forwards are not visible"


def _committed(settings: Settings, partition: int) -> int:
    from crawlstream.bus import TopicPartition
    from crawlstream.dedupe.service import GROUP

    bus = KafkaBus(settings.kafka_bootstrap_servers or "")
    consumer = bus.consumer(GROUP)
    try:
        tp = TopicPartition(URLS_DISCOVERED, partition)
        return consumer.committed([tp]).get(tp) or 0
    finally:
        consumer.close()
        bus.close()


def test_partitions_moved_to_a_new_member_mid_stream_are_forwarded_once(
    make_settings: Callable[..., Settings], marker: str, stack: ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second member joins while the first holds forwards it has not committed: the first
    commits them in its revoke callback (while it still owns the partitions), then snapshots;
    the newcomer resumes from that commit. Every URL once, none lost."""
    from crawlstream.dedupe import service

    settings = make_settings()
    events = _urls(marker)
    first_host, first = _member(settings, marker, stack, events[: URLS // 2])
    open_at_revoke: list[bool] = []
    on_revoke = first.loop._on_revoke

    def recording(partitions: list[Any]) -> None:
        open_at_revoke.append(first.loop._transaction.in_transaction)  # type: ignore[union-attr]
        on_revoke(partitions)

    first.loop._on_revoke = recording  # type: ignore[method-assign]
    _forward_everything(first, URLS // 2)  # not committed: busy iterations only

    monkeypatch.setattr(service, "transactional_id", lambda: f"{service.GROUP}.second-{marker}")  # two live members
    _, second = _member(settings, marker, stack)
    joining = time.monotonic() + 10.0  # the first does not poll meanwhile: its revoke is pending when it does
    while time.monotonic() < joining:
        second.loop.run_once()
    deadline = time.monotonic() + WAIT_S
    while not (first.loop._consumer.assignment() and second.loop._consumer.assignment()):
        assert time.monotonic() < deadline, "the partitions were not shared"
        first.loop.run_once()
        second.loop.run_once()
    assert open_at_revoke[:1] == [True], "the first member was revoked with its forwards not committed"
    _send(first_host, events[URLS // 2:])
    forwarded = lambda: first.handler.forwarded_marked + second.handler.forwarded_marked  # type: ignore[attr-defined]  # noqa: E731
    while forwarded() < URLS:
        assert time.monotonic() < deadline, f"forwarded {forwarded()} of {URLS}"
        first.loop.run_once()
        second.loop.run_once()
    first.loop.run_once()
    second.loop.run_once()
    first.close()
    second.close()
    seen = _frontier(settings.kafka_bootstrap_servers or "", marker, URLS)
    assert sorted(seen) == sorted(e.url for e in events), "every URL forwarded"
    assert {url: n for url, n in seen.items() if n > 1} == {}, "no URL forwarded twice"
