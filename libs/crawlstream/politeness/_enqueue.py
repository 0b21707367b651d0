"""Appending new URLs to their domains' frontier files (or priority lanes) and queueing the domains.

Each append records, with the files' new sizes, the next ``urls.frontier`` offset it covers
(``PartitionKeys.appended``, ADR 037): a batch read again after a crash or a failed commit is
skipped by the scheduler service instead of being queued (and fetched) a second time. The
append goes to disk, then to the log beside the files (``frontier.AppendMarks``), then to
Redis: a crash in between, or Redis coming back without the pipeline, leaves bytes past the
recorded size and a logged mark past Redis's; ``Scheduler.appended_through`` adopts those
domains and moves the mark up before the replay is read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from crawlstream.errors import InvalidDomain
from crawlstream.frontier import FrontierEntry, validate_domain
from crawlstream.politeness._context import SchedulerContext
from crawlstream.politeness._keys import OVERRIDE_PREFIX, PartitionKeys, as_int
from crawlstream.politeness._tickets import ticket_field

logger = logging.getLogger(__name__)


class Appender:
    """Appends URLs to a partition's frontier in two round trips per batch."""

    def __init__(self, ctx: SchedulerContext) -> None:
        self._ctx = ctx
        self._warned: set[str] = set()

    def by_domain(self, entries: Sequence[FrontierEntry]) -> dict[str, list[FrontierEntry]]:
        """``entries`` that may be stored, by domain; too deep and invalid-domain ones are counted."""
        by_domain: dict[str, list[FrontierEntry]] = {}
        for entry in entries:
            if entry.depth > self._ctx.limits.max_depth:
                self._ctx.stats["skipped_depth"] += 1
                continue
            try:
                validate_domain(entry.domain)
            except InvalidDomain as exc:
                self._ctx.stats["skipped_invalid_domain"] += 1
                self._warn_once("invalid_domain", "frontier: skipping URLs of an invalid domain: %s", exc)
                continue
            by_domain.setdefault(entry.domain, []).append(entry)
        return by_domain

    def append(
        self,
        partition: int,
        entries: Sequence[FrontierEntry],
        by_domain: dict[str, list[FrontierEntry]],
        now: int,
        unconditional: bool,
        through: int | None = None,
    ) -> int:
        """Append ``by_domain`` (from ``entries``) to the files and queue the domains (the caller
        holds the partition's lock); returns how many URLs were stored. Nothing when fenced.
        ``through``: the next input offset, recorded with the new sizes (ADR 037)."""
        keys = PartitionKeys(partition)
        read = self._ctx.redis.pipeline(transaction=False)
        read.get(keys.owner)
        for d in by_domain:
            read.hmget(keys.domain(d), "gen", "off", "size", "pages", "infl", "lg", "lo", "ls", "lp", "lz")
            read.hget(OVERRIDE_PREFIX + d, "pages")
        owner, *replies = read.execute()
        if self._ctx.ownership.fenced_by(partition, owner):
            self._ctx.stats["fenced_skipped"] += len(entries)
            return 0
        rows = [[*row, budget] for row, budget in zip(replies[0::2], replies[1::2], strict=True)]
        pipe = self._ctx.redis.pipeline(transaction=False)
        parked: list[tuple[int, int]] = []  # (index of the domain's requeue reply, URLs stored)
        accepted = 0
        appended: list[str] = []
        for (domain, group), row in zip(by_domain.items(), rows, strict=True):
            if as_int(row[3]) >= as_int(row[10], self._ctx.limits.max_pages) and as_int(row[4]) <= 0:
                self._ctx.stats["skipped_budget"] += len(group)
                continue
            self._append_domain(partition, keys, domain, group, row, pipe)
            appended.append(domain)
            parked.append((len(pipe), len(group)))
            self._ctx.scripts.requeue(
                keys=[keys.ready, keys.domain(domain), keys.pready],
                args=self._ctx.limits.requeue_args(domain, now),
                client=pipe,
            )
            accepted += len(group)
        if unconditional and self._ctx.planner is not None:
            pipe.hdel(keys.validators, *(ticket_field(e.domain, e.url) for e in entries))
        if through is not None:
            # beside the files first: Redis may come back without this pipeline (ADR 037)
            self._ctx.marks.record(partition, through, appended)
            pipe.set(keys.appended, through)
        # a requeue answering -2 (excluded): the URLs wait parked in the files
        answers = pipe.execute()
        self._ctx.stats["parked_excluded"] += sum(n for i, n in parked if int(answers[i]) == -2)
        return accepted

    def _append_domain(
        self,
        partition: int,
        keys: PartitionKeys,
        domain: str,
        group: Sequence[FrontierEntry],
        row: list[Any],
        pipe: Any,
    ) -> None:
        """Append one domain's entries (``row``: gen off size pages infl lg lo ls lp lz, budget)
        to its file and its lane, recording the new states on ``pipe``."""
        fifo = [e for e in group if e.priority <= 0]
        lane = [e for e in group if e.priority > 0]
        h = keys.domain(domain)
        if fifo:
            state = self._ctx.states.fifo(partition, domain, row, keys)
            new = self._ctx.files.append(partition, domain, fifo, state)
            pipe.hset(h, "size", new.size)
            pipe.hsetnx(h, "gen", new.generation)
            pipe.hsetnx(h, "off", new.offset)
        if lane:
            new, lp, lz = self._ctx.lanes.add(partition, keys, domain, row[5:10], lane)
            pipe.hset(h, mapping={"lg": new.generation, "lo": new.offset, "ls": new.size, "lp": lp, "lz": lz})
            self._ctx.stats["enqueued_priority"] += len(lane)
        pipe.sadd(keys.domains, domain)

    def _warn_once(self, topic: str, message: str, *args: Any) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning(message, *args)
