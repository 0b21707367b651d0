"""Redis key names of politeness, and how the values stored there read back.

Operator controls, shared by the scheduler's Lua scripts, the fetcher's exclusion check and
the ``crawlstream exclude`` / ``domain`` commands (ADR 016). Global, not per partition: a
command does not need to know how many partitions the crawl has, and every scheduler reads
them inside its claim script (no extra round trip).

    cs:ctl:excluded     SET   registered domains excluded by the operator
    cs:ctl:d:{domain}   HASH  delay (ms), infl (max in flight), pages (page budget) overrides
    cs:ctl:overridden   SET   domains that have a cs:ctl:d: hash (for listing)
    cs:ctl:version      INT   bumped by every change (the fetcher re-reads the set when it moves)
    cs:ctl:crawl        HASH  limit, used: the run's page budget (``crawlstream run --max-pages``)

The scheduler, per partition ``p`` (``PartitionKeys``; all O(domains), never O(URLs))::

    cs:sched:{p}:d:{domain}  HASH  gen off size  (frontier file generation, read offset, valid size)
                                   next          (next fetch at, ms)    infl (requests in flight)
                                   rd            (set while one caller reads the file: the claim)
                                   cdel rtt bo   (robots Crawl-delay ms, last response ms, back-off level)
                                   pages         (pages dispatched, counted against the budget)
                                   lt            (last dispatch at, ms: a delay override counts from it)
                                   lg lo ls      (priority lane file: generation, read offset, size)
                                   lp lz         (priority of the lane's next and of its last record)
    cs:sched:{p}:ready       ZSET  domain -> next fetch at (ms); only domains that may be fetched
    cs:sched:{p}:pready      ZSET  the same for domains whose priority lane has unread records:
                                   claimed before ``ready``, highest ``lp`` first
    cs:sched:{p}:domains     SET   every domain with a frontier file in p (for load_partition)
    cs:sched:{p}:inflight    HASH  "domain\\nurl" -> frontier record of the ticket (for retries; ``_tickets``)
    cs:sched:{p}:leases      ZSET  "domain\\nurl" -> lease deadline (ms); expired = a lost request
    cs:sched:{p}:rv          HASH  b off  (revisit read cursor: bucket file, offset; ADR 022)
    cs:sched:{p}:val         HASH  "domain\\nurl" -> validators of a revisit released to the
                                   frontier and not completed yet (O(revisits in flight))
    cs:sched:{p}:owner       STRING the token of the instance that loaded p last (fencing)
    cs:sched:{p}:appended    STRING the next ``urls.frontier[p]`` offset not appended yet: a
                                   replayed message below it is skipped (ADR 037); each
                                   append is logged beside the files first
                                   (``frontier.AppendMarks``), for when Redis loses it
"""

from __future__ import annotations

from typing import Any

EXCLUDED_KEY = "cs:ctl:excluded"
OVERRIDE_PREFIX = "cs:ctl:d:"
OVERRIDDEN_KEY = "cs:ctl:overridden"
VERSION_KEY = "cs:ctl:version"
CRAWL_BUDGET_KEY = "cs:ctl:crawl"


class PartitionKeys:
    """The key names of one scheduler partition (see the module docstring)."""

    __slots__ = (
        "appended",
        "domains",
        "hash_prefix",
        "inflight",
        "leases",
        "owner",
        "pready",
        "ready",
        "revisit_cursor",
        "validators",
    )

    def __init__(self, partition: int) -> None:
        base = f"cs:sched:{int(partition)}:"
        self.ready = base + "ready"
        self.pready = base + "pready"
        self.domains = base + "domains"
        self.inflight = base + "inflight"
        self.leases = base + "leases"
        self.hash_prefix = base + "d:"
        self.revisit_cursor = base + "rv"
        self.validators = base + "val"
        self.owner = base + "owner"
        self.appended = base + "appended"

    def domain(self, domain: str) -> str:
        return self.hash_prefix + domain


def as_text(value: Any) -> str:
    """A Redis reply as text (a field holding any URL round-trips: surrogates kept)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def as_int(value: Any, default: int = 0) -> int:
    """A Redis reply as a number; ``default`` where the field is not set."""
    return default if value is None else int(value)
