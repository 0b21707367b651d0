"""robots.txt bodies imported from another crawler (``crawlstream migrate``), kept in Redis.

The Redis edge of this package (the rest is pure). One hash per host::

    cs:robots:{host}   HASH  body (robots.txt bytes as fetched)   exp (expires at, epoch ms)

A fetcher that has no cached policy for an origin asks ``lookup`` before fetching robots.txt:
while the imported body has not expired it is the origin's policy (any scheme or port of the
host, as the source crawler kept one body per host), and robots.txt is not requested; after
``exp`` the fetcher fetches it as usual. Writes only ever move ``exp`` later, so importing the
same rows twice changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis

__all__ = ["IMPORTED_ROBOTS_PREFIX", "ImportedRobots", "ImportedRobotsTxt"]

logger = logging.getLogger(__name__)

IMPORTED_ROBOTS_PREFIX = "cs:robots:"

# Store a body unless the stored one expires later (or at the same time). KEYS: hash.
# ARGV: body, exp (ms). Returns 1 when written.
_PUT = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'exp'))
if cur ~= nil and cur >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'body', ARGV[1], 'exp', ARGV[2])
return 1
"""


@dataclass(frozen=True)
class ImportedRobotsTxt:
    """An imported robots.txt: the body and when it stops counting (epoch ms)."""

    body: bytes
    expires_at_ms: int


class ImportedRobots:
    """Read and write imported robots.txt bodies. ``client`` returns the scheduler's Redis (called
    on first use, so a fetcher that never misses its cache opens nothing).

    ``lookup`` never raises for Redis trouble: it counts ``failed_reads`` and answers None, so
    the fetcher falls back to fetching robots.txt itself.
    """

    def __init__(self, client: Callable[[], redis.Redis], clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._clock = clock
        self._put: Any = None
        self.failed_reads = 0

    @staticmethod
    def key(host: str) -> str:
        return IMPORTED_ROBOTS_PREFIX + host.lower()

    def put_many(self, entries: dict[str, ImportedRobotsTxt]) -> int:
        """Store ``host -> robots.txt``; a stored body that expires later is kept. Returns how many
        were written. Raises ``redis.RedisError``."""
        client = self._client()
        if self._put is None:
            self._put = client.register_script(_PUT)
        pipe = client.pipeline(transaction=False)
        for host, robots in entries.items():
            self._put(keys=[self.key(host)], args=[robots.body, int(robots.expires_at_ms)], client=pipe)
        return sum(int(n) for n in pipe.execute())

    def get(self, host: str) -> ImportedRobotsTxt | None:
        """The stored body of ``host`` (expired or not). Raises ``redis.RedisError``."""
        body, exp = self._client().hmget(self.key(host), "body", "exp")
        if body is None or exp is None:
            return None
        data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
        return ImportedRobotsTxt(data, int(exp))

    def lookup(self, origin: str) -> ImportedRobotsTxt | None:
        """The imported robots.txt of ``origin``'s host while it has not expired, else None."""
        host = urlsplit(origin).hostname
        if not host:
            return None
        try:
            found = self.get(host)
        except (redis.RedisError, OSError) as exc:
            self.failed_reads += 1
            if self.failed_reads == 1:
                logger.warning("imported robots.txt unavailable (%s): fetching robots.txt instead", exc)
            return None
        if found is None or found.expires_at_ms <= int(self._clock() * 1000):
            return None
        return found
