"""Per-IP politeness: hosts that resolve to one address share one spacing budget (issue 14).

The scheduler spaces requests per registered domain; a hosting provider that serves ten
thousand small sites from one address would still see ten thousand domains' requests at
once. With ``fetch.per_ip_delay_s`` > 0 every fetcher claims the address right before each
request it sends there (robots.txt included), and a claim succeeds only once the spacing has
passed since the last successful claim by any fetcher — the fetch queue "by IP" of Nutch and
StormCrawler, shared across fetcher processes.

The last claim lives in Redis, one key per address (``cs:ip:{address}``: when, in Redis's own
clock, the next claim may succeed), checked and set by one Lua script in one round trip, so
any number of fetchers share each address exactly and no fetcher's clock matters. Keys expire
after an hour idle. Claiming at the send, not reserving a turn in advance, is what keeps the
promise when a fetcher is late to send (a reserved turn that waits for a connection slot
would eat into the next holder's spacing).

The fetcher keeps slots free for other addresses: it waits (``wait_free``, read-only) before it
takes a connection slot, one fetch per address at a time within a process, and claims once it
holds the slot; so only a race with another process makes a claim wait while holding a slot.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from typing import Protocol

import redis

__all__ = ["IP_KEY_PREFIX", "IpGate", "RedisIpGate"]

IP_KEY_PREFIX = "cs:ip:"
_IDLE_EXPIRY_MS = 3_600_000

# KEYS[1] = cs:ip:{address}; ARGV[1] = spacing ms (0: only look), ARGV[2] = idle expiry ms.
# Returns {ms to wait before a claim can succeed (0: claimed now, or free to claim), now}.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local free_at = tonumber(redis.call('GET', KEYS[1]) or '0')
if now < free_at then
  return {free_at - now, now}
end
local spacing = tonumber(ARGV[1])
if spacing > 0 then
  redis.call('SET', KEYS[1], now + spacing, 'PX', tonumber(ARGV[2]) + spacing)
end
return {0, now}
"""


class IpGate(Protocol):
    """Spaces the requests to one address; see the module docstring for the protocol."""

    async def wait_free(self, address: str) -> float:
        """Wait until a claim at ``address`` could succeed (claims nothing); seconds waited."""
        ...

    async def claim(self, address: str) -> float:
        """Wait for and take the right to send one request to ``address`` now; seconds waited."""
        ...


class RedisIpGate:
    """Claims at least ``spacing_s`` apart per address, shared through ``client``'s Redis.

    Each check is one EVAL on a blocking client (~0.1 ms on loopback) from the event loop.
    """

    def __init__(self, client: redis.Redis, spacing_s: float) -> None:
        if not spacing_s > 0:
            raise ValueError(f"per-IP spacing must be > 0 seconds, got {spacing_s!r}")
        self._redis = client
        self._spacing_ms = max(1, round(spacing_s * 1000))
        self.spacing_s = self._spacing_ms / 1000.0
        self._script = client.register_script(_CLAIM)
        self.claims = 0
        self.waited_s = 0.0  # in claims, for the fetcher's metrics

    @staticmethod
    def key(address: str) -> str:
        """``cs:ip:`` + the address in its compressed form (one key per address, whatever
        spelling the resolver gave, e.g. ``::ffff:1.2.3.4`` and ``1.2.3.4`` are one key)."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return IP_KEY_PREFIX + address.lower()
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return IP_KEY_PREFIX + ip.compressed

    def try_claim(self, address: str, *, look_only: bool = False) -> tuple[int, int]:
        """One check: (ms until a claim can succeed — 0 when claimed, or free with
        ``look_only`` —, now), in ms of Redis's clock."""
        wait_ms, now_ms = self._script(
            keys=[self.key(address)], args=[0 if look_only else self._spacing_ms, _IDLE_EXPIRY_MS]
        )
        return int(wait_ms), int(now_ms)

    async def wait_free(self, address: str) -> float:
        return await self._wait(address, look_only=True)

    async def claim(self, address: str) -> float:
        waited = await self._wait(address, look_only=False)
        self.claims += 1
        self.waited_s += waited
        return waited

    async def _wait(self, address: str, *, look_only: bool) -> float:
        started = time.monotonic()
        while (wait_ms := self.try_claim(address, look_only=look_only)[0]) > 0:
            await asyncio.sleep(wait_ms / 1000)
        return time.monotonic() - started
