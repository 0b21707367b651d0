"""The fetcher's connection pool: keep-alive sockets kept idle are bounded across hosts.

aiohttp keeps every released connection for its keep-alive time (15 s), one pool per host, and
its ``limit`` counts connections in use only: the idle ones are unbounded. A crawler that reaches
a new domain every few milliseconds held one socket per domain of the last 15 s. In the 2-hour
soak (session 26) a fetcher's descriptors went from 26 to 3,310 and back with the fetch rate,
past the 1,024 descriptors many hosts give a process by default. Past ``max_idle``, the
connections released longest ago are closed, as OkHttp's ConnectionPool (maxIdleConnections)
does: a fetcher's sockets stay below its concurrency plus ``max_idle`` at any rate, and a host
fetched again soon still finds its own.

This reaches into aiohttp's pool (``_conns``, ``_release``), pinned in requirements.lock;
``tests/fetch/test_pool.py`` fails if a new version moves them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import aiohttp

__all__ = ["BoundedIdleConnector"]


class BoundedIdleConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` keeping at most ``max_idle`` idle connections in all (0: none)."""

    def __init__(self, *, max_idle: int, **kwargs: Any) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle: expected 0 or more, found {max_idle}")
        super().__init__(**kwargs)
        self.max_idle = max_idle
        # Idle connections in the order they were released (oldest first), with their host key.
        # A connection reused or expired since is no longer in the pool: skipped when it comes up.
        self._released: OrderedDict[Any, Any] = OrderedDict()

    @property
    def idle(self) -> int:
        """Connections in the pool now, waiting to be reused."""
        return sum(len(pool) for pool in self._conns.values())

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        super()._release(key, protocol, should_close=should_close)
        if not self._pooled(key, protocol):
            return
        self._released[protocol] = key
        self._released.move_to_end(protocol)
        idle = self.idle
        while idle > self.max_idle and self._released:
            oldest, oldest_key = self._released.popitem(last=False)
            if self._close_idle(oldest_key, oldest):
                idle -= 1
        if len(self._released) > 2 * self.max_idle + 64:  # entries of connections reused or expired
            self._released = OrderedDict((p, k) for p, k in self._released.items() if self._pooled(k, p))

    def _pooled(self, key: Any, protocol: Any) -> bool:
        return any(entry[0] is protocol for entry in self._conns.get(key, ()))

    def _close_idle(self, key: Any, protocol: Any) -> bool:
        """Take ``protocol`` out of ``key``'s pool and close it; False when it is not there."""
        pool = self._conns.get(key)
        entry = next((e for e in pool or () if e[0] is protocol), None)
        if pool is None or entry is None:
            return False
        pool.remove(entry)
        if not pool:
            del self._conns[key]
        protocol.close()
        return True
