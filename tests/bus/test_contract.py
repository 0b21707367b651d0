"""The bus contract, run against every backend (the ``bus`` fixture in conftest.py).

Services are written once against ``crawlstream.bus.Bus``; these tests are what both the
embedded log and a real Kafka broker must do identically. Tests read the partition count
with ``partition_count`` instead of assuming it. Topic and group names are unique per test
because the Kafka broker is shared by the whole session. The DLQ behaviour is tested with
the event codec (tests/events), which owns it.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from crawlstream.bus import Bus, Consumer, Message, Producer, TopicPartition
from crawlstream.urls import partition_for

if TYPE_CHECKING:
    from tests.bus.conftest import BusUnderTest

WAIT_S = 30.0  # a group's first assignment takes a second or more; bound everything


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def make_topic(bus: Bus, producer: Producer) -> tuple[str, int]:
    """A fresh topic and its partition count."""
    topic = unique("contract")
    bus.create_topics([topic], 4)
    return topic, producer.partition_count(topic)


def produce_numbered(producer: Producer, topic: str, partitions: int, per_partition: int) -> list[bytes]:
    """``per_partition`` messages ``b"<partition>:<i>"`` in each partition, flushed."""
    values = []
    for i in range(per_partition):
        for p in range(partitions):
            value = f"{p}:{i}".encode()
            producer.produce(topic, value, partition=p, key=f"k{p}".encode())
            values.append(value)
    producer.flush()
    return values


def consume_n(consumer: Consumer, count: int, timeout_s: float = WAIT_S) -> list[Message]:
    """Consume until ``count`` messages arrived (fails the test after ``timeout_s``)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s with {len(got)} of {count} messages")
        got.extend(consumer.consume(count - len(got), 0.5))
    return got


def consume_for(consumer: Consumer, duration_s: float) -> list[Message]:
    """Everything that arrives within ``duration_s`` (to show that nothing more comes)."""
    got: list[Message] = []
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        got.extend(consumer.consume(1000, 0.2))
    return got


def wait_assigned(consumer: Consumer, condition: Callable[[], bool] | None = None) -> None:
    """Poll (returning nothing: the topic is empty) until the member owns partitions."""
    deadline = time.monotonic() + WAIT_S
    check = condition or (lambda: bool(consumer.assignment()))
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"no assignment within {WAIT_S}s")
        assert consumer.poll(0.2) is None


