"""Operator controls at run time: excluded domains and per-domain overrides, kept in Redis.

Every scheduler reads them inside its claim script (``lua/claim.lua``), so a change counts from
the next claim of any scheduler sharing the Redis (its loop runs at least every poll
timeout, 0.1 s); the fetcher re-reads the excluded set when ``cs:ctl:version`` moves (one
GET per batch, ``ExcludedDomains``). ADR 016 says why they live there.

``Controls`` is the writer (the ``crawlstream exclude`` / ``include`` / ``domain`` commands).
Writes are plain Redis writes: whoever can reach the Redis (the data dir's socket with the
user's file permissions, or ``REDIS_URL``) may make them; they are never served over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from crawlstream.politeness._keys import (
    CRAWL_BUDGET_KEY,
    EXCLUDED_KEY,
    OVERRIDDEN_KEY,
    OVERRIDE_PREFIX,
    VERSION_KEY,
    PartitionKeys,
    as_text,
)

__all__ = ["Controls", "DomainOverride", "ExcludedDomains"]

# Put a domain back in its partition's ready queue (``pready`` while its priority lane has
# unread records) at its next fetch time unless it is there: the claim script decides whether
# it may really go (it drops it otherwise). KEYS: domains, ready, domain hash, pready.
# ARGV: domain, now.
_POKE = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
local v = redis.call('HMGET', KEYS[3], 'next', 'lo', 'ls')
local at = tonumber(v[1]) or tonumber(ARGV[2])
local queue = KEYS[2]
if v[2] and v[3] and tonumber(v[2]) < tonumber(v[3]) then queue = KEYS[4] end
return redis.call('ZADD', queue, 'NX', at, ARGV[1])
"""


@dataclass(frozen=True)
class DomainOverride:
    """What replaces the scheduler's settings for one domain; None keeps the setting.

    ``delay_s`` replaces ``scheduler.min_delay_s`` (robots Crawl-delay, the response-time factor
    and back-off still lengthen it), ``max_in_flight`` ``scheduler.max_in_flight_per_domain``,
    ``page_budget`` ``scheduler.max_pages_per_domain``.
    """

    delay_s: float | None = None
    max_in_flight: int | None = None
    page_budget: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"delay_s": self.delay_s, "max_in_flight": self.max_in_flight, "page_budget": self.page_budget}


