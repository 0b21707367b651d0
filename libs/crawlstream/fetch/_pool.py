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

from typing import Any

import aiohttp

__all__ = ["BoundedIdleConnector"]


class BoundedIdleConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` keeping at most ``max_idle`` idle connections in all (0: none).

    aiohttp's per-host pools hold ``(protocol, released_at)`` in release order, so the connection
    released longest ago is the oldest head among them: nothing is tracked beside them."""

    def __init__(self, *, max_idle: int, **kwargs: Any) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle: expected 0 or more, found {max_idle}")
        super().__init__(**kwargs)
        self.max_idle = max_idle

    @property
    def idle(self) -> int:
        """Connections in the pool now, waiting to be reused."""
        return sum(len(pool) for pool in self._conns.values())

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        super()._release(key, protocol, should_close=should_close)
        for _ in range(self.idle - self.max_idle):
            self._close_oldest_idle()

    def _close_oldest_idle(self) -> None:
        key = min((k for k, pool in self._conns.items() if pool), key=lambda k: self._conns[k][0][1])
        pool = self._conns[key]
        protocol, _ = pool.popleft()
        if not pool:
            del self._conns[key]
        protocol.close()
