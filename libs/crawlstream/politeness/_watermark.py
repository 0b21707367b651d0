"""How far the scheduler has read ``fetch.results``: the clock its tickets' leases expire by.

A lease exists for a request that will never be answered (a crash before it was produced, a
fetcher that dropped it). A wall clock cannot tell that apart from a result that is on its way
but not yet read: a scheduler behind on its input reclaimed every ticket whose result waited in
the topic past the lease, fetched those URLs again and spent their retries (the 2-hour soak,
ADR 035). A ticket is overdue only once the scheduler has read every result produced before
its deadline, which it knows two ways: it read a result produced later (``fetch.results`` is
partitioned like the scheduler's domains, so a partition's results arrive in produce order, give
or take the clocks of the fetchers), or it caught up with the partition's end.

Pure: no I/O. A partition whose reading is unknown (just assigned, nothing read, no catch-up
seen) expires nothing yet; the service's loop reports a catch-up within its lag interval.
"""

from __future__ import annotations

from collections.abc import Mapping


class ResultsWatermark:
    """Per scheduler partition, the time (epoch ms) up to which every result has been read."""

    def __init__(self) -> None:
        self._through: dict[int, int] = {}

    def read(self, partition: int, produced_at_ms: int) -> None:
        """A result produced at ``produced_at_ms`` was read (it is completed before the next
        ``due_all``, which is where the bounds are used)."""
        if produced_at_ms > self._through.get(partition, -1):
            self._through[partition] = produced_at_ms

    def caught_up(self, partition: int, as_of_ms: int) -> None:
        """The partition had nothing left to read at ``as_of_ms`` (its log end, read then)."""
        self.read(partition, as_of_ms)

    def forget(self, partition: int) -> None:
        """The partition left this member: its next owner starts from nothing known."""
        self._through.pop(partition, None)

    def bounds(self) -> Mapping[int, int]:
        """What ``Scheduler.due_all(expire_through=...)`` takes."""
        return self._through
