"""The event bus interface: what every service is written against, whatever the backend.

Two backends implement it: the embedded durable log (one process, files on disk) and
Kafka (confluent-kafka). A service never imports a backend; it receives a ``Bus``.

Caller's contract, in the words of confluent-kafka's cooperative consumer example:

1. ``poll``/``consume`` with a short timeout so the loop notices shutdown;
2. process each message completely (including producing and flushing what it emits);
3. only then ``commit()``: the committed position is what a restart resumes from, so a
   crash before the commit replays the message (at-least-once; sinks are idempotent);
4. ``close()`` in ``finally``: commits nothing by itself, leaves the group so the
   partitions move to another member at once.

Partition ownership is announced through the callbacks given to ``subscribe``:
``on_assign`` before the first message of a newly owned partition, ``on_revoke`` when a
partition is handed over cleanly (flush its state, then commit, then return), ``on_lost``
when ownership was already taken away (drop its state; committing would be rejected).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "Bus",
    "Consumer",
    "Message",
    "PartitionsCallback",
    "Producer",
    "TopicPartition",
]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Message:
    """One record as read from a topic. ``value`` is the raw wire bytes (not decoded)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


PartitionsCallback = Callable[[list[TopicPartition]], None]


class Producer(ABC):
    """Sends messages to explicit partitions. Thread-compatible, not thread-safe."""

    @abstractmethod
    def produce(
        self,
        topic: str,
        value: bytes,
        *,
        partition: int,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one message. It is not durable, and may be lost, until ``flush`` returns."""

    @abstractmethod
    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until every queued message is acknowledged.

        Raises ``BusUnavailable`` if any queued message could not be delivered in time; the
        caller must then not commit what produced them.
        """

    @abstractmethod
    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic`` (creating it with the bus default if it does not exist)."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release resources."""


class Consumer(ABC):
    """A member of one consumer group. Not thread-safe: one loop owns it."""

    @abstractmethod
    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
    ) -> None:
        """Join the group for ``topics``; callbacks run inside ``poll``/``consume``."""

    @abstractmethod
    def poll(self, timeout_s: float) -> Message | None:
        """The next message of an owned partition, or None if none arrived in time."""

    @abstractmethod
    def consume(self, max_messages: int, timeout_s: float) -> list[Message]:
        """Up to ``max_messages``, returning early with what arrived once ``timeout_s`` passes."""

    @abstractmethod
    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Synchronously commit. ``offsets`` maps a partition to the *next* offset to read;
        None commits the position after every message returned so far."""

    @abstractmethod
    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed next-offset per partition (None: nothing committed)."""

    @abstractmethod
    def assignment(self) -> list[TopicPartition]:
        """Partitions this member owns now."""

    @abstractmethod
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make the next read of an owned ``partition`` start at ``offset``."""

    @abstractmethod
    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Replay owned partitions (all if None) from their first retained offset."""

    @abstractmethod
    def seek_to_timestamp(self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Replay owned partitions from the first message at or after ``timestamp_ms``."""

    @abstractmethod
    def close(self) -> None:
        """Leave the group (partitions move to other members). Does not commit."""


class Bus(ABC):
    """A factory of producers and consumers over one backend, plus topic administration."""

    @abstractmethod
    def producer(self) -> Producer:
        """A new producer."""

    @abstractmethod
    def consumer(self, group_id: str) -> Consumer:
        """A new member of ``group_id``. A group with no committed offset starts at the beginning."""

    @abstractmethod
    def create_topics(self, topics: Iterable[str], partitions: int) -> None:
        """Create the topics that do not exist yet, each with ``partitions`` partitions."""

    @abstractmethod
    def partition_count(self, topic: str) -> int:
        """Partitions of an existing ``topic``; raises ``BusUnavailable`` if unknown."""

    @abstractmethod
    def end_offsets(self, topic: str) -> list[int]:
        """The log end (next offset) of each partition of an existing ``topic``: minus a group's
        committed offsets, the group's lag (how a drained crawl is told apart)."""

    @abstractmethod
    def start_offsets(self, topic: str) -> list[int]:
        """The first retained offset of each partition of an existing ``topic``: above 0, retention
        has deleted the beginning, and a replay from it would rebuild less than was written."""

    @abstractmethod
    def close(self) -> None:
        """Release the backend (files, network). Producers and consumers must be closed first."""
