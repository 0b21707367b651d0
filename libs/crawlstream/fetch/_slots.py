"""Per-key limits on concurrent work (connections per host, robots.txt fetches per origin,
fetches per IP address) that cost nothing for keys nobody holds.

Why not aiohttp's ``TCPConnector(limit_per_host=...)``: when a connection is released the
connector wakes one waiter of *any* host that has a free slot, so a released slot of host A
can wake a waiter of host B while A's waiters sleep on until something else of A is released
(seen as requests that time out without ever reaching the server: tests/fetch/test_mini_crawl.py
failed about one run in ten, ADR 009). Here each key has its own FIFO semaphore: a release
always wakes a waiter of the same key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable

__all__ = ["KeyedSlots"]


class _Entry:
    __slots__ = ("semaphore", "users")

    def __init__(self, size: int) -> None:
        self.semaphore = asyncio.Semaphore(size)
        self.users = 0  # holding or waiting: the entry is dropped when the last one leaves


class KeyedSlots:
    """At most ``size`` holders per key at a time, served in arrival order."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"slots per key must be at least 1, not {size}")
        self.size = size
        self._entries: dict[Hashable, _Entry] = {}

    def __len__(self) -> int:
        """Keys held or waited on now."""
        return len(self._entries)

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self.size)
        entry.users += 1
        try:
            async with entry.semaphore:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]
