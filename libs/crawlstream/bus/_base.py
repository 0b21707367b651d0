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

Kafka adds transactions (``TransactionalProducer``, ADR 038): what a producer sent and the
offsets of the input that produced it commit together, or neither does, as read_committed
consumers see it. The embedded log has none (one process: nothing to fence).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crawlstream.errors import ConfigError

__all__ = [
    "Bus",
    "Consumer",
    "Message",
    "PartitionsCallback",
    "Producer",
    "TopicPartition",
    "TransactionalProducer",
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


class TransactionalProducer(Producer):
    """A producer whose messages become visible together with consumer offsets, or never.

    ``produce`` opens a transaction when none is open. ``commit_transaction(offsets, consumer)``
    adds ``offsets`` (next offset per partition) for ``consumer``'s group and commits: after it
    returns, the messages and the offsets are durable together. If it raises ``BusUnavailable``,
    the transaction was aborted (or the producer is dead): neither the messages nor the offsets
    exist, and the caller must drop whatever state it built from that input (rebuild from the
    last commit) rather than commit it later. ``close`` aborts an open transaction.
    """

    transactional_id: str

    @property
    @abstractmethod
    def in_transaction(self) -> bool:
        """Whether a transaction is open (something was produced since the last commit or abort)."""

    @abstractmethod
    def commit_transaction(self, offsets: Mapping[TopicPartition, int], consumer: Consumer) -> None:
        """Commit what was produced and ``offsets`` of ``consumer``'s group atomically."""

    @abstractmethod
    def abort_transaction(self) -> None:
        """Drop what the open transaction holds (nothing happens when none is open)."""


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

    def positions(self) -> dict[TopicPartition, int]:
        """Owned partitions whose next offset is past the last message returned (or, with none
        returned since their assignment and no seek, past the committed offset), and that offset:
        records the backend reads but never returns (Kafka: transaction markers, aborted messages)
        are skipped, and a commit may cover them, else a group's lag never reaches 0 behind a
        transactional producer. Default: none."""
        return {}

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

    @property
    def transactions(self) -> bool:
        """Whether ``transactional_producer`` works on this backend (Kafka: yes)."""
        return False

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        """A new producer with transactions under ``transactional_id`` (one live producer per id:
        a second one fences the first, aborting its open transaction)."""
        raise ConfigError(f"{type(self).__name__} has no transactions (transactional id {transactional_id!r})")

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