def test_messages_keep_their_order_within_a_partition(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    values = produce_numbered(producer, topic, partitions, 30)
    consumer = bus.bus.consumer(unique("g"))
    consumer.subscribe([topic])
    got = consume_n(consumer, len(values))
    by_partition: dict[int, list[Message]] = defaultdict(list)
    for message in got:
        by_partition[message.partition].append(message)
    for p, messages in by_partition.items():
        assert [m.value for m in messages] == [f"{p}:{i}".encode() for i in range(30)]
        offsets = [m.offset for m in messages]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert sorted(by_partition) == list(range(partitions))
    consumer.close()
    producer.close()


def test_keys_headers_and_timestamps_round_trip(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, _ = make_topic(bus.bus, producer)
    headers = [("error", b"bad magic byte"), ("source", b"\x00\xffbinary"), ("error", b"second")]
    now_ms = int(time.time() * 1000)
    producer.produce(topic, b"with", partition=0, key=b"example.com", headers=headers, timestamp_ms=now_ms)
    producer.produce(topic, b"", partition=0, key=None, timestamp_ms=now_ms + 1)
    producer.flush()
    consumer = bus.bus.consumer(unique("g"))
    consumer.subscribe([topic])
    first, second = sorted(consume_n(consumer, 2), key=lambda m: m.offset)
    assert (first.key, first.value, list(first.headers), first.timestamp_ms) == (
        b"example.com", b"with", headers, now_ms,
    )
    assert (first.topic, first.partition, first.topic_partition) == (topic, 0, TopicPartition(topic, 0))
    assert (second.key, second.value, second.headers, second.timestamp_ms) == (None, b"", (), now_ms + 1)
    consumer.close()
    producer.close()


def test_partitioner_places_all_of_a_domains_events_in_one_partition(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    domains = [f"site{i}.example" for i in range(12)] + ["bbc.co.uk", "xn--bcher-kva.de"]
    for round_ in range(5):
        for domain in domains:
            producer.produce(
                topic, f"{domain}/{round_}".encode(), key=domain.encode(),
                partition=partition_for(domain, partitions),
            )
    producer.flush()
    consumer = bus.bus.consumer(unique("g"))
    consumer.subscribe([topic])
    got = consume_n(consumer, 5 * len(domains))
    seen: dict[str, set[int]] = defaultdict(set)
    for message in got:
        assert message.key is not None
        seen[message.key.decode()].add(message.partition)
    assert seen == {d: {partition_for(d, partitions)} for d in domains}
    consumer.close()
    producer.close()


def test_uncommitted_messages_come_again_after_a_crash(bus: BusUnderTest) -> None:
    """At-least-once: a consumer that dies before committing has its messages replayed."""
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    values = produce_numbered(producer, topic, partitions, 5)
    producer.close()
    group = unique("g")
    consumer = bus.bus.consumer(group)
    consumer.subscribe([topic])
    assert sorted(m.value for m in consume_n(consumer, len(values))) == sorted(values)
    consumer.close()  # no commit: the "crash"
    restarted = bus.reopen().consumer(group)
    restarted.subscribe([topic])
    assert sorted(m.value for m in consume_n(restarted, len(values))) == sorted(values)
    restarted.close()


def test_restart_resumes_from_committed_offsets(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    produce_numbered(producer, topic, partitions, 4)
    group = unique("g")
    consumer = bus.bus.consumer(group)
    consumer.subscribe([topic])
    consume_n(consumer, 4 * partitions)
    consumer.commit()
    all_partitions = [TopicPartition(topic, p) for p in range(partitions)]
    assert consumer.committed(all_partitions) == {tp: 4 for tp in all_partitions}
    later = [f"later:{p}".encode() for p in range(partitions)]
    for p, value in enumerate(later):
        producer.produce(topic, value, partition=p)
    producer.flush()
    consumer.close()
    producer.close()

    restarted = bus.reopen().consumer(group)
    restarted.subscribe([topic])
    got = consume_n(restarted, partitions)
    assert sorted(m.value for m in got) == sorted(later)
    assert all(m.offset == 4 for m in got)
    assert consume_for(restarted, 1.0) == []
    restarted.close()


def test_commit_with_explicit_offsets_is_what_a_restart_resumes_from(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, _ = make_topic(bus.bus, producer)
    for i in range(6):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    producer.flush()
    producer.close()
    group = unique("g")
    consumer = bus.bus.consumer(group)
    consumer.subscribe([topic])
    consume_n(consumer, 6)
    consumer.commit({TopicPartition(topic, 0): 2})  # processed only the first two
    consumer.close()
    restarted = bus.reopen().consumer(group)
    restarted.subscribe([topic])
    assert [m.value for m in consume_n(restarted, 4)] == [b"m2", b"m3", b"m4", b"m5"]
    restarted.close()


def test_seek_to_beginning_replays_every_message(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    values = produce_numbered(producer, topic, partitions, 3)
    consumer = bus.bus.consumer(unique("g"))
    consumer.subscribe([topic])
    consume_n(consumer, len(values))
    consumer.commit()
    consumer.seek_to_beginning()
    assert sorted(m.value for m in consume_n(consumer, len(values))) == sorted(values)
    consumer.close()
    producer.close()


def test_seek_to_timestamp_replays_from_that_time(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    base_ms = int(time.time() * 1000) - 60_000
    for p in range(partitions):
        for i in range(10):
            producer.produce(topic, f"{p}:{i}".encode(), partition=p, timestamp_ms=base_ms + i * 1000)
    producer.flush()
    consumer = bus.bus.consumer(unique("g"))
    consumer.subscribe([topic])
    consume_n(consumer, 10 * partitions)
    consumer.seek_to_timestamp(base_ms + 6500)  # between i=6 and i=7
    got = consume_n(consumer, 3 * partitions)
    expected = [f"{p}:{i}".encode() for p in range(partitions) for i in (7, 8, 9)]
    assert sorted(m.value for m in got) == sorted(expected)
    consumer.seek_to_timestamp(base_ms, [TopicPartition(topic, 0)])
    assert [m.value for m in consume_n(consumer, 10)] == [f"0:{i}".encode() for i in range(10)]
    consumer.close()
    producer.close()


def test_two_groups_each_see_every_message(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    values = produce_numbered(producer, topic, partitions, 5)
    first, second = bus.bus.consumer(unique("a")), bus.bus.consumer(unique("b"))
    first.subscribe([topic])
    second.subscribe([topic])
    assert sorted(m.value for m in consume_n(first, len(values))) == sorted(values)
    assert sorted(m.value for m in consume_n(second, len(values))) == sorted(values)
    first.close()
    second.close()
    producer.close()


def test_members_of_one_group_split_the_partitions_and_see_each_message_once(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    group = unique("g")
    events: list[tuple[str, str, list[TopicPartition]]] = []
    members = [bus.bus.consumer(group), bus.bus.consumer(group)]

    def join(name: str, member: Consumer) -> None:
        def on_revoke(tps: list[TopicPartition]) -> None:
            events.append((name, "revoke", tps))
            member.commit()  # hand over with nothing to replay

        member.subscribe(
            [topic], on_assign=lambda tps: events.append((name, "assign", tps)), on_revoke=on_revoke
        )

    join("a", members[0])
    wait_assigned(members[0], lambda: len(members[0].assignment()) == partitions)
    join("b", members[1])

    def split() -> bool:
        for member in members:
            member.poll(0.1)
        a, b = set(members[0].assignment()), set(members[1].assignment())
        return bool(a) and bool(b) and not (a & b) and len(a | b) == partitions

    wait_assigned(members[0], split)
    values = produce_numbered(producer, topic, partitions, 10)
    seen: Counter[bytes] = Counter()
    deadline = time.monotonic() + WAIT_S
    while sum(seen.values()) < len(values) and time.monotonic() < deadline:
        for member in members:
            batch = member.consume(100, 0.1)
            seen.update(m.value for m in batch)
            member.commit()
    assert seen == Counter(values)
    assert consume_for(members[0], 0.5) + consume_for(members[1], 0.5) == []
    # Callbacks announced the ownership each member ended with.
    for name, member in zip("ab", members, strict=True):
        owned: set[TopicPartition] = set()
        for who, kind, tps in events:
            if who == name:
                owned = owned | set(tps) if kind == "assign" else owned - set(tps)
        assert owned == set(member.assignment())
    assert any(who == "a" and kind == "revoke" for who, kind, _ in events)  # "a" gave some up
    for member in members:
        member.close()
    producer.close()


def test_a_closed_member_hands_its_partitions_to_the_rest_of_the_group(bus: BusUnderTest) -> None:
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    group = unique("g")
    first, second = bus.bus.consumer(group), bus.bus.consumer(group)
    first.subscribe([topic])
    second.subscribe([topic])

    def split() -> bool:
        first.poll(0.1)
        second.poll(0.1)
        return bool(first.assignment()) and bool(second.assignment())

    wait_assigned(first, split)
    first.close()
    values = produce_numbered(producer, topic, partitions, 3)
    assert sorted(m.value for m in consume_n(second, len(values))) == sorted(values)
    assert len(second.assignment()) == partitions
    second.close()
    producer.close()


def test_a_member_of_a_group_on_two_topics_owns_the_same_partitions_of_both(bus: BusUnderTest) -> None:
    """Co-partitioning (the scheduler's urls.frontier + fetch.results): partition p of each
    topic holds the same domains, so one member must own p of both, also after a member joins."""
    producer = bus.bus.producer()
    first_topic, partitions = make_topic(bus.bus, producer)
    second_topic, _ = make_topic(bus.bus, producer)
    topics = [first_topic, second_topic]
    group = unique("g")
    members = [bus.bus.consumer(group), bus.bus.consumer(group)]
    members[0].subscribe(topics)
    wait_assigned(members[0], lambda: len(members[0].assignment()) == 2 * partitions)
    members[1].subscribe(topics)

    def split() -> bool:
        for member in members:
            member.poll(0.1)
        a, b = set(members[0].assignment()), set(members[1].assignment())
        return bool(a) and bool(b) and not (a & b) and len(a | b) == 2 * partitions

    wait_assigned(members[0], split)
    for member in members:
        owned = defaultdict(set)
        for tp in member.assignment():
            owned[tp.topic].add(tp.partition)
        assert owned[first_topic] == owned[second_topic], member.assignment()
    for member in members:
        member.close()
    producer.close()


def test_end_offsets_are_the_next_offset_of_each_partition(bus: BusUnderTest) -> None:
    """What drain detection compares committed offsets with (crawlstream.crawl.LagProbe)."""
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    assert bus.bus.end_offsets(topic) == [0] * partitions
    produce_numbered(producer, topic, partitions, 3)
    producer.produce(topic, b"one more", partition=0)
    producer.flush()
    assert bus.bus.end_offsets(topic) == [4] + [3] * (partitions - 1)
    producer.close()


def test_start_offsets_are_zero_while_nothing_was_deleted(bus: BusUnderTest) -> None:
    """What replay checks before it trusts a topic to hold everything ever written."""
    producer = bus.bus.producer()
    topic, partitions = make_topic(bus.bus, producer)
    produce_numbered(producer, topic, partitions, 2)
    producer.close()
    assert bus.bus.start_offsets(topic) == [0] * partitions
    assert bus.bus.end_offsets(topic) == [2] * partitions
