"""Closing tickets: the domain's next fetch time and back-off, retries, parked URLs.

Delays: next fetch = now + max(``min_delay_s`` (or the operator's override), robots
Crawl-delay, ``response_time_factor`` x last response time); 429/503/timeouts/DNS failures
double a back-off capped at ``max_backoff_s``, and a Retry-After is honoured up to the same
cap. A retryable failure goes back to its domain's file (or lane) ``max_retries`` times at
most; a URL of an excluded domain is parked there as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from crawlstream.frontier import FrontierEntry
from crawlstream.politeness._context import Limits, SchedulerContext
from crawlstream.politeness._keys import OVERRIDE_PREFIX, PartitionKeys, as_int
from crawlstream.politeness._revisit import RevisitRecord, Validators
from crawlstream.politeness._state import FetchOutcome
from crawlstream.politeness._tickets import ticket_entry, ticket_field
from crawlstream.robots import MAX_CRAWL_DELAY_S

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

Results = Mapping[int, Sequence[tuple[str, str, FetchOutcome]]]

_MAX_BACKOFF_LEVEL = 40


def next_fetch(limits: Limits, now: int, row: list[Any], outcome: FetchOutcome) -> tuple[int, int, int, str]:
    """(next fetch at ms, back-off level, Crawl-delay ms, what decided the wait) after
    ``outcome``; ``row`` is the domain's (see ``Completer._close``). Pure arithmetic. The reason
    is one of ``crawlstream.metrics.WAIT_REASONS``: the largest term; back-off and Retry-After
    only when they lengthen the wait."""
    crawl_delay_s = _seconds(outcome.crawl_delay_s)
    crawl_delay_ms = int(crawl_delay_s * 1000) if crawl_delay_s is not None else as_int(row[4])
    overridden = len(row) > 6 and row[6] is not None
    min_delay_ms = as_int(row[6], limits.min_delay_ms) if len(row) > 6 else limits.min_delay_ms  # operator override
    delay_ms, reason = max(
        (min_delay_ms, "override" if overridden else "min_delay"),
        (crawl_delay_ms, "crawl_delay"),
        (int(limits.response_time_factor * outcome.elapsed_ms), "response_time"),
        key=lambda term: term[0],
    )
    level = as_int(row[5])
    if outcome.backs_off:
        level = min(level + 1, _MAX_BACKOFF_LEVEL)
        backoff_ms = min(limits.max_backoff_ms, max(delay_ms, 1000) * 2**level)
        if backoff_ms > delay_ms:
            delay_ms, reason = backoff_ms, "backoff"
    else:
        level = 0
    retry_after_s = _seconds(outcome.retry_after_s)
    if retry_after_s is not None and retry_after_s > 0:
        retry_after_ms = min(limits.max_backoff_ms, int(retry_after_s * 1000))
        if retry_after_ms > delay_ms:
            delay_ms, reason = retry_after_ms, "retry_after"
    if as_int(row[3]) > now + delay_ms:  # a later next fetch time was set before (a migrated one)
        return as_int(row[3]), level, crawl_delay_ms, "held"
    return now + delay_ms, level, crawl_delay_ms, reason


def _seconds(value: float | None) -> float | None:
    """A delay from a fetch result, which may come from any producer: NaN is none, and
    anything else is held to 0..MAX_CRAWL_DELAY_S (an inf would overflow ``int``)."""
    if value is None or value != value:
        return None
    return min(max(value, 0.0), MAX_CRAWL_DELAY_S)


@dataclass
class _Batch:
    """One partition's share of a completion: its ticket fields and their distinct domains."""

    partition: int
    keys: PartitionKeys
    fields: list[bytes]
    domains: list[str]


