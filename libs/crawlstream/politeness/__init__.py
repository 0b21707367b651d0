"""Per-domain politeness: which URL may be fetched when, with state in Redis and frontier files.

``Scheduler`` is the library the scheduler service drives; see its module (``_scheduler``)
docstring for the caller's contract and ``_keys`` for the Redis layout; ``ReplayFence`` is the
fetcher's check of a replayed request against the scheduler's tickets; ``ResultsWatermark`` is
how far the service has read ``fetch.results``, the clock its tickets' leases run out by.
``send_refetch`` sends URLs past dedupe to be fetched again (``crawlstream refetch``);
``Validators`` is what a page's last response said, kept for its revisit (ADR 022).
``RedisIpGate`` spaces requests per IP address across fetchers (``fetch.per_ip_delay_s``).
``Controls`` holds the operator's run-time controls (excluded domains, per-domain overrides)
that every scheduler reads at its next claim; ``ExcludedDomains`` is the fetcher's cached view.
"""

from crawlstream.politeness._controls import Controls, DomainOverride, ExcludedDomains
from crawlstream.politeness._fence import ReplayFence
from crawlstream.politeness._ip_gate import IP_KEY_PREFIX, IpGate, RedisIpGate
from crawlstream.politeness._refetch import (
    REFETCH_SOURCE,
    RefetchBatch,
    read_refetch_urls,
    send_refetch,
)
from crawlstream.politeness._revisit import RevisitFiles, Validators
from crawlstream.politeness._scheduler import Scheduler
from crawlstream.politeness._state import (
    BACKOFF_ERRORS,
    BACKOFF_STATUSES,
    EXCLUDED_ERROR,
    ROBOTS_UNAVAILABLE_ERROR,
    DomainState,
    FetchOutcome,
    FetchTicket,
)
from crawlstream.politeness._watermark import ResultsWatermark

__all__ = [
    "BACKOFF_ERRORS",
    "BACKOFF_STATUSES",
    "EXCLUDED_ERROR",
    "IP_KEY_PREFIX",
    "REFETCH_SOURCE",
    "ROBOTS_UNAVAILABLE_ERROR",
    "Controls",
    "DomainOverride",
    "DomainState",
    "ExcludedDomains",
    "FetchOutcome",
    "FetchTicket",
    "IpGate",
    "RedisIpGate",
    "RefetchBatch",
    "ReplayFence",
    "ResultsWatermark",
    "RevisitFiles",
    "Scheduler",
    "Validators",
    "read_refetch_urls",
    "send_refetch",
]
