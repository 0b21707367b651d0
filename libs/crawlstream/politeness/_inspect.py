"""Reading a domain's scheduling state back for people (``crawlstream domain``, tests)."""

from __future__ import annotations

import redis

from crawlstream.frontier import HEADER_SIZE
from crawlstream.politeness._context import Limits
from crawlstream.politeness._keys import EXCLUDED_KEY, OVERRIDE_PREFIX, PartitionKeys, as_int
from crawlstream.politeness._state import DomainState


def read_domain_state(client: redis.Redis, limits: Limits, partition: int, domain: str, now_ms: int) -> DomainState:
    """``Scheduler.domain_state``: the limits shown are the effective ones (an override wins)."""
    keys = PartitionKeys(partition)
    pipe = client.pipeline(transaction=False)
    pipe.hmget(OVERRIDE_PREFIX + domain, "delay", "infl", "pages")
    pipe.sismember(EXCLUDED_KEY, domain)
    pipe.hmget(keys.domain(domain), "lo", "ls", "lp")
    (delay, infl, pages), excluded, (lane_offset, lane_size, lane_priority) = pipe.execute()
    fields = ("infl", "next", "cdel", "rtt", "bo", "pages", "gen", "off", "size", "rd")
    row = client.hmget(keys.domain(domain), *fields)
    return DomainState(
        domain=domain,
        partition=partition,
        in_flight=as_int(row[0]),
        max_in_flight=as_int(infl, limits.max_in_flight),
        next_fetch_at_ms=as_int(row[1]),
        now_ms=now_ms,
        crawl_delay_ms=as_int(row[2]),
        last_response_ms=as_int(row[3]),
        backoff_level=as_int(row[4]),
        pages=as_int(row[5]),
        max_pages=as_int(pages, limits.max_pages),
        generation=as_int(row[6]),
        offset=as_int(row[7], HEADER_SIZE),
        size=as_int(row[8], HEADER_SIZE),
        reading=row[9] is not None,
        excluded=bool(excluded),
        delay_override_ms=None if delay is None else int(delay),
        lane_offset=as_int(lane_offset, HEADER_SIZE),
        lane_size=as_int(lane_size, HEADER_SIZE),
        lane_priority=as_int(lane_priority),
    )