class Completer:
    """Closes tickets in two round trips per batch, however many results and partitions."""

    def __init__(self, ctx: SchedulerContext) -> None:
        self._ctx = ctx

    def complete_all(self, partitions: Sequence[int], results: Results, now: int) -> list[FrontierEntry]:
        """Close the tickets of ``results`` in ``partitions`` (locked by the caller, not fenced
        when it looked); returns the entries re-appended for a retry."""
        batches, replies = self._read(partitions, results)
        pipe = self._ctx.redis.pipeline(transaction=False)
        retries: list[FrontierEntry] = []
        for batch in batches:
            self._close(batch, results[batch.partition], replies, now, pipe, retries)
        pipe.execute()
        return retries

    def _read(self, partitions: Sequence[int], results: Results) -> tuple[list[_Batch], Iterator[Any]]:
        """The first round trip: per partition its owner token, the tickets (and validators of
        revisits), and each domain's row (``_close`` takes the replies in this order)."""
        read = self._ctx.redis.pipeline(transaction=False)
        batches: list[_Batch] = []
        for partition in partitions:
            keys = PartitionKeys(partition)
            fields = [ticket_field(d, u) for d, u, _ in results[partition]]
            read.get(keys.owner)
            read.hmget(keys.inflight, *fields)
            if self._ctx.planner is not None:
                read.hmget(keys.validators, *fields)
            domains = list(dict.fromkeys(d for d, _, _ in results[partition]))
            for d in domains:
                read.hmget(keys.domain(d), "gen", "off", "size", "next", "cdel", "bo")
                read.hget(OVERRIDE_PREFIX + d, "delay")
                read.hmget(keys.domain(d), "lg", "lo", "ls", "lp", "lz")
            batches.append(_Batch(partition, keys, fields, domains))
        return batches, iter(read.execute())

    def _close(
        self,
        batch: _Batch,
        results: Sequence[tuple[str, str, FetchOutcome]],
        replies: Iterator[Any],
        now: int,
        pipe: Any,
        retries: list[FrontierEntry],
    ) -> None:
        """Close one partition's tickets on ``pipe`` (the second round trip)."""
        partition, keys, fields = batch.partition, batch.keys, batch.fields
        planner = self._ctx.planner
        owner = next(replies)
        raws = next(replies)
        previous = next(replies) if planner is not None else [None] * len(fields)
        revisits: list[RevisitRecord] = []
        # Domain rows are updated in place as the batch goes, so two results of one
        # domain compose (the second sees the first's back-off and file size). A row:
        # gen off size next cdel bo, the delay override, then lg lo ls lp lz (the lane).
        row_of = {d: [*next(replies), next(replies), *next(replies)] for d in batch.domains}
        if self._ctx.ownership.fenced_by(partition, owner):  # the new owner completes them (replayed)
            self._ctx.stats["fenced_skipped"] += len(fields)
            return
        done: set[bytes] = set()
        for (domain, url, outcome), field, raw, before in zip(results, fields, raws, previous, strict=True):
            if raw is None or field in done:
                self._ctx.stats["stale_completions"] += 1
                logger.debug("scheduler: completion for %s in %s has no ticket; ignored", url, domain)
                continue
            done.add(field)
            retry = self._complete_one(partition, keys, domain, field, raw, row_of[domain], outcome, now, pipe)
            if retry is not None:
                retries.append(retry)
            elif planner is not None and not outcome.excluded:
                was = Validators.decode(before)
                planner.plan(keys, field, raw, domain, outcome, was, now, pipe, revisits)
        if revisits and planner is not None:
            # on disk before the tickets close: a crash in between re-plans (twice at worst)
            planner.schedule(partition, revisits)

    def _complete_one(
        self,
        partition: int,
        keys: PartitionKeys,
        domain: str,
        field: bytes,
        raw: bytes,
        row: list[Any],
        outcome: FetchOutcome,
        now: int,
        pipe: Any,
    ) -> FrontierEntry | None:
        """Close one ticket on ``pipe``; ``row`` (see ``_close``) takes the domain's new state.
        Returns the entry re-appended for a retry, if any."""
        entry = ticket_entry(raw, domain)
        if outcome.excluded:  # nothing was fetched: the politeness state stays as it was
            next_at, backoff_level, crawl_delay_ms = max(as_int(row[3]), now), as_int(row[5]), as_int(row[4])
        else:
            next_at, backoff_level, crawl_delay_ms, reason = next_fetch(self._ctx.limits, now, row, outcome)
            if self._ctx.metrics is not None:
                self._ctx.metrics.observe_wait(reason, (next_at - now) / 1000.0)
        row[3], row[4], row[5] = next_at, crawl_delay_ms, backoff_level
        retry = None
        new_size: int | str = ""
        size_field = "size"
        if outcome.excluded:
            # Parked: the URL goes back to the file (or lane) as it was (same attempt, page
            # refunded) and is fetched once the domain is included again.
            new_size, size_field = self._put_back(partition, keys, domain, row, entry, pipe)
            self._ctx.stats["parked_excluded"] += 1
        elif outcome.retryable and entry.attempt < self._ctx.limits.max_retries:
            retry = replace(entry, attempt=entry.attempt + 1)
            # the retry spends the same page of the budget: refunded
            new_size, size_field = self._put_back(partition, keys, domain, row, retry, pipe)
            self._ctx.stats["retried"] += 1
        elif outcome.retryable:
            self._ctx.stats["gave_up"] += 1
        self._ctx.scripts.complete(
            keys=[keys.ready, keys.domain(domain), keys.inflight, keys.leases, keys.pready],
            args=[
                *self._ctx.limits.requeue_args(domain, now),
                field,
                next_at,
                backoff_level,
                crawl_delay_ms,
                int(outcome.elapsed_ms),
                new_size,
                "1" if outcome.status <= 0 else "0",
                size_field,
            ],
            client=pipe,
        )
        self._ctx.stats["completed"] += 1
        return retry

    def _put_back(
        self, partition: int, keys: PartitionKeys, domain: str, row: list[Any], entry: FrontierEntry, pipe: Any
    ) -> tuple[int, str]:
        """Append a retried or parked ``entry`` to its domain's file, or to its lane when it has a
        priority (the lane's other fields go on ``pipe`` before the completion); ``row`` (see
        ``_close``) follows. Returns the new size and the field it belongs in."""
        if entry.priority > 0:
            new, lp, lz = self._ctx.lanes.add(partition, keys, domain, row[7:12], [entry])
            row[7:12] = [new.generation, new.offset, new.size, lp, lz]
            pipe.hset(keys.domain(domain), mapping={"lg": new.generation, "lo": new.offset, "lp": lp, "lz": lz})
            return new.size, "ls"
        state = self._ctx.states.fifo(partition, domain, row, keys)
        new = self._ctx.files.append(partition, domain, [entry], state)
        row[0], row[1], row[2] = new.generation, new.offset, new.size
        return new.size, "size"