class Controls:
    """Reads and writes the controls; every write bumps ``cs:ctl:version`` in the same transaction.

    Raises ``redis.RedisError`` (the CLI turns it into ``RedisUnavailable``).
    """

    def __init__(self, client: redis.Redis, clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self._clock = clock
        self._poke = client.register_script(_POKE)

    # -- exclusion ----------------------------------------------------------------------------

    def exclude(self, domains: Iterable[str]) -> int:
        """Exclude ``domains``; returns how many were not excluded before."""
        domains = list(domains)
        pipe = self.redis.pipeline(transaction=True)
        pipe.sadd(EXCLUDED_KEY, *domains)
        pipe.incr(VERSION_KEY)
        return int(pipe.execute()[0])

    def include(self, domains: Iterable[str]) -> int:
        """Include ``domains`` again; their parked URLs become due at once. Returns how many were
        excluded."""
        domains = list(domains)
        pipe = self.redis.pipeline(transaction=True)
        pipe.srem(EXCLUDED_KEY, *domains)
        pipe.incr(VERSION_KEY)
        removed = int(pipe.execute()[0])
        self.wake(domains)
        return removed

    def excluded(self) -> list[str]:
        return sorted(as_text(d) for d in self.redis.smembers(EXCLUDED_KEY))

    def in_flight(self, domains: Sequence[str]) -> int:
        """Requests of ``domains`` released by a scheduler and not yet answered (over every partition)."""
        partitions = self._partitions()
        pipe = self.redis.pipeline(transaction=False)
        for p in partitions:
            for d in domains:
                pipe.hget(PartitionKeys(p).domain(d), "infl")
        return sum(max(0, int(n)) for n in pipe.execute() if n is not None)

    def wait_idle(
        self,
        domains: Sequence[str],
        timeout_s: float,
        *,
        poll_s: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Wait until no request of ``domains`` is in flight, at most ``timeout_s``; returns how
        many still are (0 = every request released before is answered: nothing more goes out)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.in_flight(domains)
            if left == 0 or time.monotonic() >= deadline:
                return left
            sleep(poll_s)

    # -- overrides ----------------------------------------------------------------------------

    def set_override(self, domain: str, override: DomainOverride) -> DomainOverride:
        """Merge ``override`` into the domain's (fields left None stay as they were); returns the result."""
        fields: dict[str, int] = {}
        if override.delay_s is not None:
            fields["delay"] = round(override.delay_s * 1000)
        if override.max_in_flight is not None:
            fields["infl"] = int(override.max_in_flight)
        if override.page_budget is not None:
            fields["pages"] = int(override.page_budget)
        if fields:
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(OVERRIDE_PREFIX + domain, mapping=cast(Any, fields))
            pipe.sadd(OVERRIDDEN_KEY, domain)
            pipe.incr(VERSION_KEY)
            pipe.execute()
            self.wake([domain])  # a larger budget or slot count may make it fetchable again
        return self.override(domain) or DomainOverride()

    def override(self, domain: str) -> DomainOverride | None:
        delay, infl, pages = self.redis.hmget(OVERRIDE_PREFIX + domain, "delay", "infl", "pages")
        if delay is None and infl is None and pages is None:
            return None
        return DomainOverride(
            delay_s=None if delay is None else int(delay) / 1000,
            max_in_flight=None if infl is None else int(infl),
            page_budget=None if pages is None else int(pages),
        )

    def clear_override(self, domain: str) -> bool:
        """Back to the settings; returns whether there was an override."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(OVERRIDE_PREFIX + domain)
        pipe.srem(OVERRIDDEN_KEY, domain)
        pipe.incr(VERSION_KEY)
        existed = bool(pipe.execute()[0])
        self.wake([domain])
        return existed

    def overridden(self) -> list[str]:
        return sorted(as_text(d) for d in self.redis.smembers(OVERRIDDEN_KEY))

    # -- the run's page budget ----------------------------------------------------------------

    def set_crawl_budget(self, limit: int, used: int) -> int:
        """Let the schedulers release at most ``limit`` pages in all: each claim takes one, a
        result without a page (status 0) gives it back, so pages fetched + in flight never pass
        ``limit``. ``used``: pages fetched so far plus requests in flight; a larger count left
        by an earlier run on this Redis is kept. Returns the count in force."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(CRAWL_BUDGET_KEY, "used")
        pipe.hset(CRAWL_BUDGET_KEY, "limit", int(limit))
        earlier = pipe.execute()[0]
        used = max(int(used), int(earlier or 0))
        self.redis.hset(CRAWL_BUDGET_KEY, "used", used)
        return used

    def clear_crawl_budget(self) -> None:
        self.redis.delete(CRAWL_BUDGET_KEY)

    def crawl_budget(self) -> tuple[int, int] | None:
        """(limit, used), or None when the run has no page budget."""
        limit, used = self.redis.hmget(CRAWL_BUDGET_KEY, "limit", "used")
        return None if limit is None else (int(limit), int(used or 0))

    # -- helpers ------------------------------------------------------------------------------

    def wake(self, domains: Sequence[str]) -> int:
        """Put ``domains`` back in their ready queues (every partition that has them); the next
        claim checks whether they may go. Returns how many were added."""
        now_ms = int(self._clock() * 1000)
        pipe = self.redis.pipeline(transaction=False)
        for p in self._partitions():
            keys = PartitionKeys(p)
            for d in domains:
                self._poke(keys=[keys.domains, keys.ready, keys.domain(d), keys.pready], args=[d, now_ms], client=pipe)
        return sum(int(n) for n in pipe.execute())

    def partitions_of(self, domain: str) -> list[int]:
        """The scheduler partitions holding ``domain`` (one, unless the partition count changed)."""
        partitions = self._partitions()
        pipe = self.redis.pipeline(transaction=False)
        for p in partitions:
            pipe.sismember(PartitionKeys(p).domains, domain)
        return [p for p, hit in zip(partitions, pipe.execute(), strict=True) if hit]

    def _partitions(self) -> list[int]:
        """Scheduler partitions that hold any state (their ``domains`` set exists)."""
        found = set()
        for key in self.redis.scan_iter(match="cs:sched:*:domains", count=1000):
            middle = as_text(key)[len("cs:sched:") : -len(":domains")]
            if middle.isdigit():
                found.add(int(middle))
        return sorted(found)


class ExcludedDomains:
    """The fetcher's view of the excluded set: ``current()`` costs one GET of the version, and
    re-reads the set only when it moved. ``client`` returns the scheduler's Redis (called on
    first use). If Redis cannot answer, the last known set is kept (empty at first): the
    scheduler does not release excluded domains anyway, this only stops those already released.
    """

    def __init__(self, client: Callable[[], redis.Redis]) -> None:
        self._client = client
        self._version: Any = None
        self._read = False
        self._domains: frozenset[str] = frozenset()
        self.failed_reads = 0

    def current(self) -> frozenset[str]:
        try:
            client = self._client()
            version = client.get(VERSION_KEY)
            if not self._read or version != self._version:
                self._domains = frozenset(as_text(d) for d in client.smembers(EXCLUDED_KEY))
                self._version, self._read = version, True
        except (redis.RedisError, OSError):
            self.failed_reads += 1
        return self._domains
