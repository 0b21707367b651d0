"""SSRF guard and resolver map: decide where a host name may connect, after DNS.

The check runs inside an aiohttp resolver, so the connector connects to exactly the
addresses that were checked (no second lookup an attacker's DNS could answer
differently). Literal IP hosts skip aiohttp's resolver and are checked by the fetcher
with :func:`is_public_address` before the request.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping

from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = ["BlockedAddress", "GuardedResolver", "MappedHostMissing", "is_public_address"]

logger = logging.getLogger(__name__)


class BlockedAddress(OSError):
    """Every address of the host is private/loopback/link-local/reserved and that is not allowed."""


class MappedHostMissing(OSError):
    """With ``resolve_map_only``, a host outside the map does not resolve (like NXDOMAIN)."""


def is_public_address(ip: str) -> bool:
    """True for globally routable unicast addresses.

    IPv6 forms that carry an IPv4 address are judged by it: IPv4-mapped (``::ffff:a.b.c.d``)
    and 6to4 (``2002:AABB:CCDD::``, which a 6to4 relay turns into a.b.c.d). IPv4-compatible,
    NAT64 and Teredo prefixes are not global at all; neither is deprecated site-local fec0::/10.
    """
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.is_site_local:
            return False
        embedded = addr.ipv4_mapped or addr.sixtofour
        if embedded is not None:
            addr = embedded
    return not (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_multicast
        or addr.is_reserved
        or addr.is_unspecified
        or not addr.is_global
    )


class GuardedResolver(AbstractResolver):
    """Resolve through ``resolve_map`` first, then real DNS; drop non-public addresses.

    ``resolve_map`` maps a host name to ``(ip, port)``: the connection goes to that
    address and port while the URL and Host header keep the name (how the demo web serves
    many domains from one loopback port). Mapped addresses are checked like any other, so
    loopback demo hosts need ``allow_private_networks=True``. ``exempt_hosts`` (the
    proxy) are not filtered when the connector connects to them, but are as a fetch
    target (``acheck``).
    """

    def __init__(
        self,
        inner: AbstractResolver,
        *,
        allow_private_networks: bool,
        resolve_map: Mapping[str, tuple[str, int]] | None = None,
        resolve_map_only: bool = False,
        exempt_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self._inner = inner
        self._allow_private = allow_private_networks
        self._map = {k.lower().rstrip("."): v for k, v in (resolve_map or {}).items()}
        self._map_only = resolve_map_only
        self._exempt = frozenset(h.lower() for h in exempt_hosts)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The connector's lookup: ``exempt_hosts`` (the proxy) connect unfiltered."""
        return await self._aresolve(host, port, family, exempt=host.lower().rstrip(".") in self._exempt)

    async def acheck(self, host: str, port: int = 0) -> list[ResolveResult]:
        """A target's lookup (what a proxy will connect to): no host is exempt, not even the
        proxy's own name, or ``http://PROXY-HOST/admin`` would reach the proxy's loopback."""
        return await self._aresolve(host, port, socket.AF_INET, exempt=False)

    async def _aresolve(
        self, host: str, port: int, family: socket.AddressFamily, *, exempt: bool
    ) -> list[ResolveResult]:
        key = host.lower().rstrip(".")
        if key in self._map:
            ip, mapped_port = self._map[key]
            results: list[ResolveResult] = [
                {
                    "hostname": host,
                    "host": ip,
                    "port": mapped_port,
                    "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
            ]
        elif self._map_only and key not in self._exempt:  # the proxy's name always resolves
            raise MappedHostMissing(socket.EAI_NONAME, f"{host} is not in the resolver map (resolve_map_only)")
        else:
            results = await self._inner.resolve(host, port, family)
        if self._allow_private or exempt:
            return results
        kept = [r for r in results if is_public_address(r["host"])]
        if not kept:
            addrs = sorted({r["host"] for r in results})
            raise BlockedAddress(
                f"{host} resolves only to non-public addresses {addrs}; pass --allow-private-networks to allow"
            )
        return kept

    async def close(self) -> None:
        await self._inner.close()
