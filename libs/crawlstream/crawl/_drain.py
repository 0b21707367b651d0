"""When is a crawl done? Drain detection over the bus and the scheduler.

Work is always somewhere observable: in a message not yet committed by some consumer group
(lag), or in the scheduler's Redis state (a domain in a ready queue, or a ticket in flight).
Handlers produce (and flush) before they commit, and the scheduler records a ticket before
its request is produced, so work never passes through an unobservable state. Observing is
not atomic, though: reading the lag and then the scheduler could miss work that moved from
a topic into the scheduler in between. So one check reads the lag, then the scheduler, then
the lag again, and counts as idle only if both lag readings are zero *and* no topic grew in
between (same end offsets): then no message was produced during the check, and at the
moment the scheduler was read nothing was anywhere. ``DrainDetector`` further asks for a
few idle checks in a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from crawlstream.bus import Consumer, TopicPartition

__all__ = ["BusLag", "DrainDetector", "LagProbe", "is_idle"]


@dataclass(frozen=True)
class BusLag:
    """End offsets of the watched partitions and the summed lag of the watched groups."""

    ends: Mapping[TopicPartition, int]
    lag: int
    lag_by_group: Mapping[str, int]


def is_idle(before: BusLag, scheduler_busy: int, after: BusLag) -> bool:
    """One check (lag, scheduler, lag again) found nothing anywhere; see the module docstring."""
    return before.lag == 0 and after.lag == 0 and scheduler_busy == 0 and dict(before.ends) == dict(after.ends)


class DrainDetector:
    """Says drained after ``required`` idle checks in a row; any busy check starts over."""

    def __init__(self, required: int = 2) -> None:
        if required < 1:
            raise ValueError("required must be >= 1")
        self.required = required
        self.idle_checks = 0

    def observe(self, idle: bool) -> bool:
        self.idle_checks = self.idle_checks + 1 if idle else 0
        return self.idle_checks >= self.required


class LagProbe:
    """Reads committed offsets of consumer groups against the topics' end offsets.

    ``consumers`` holds one consumer per group that is *not* subscribed (it only reads the
    group's commits, it never joins); ``end_offsets(topic)`` gives each partition's log end.
    """

    def __init__(
        self,
        consumers: Mapping[str, Consumer],
        topics_by_group: Mapping[str, Sequence[str]],
        end_offsets: Callable[[str], Sequence[int]],
    ) -> None:
        self._consumers = dict(consumers)
        self._topics_by_group = {g: tuple(t) for g, t in topics_by_group.items()}
        self._end_offsets = end_offsets

    def read(self) -> BusLag:
        topics = sorted({t for ts in self._topics_by_group.values() for t in ts})
        ends = {
            TopicPartition(topic, p): end for topic in topics for p, end in enumerate(self._end_offsets(topic))
        }
        lag_by_group: dict[str, int] = {}
        for group, group_topics in self._topics_by_group.items():
            tps = [tp for tp in ends if tp.topic in group_topics]
            committed = self._consumers[group].committed(tps)
            lag_by_group[group] = sum(max(0, ends[tp] - (committed.get(tp) or 0)) for tp in tps)
        return BusLag(ends, sum(lag_by_group.values()), lag_by_group)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
