"""Per-domain politeness: which URL may be fetched when, with state in Redis and frontier files.

``Scheduler`` is the library the scheduler service drives; see its module docstring for the
Redis layout and the caller's contract; ``ReplayFence`` is the fetcher's check of a replayed
request against the scheduler's tickets.
``Controls`` holds the operator's run-time controls (excluded domains, per-domain overrides)
that every scheduler reads at its next claim; ``ExcludedDomains`` is the fetcher's cached view.
"""

from crawlstream.politeness._controls import Controls, DomainOverride, ExcludedDomains
from crawlstream.politeness._fence import ReplayFence
from crawlstream.politeness._scheduler import Scheduler
from crawlstream.politeness._state import (
    BACKOFF_ERRORS,
    BACKOFF_STATUSES,
    EXCLUDED_ERROR,
    DomainState,
    FetchOutcome,
    FetchTicket,
)

__all__ = [
    "BACKOFF_ERRORS",
    "BACKOFF_STATUSES",
    "EXCLUDED_ERROR",
    "Controls",
    "DomainOverride",
    "DomainState",
    "ExcludedDomains",
    "FetchOutcome",
    "FetchTicket",
    "ReplayFence",
    "Scheduler",
]
