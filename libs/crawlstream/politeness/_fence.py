"""The fetcher's fence against replayed requests whose result the scheduler already took.

A fetcher killed with -9 (or a partition moved to another member) resumes from its last
committed offset, so up to ``bus.commit_interval_s`` of requests come again. Fetching them
again would break politeness: the scheduler may already have released the domain's next
request. The scheduler keeps a ticket per request in flight and closes it when the result
arrives, so a replayed request whose ticket is closed (or reclaimed after its lease) is
skipped. Only requests released before this member got their partition can be replays, so
steady-state traffic costs nothing; the rest cost one Redis round trip per batch.

A request that reaches the fetcher late is checked the same way, replayed or not: one
released more than half the scheduler's lease ago (a broker outage held it in a producer's
queue) may have a ticket the scheduler already reclaimed, and the domain's next request
may be in flight; fetching both would hit the domain twice at once.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

import redis

from crawlstream.bus import TopicPartition
from crawlstream.politeness._tickets import open_tickets

logger = logging.getLogger(__name__)

# Requests released up to this long after an assignment are still checked: the scheduler's
# clock may run ahead of this host's.
CLOCK_SKEW_MS = 5_000


class ReplayFence:
    """Which requests of a batch may be fetched; see the module docstring.

    ``client`` returns the scheduler's Redis (called on first use); ``partition_of(domain)`` is
    the scheduler partition holding the domain's tickets. If Redis cannot answer, or holds no
    scheduler state for a partition, the request is fetched: a duplicate fetch beats a lost URL.
    """

    def __init__(
        self,
        client: Callable[[], redis.Redis],
        partition_of: Callable[[str], int],
        clock: Callable[[], float] = time.time,
        lease_s: float | None = None,
    ) -> None:
        self._client = client
        self._partition_of = partition_of
        self._clock = clock
        self._late_after_ms = None if lease_s is None else int(lease_s * 1000 / 2)
        self._check_before_ms: dict[TopicPartition, int] = {}  # bus partition -> release-time bound
        self.stats: Counter[str] = Counter()

    def assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """New bus partitions: their requests released before now (+ skew) may be replays."""
        bound = int(self._clock() * 1000) + CLOCK_SKEW_MS
        for tp in partitions:
            self._check_before_ms[tp] = bound

    def suspect(self, partition: TopicPartition, requested_at_ms: int) -> bool:
        """Whether a request must be checked before it is fetched: a possible replay, or late."""
        if requested_at_ms < self._check_before_ms.get(partition, 0):
            return True
        late_after_ms = self._late_after_ms
        return late_after_ms is not None and self._clock() * 1000 - requested_at_ms > late_after_ms

    def keep(self, requests: Sequence[tuple[str, str]]) -> list[bool]:
        """For each ``(domain, url)`` suspect request, whether to fetch it."""
        if not requests:
            return []
        try:
            open_ = open_tickets(self._client(), [(self._partition_of(d), d, u) for d, u in requests])
        except (redis.RedisError, OSError) as exc:
            self.stats["unchecked"] += len(requests)
            logger.warning("fetcher: cannot check %d replayed requests against the scheduler (%s)", len(requests), exc)
            return [True] * len(requests)
        keep = [hit is not False for hit in open_]
        skipped = keep.count(False)
        self.stats["checked"] += len(requests)
        self.stats["skipped_replays"] += skipped
        if skipped:
            logger.info("fetcher: skipped %d replayed or late requests whose tickets are closed", skipped)
        return keep
