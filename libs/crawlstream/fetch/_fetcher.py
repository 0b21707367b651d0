"""The fetch core: one HTTP attempt per call, robots.txt first, every outcome reported.

I/O edge: aiohttp exceptions stop here and become a :class:`FetchOutcome`; ``afetch``
never raises for anything the remote side does. Redirects are not followed (each hop
goes back through dedupe); robots.txt redirects are followed (up to 5, RFC 9309).
A revisit (ADR 022) sends the previous response's validators as If-None-Match /
If-Modified-Since; a 304 is ``not_modified``, and a 2xx body whose hash equals the previous
one is ``unchanged`` (its body is dropped: the store holds it already).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin

import aiohttp
import xxhash
from aiohttp.abc import AbstractResolver
from aiohttp.connector import Connection
from aiohttp.resolver import DefaultResolver
from yarl import URL

from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.fetch._decode import ACCEPT_ENCODING, CorruptEncoding, UnsupportedEncoding, make_decoder
from crawlstream.fetch._guard import BlockedAddress, GuardedResolver, MappedHostMissing, is_public_address
from crawlstream.fetch._outcome import (
    HOST_FAILURE_OUTCOMES,
    FetchOutcome,
    Outcome,
    kept_headers,
    media_type,
    parse_retry_after,
    request_head,
    response_head,
)
from crawlstream.fetch._pool import BoundedIdleConnector
from crawlstream.fetch._slots import KeyedSlots
from crawlstream.fetch._spacing import DomainSpacing
from crawlstream.robots import (
    MAX_ROBOTS_BYTES,
    MAX_ROBOTS_REDIRECTS,
    ImportedRobotsTxt,
    RobotsCache,
    RobotsPolicy,
    origin_of,
    product_token,
)
from crawlstream.settings import FetchSettings
from crawlstream.sitemaps import robots_sitemaps
from crawlstream.urls import canonicalize

if TYPE_CHECKING:
    from crawlstream.events import FetchResult, UrlRecord
    from crawlstream.politeness import IpGate
    from crawlstream.settings import Settings

__all__ = ["Fetcher", "load_resolve_map", "redirect_hop_record"]

logger = logging.getLogger(__name__)
# Errors of a connection that closed or reset mid-exchange (outcome connect_error: retried).
_CONNECTION_LOST = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError, ConnectionError)

# The default User-Agent's contact: a crawl of the real web with it draws a warning.
PLACEHOLDER_CONTACT = "example.invalid"

_CHUNK_BYTES = 64 * 1024
# The ratio guard only engages past this many decoded bytes: small, very repetitive pages
# legitimately compress > 100:1.
_RATIO_FLOOR_BYTES = 1024 * 1024
_DECODE_STEP_BYTES = 256 * 1024


@dataclass
class _Raw:
    """One response, read and bounded, before it is classified."""

    status: int
    final_url: str
    headers: dict[str, str]
    body: bytes
    truncated: bool
    too_large: bool
    location: str | None
    head: bytes = b""  # status line + header lines as received (FetchOutcome.response_head)
    peer: str = ""  # the address the response came from; "" through a proxy or unknown
    request: bytes = b""  # request line + header lines sent (FetchOutcome.request_head)


def redirect_hop_record(result: FetchResult) -> UrlRecord | None:
    """The redirect hop a 3xx result saw, as the ``urls.records`` row of the alias map's
    redirects dataset (``crawlstream.lake._aliases``, ADR 024): the requested URL -> the
    canonical Location, with the status. None for any other result, or a Location that is
    not a URL (nothing to map it to). Replay rebuilds the map from these rows."""
    if result.outcome != "redirect" or not result.redirect_location or not 300 <= result.status <= 399:
        return None
    from crawlstream.events import UrlRecord
    from crawlstream.lake._aliases import REDIRECTS_DATASET, redirect_extras

    try:
        source = canonicalize(result.url)
        target = canonicalize(result.redirect_location)
    except InvalidUrl:
        return None
    return UrlRecord(
        dataset_id=REDIRECTS_DATASET,
        url=source.url,
        ts_ms=result.fetched_at_ms,
        extras=redirect_extras(target.url, result.status, result.redirect_location),
        domain=source.domain,
    )


def load_resolve_map(path: Path) -> dict[str, tuple[str, int]]:
    """Read ``{host: [ip, port]}`` JSON (as ``crawlstream demo-web --resolve-map-out`` writes)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {str(host): (str(ip), int(port)) for host, (ip, port) in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"resolve map {path}: expected a JSON object {{host: [ip, port]}}, could not read it ({exc}); "
            "regenerate it with `crawlstream demo-web --resolve-map-out FILE`"
        ) from exc


class _PeerResponse(aiohttp.ClientResponse):
    """A response that remembers its connection's peer address: aiohttp releases the
    connection (``resp.connection`` becomes None) as soon as a small body is buffered, before
    the caller sees the response, so the address is read when the response starts."""

    peer: str = ""

    async def start(self, connection: Connection) -> aiohttp.ClientResponse:
        transport = connection.transport
        address = transport.get_extra_info("peername") if transport is not None else None
        if address:
            try:
                self.peer = ipaddress.ip_address(str(address[0]).split("%", 1)[0]).compressed
            except ValueError:
                self.peer = ""  # a Unix socket or something else without an IP address
        return await super().start(connection)


class _Failure(Exception):
    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome: Outcome = outcome


class Fetcher:
    """Fetches one URL per call with connection reuse, timeouts, caps and the SSRF guard.

    ``config``: the ``fetch.*`` settings (``FetchSettings``, taken whole; its defaults when
    None), among them by consequence:
    * ``max_body_bytes``: decoded bytes kept; beyond it the body is cut and ``truncated``.
    * ``max_decompression_ratio``: past 1 MiB decoded, a body inflating faster than this
      ratio is abandoned as ``too_large`` (a decompression bomb).
    * ``allow_private_networks``: off blocks any host resolving only to non-public
      addresses (checked after DNS, on every hop). The demo web on loopback needs it on.
    Its ``resolve_map_file`` and ``per_ip_delay_s`` are read by ``from_settings`` (and the
    caller building ``ip_gate``), not here. The other parameters:
    * ``resolve_map`` / ``resolve_map_only``: host -> (ip, port) overrides; with
      ``resolve_map_only`` every other host fails like NXDOMAIN (the demo never leaks).
    * ``obey_robots``: off only for tests and tools that fetch robots.txt themselves.
    * ``dns_resolver``: the DNS edge (aiohttp's default resolver when None); the guard
      filters whatever it answers. Tests pass a fake one.
    * ``ip_gate``: per-IP politeness (``fetch.per_ip_delay_s``): every GET claims the address
      it connects to right before it is sent; a fetch waits for its address to be free before
      it takes a connection slot (ADR 016).
    * ``domain_spacing_s``: the floor between two page requests of one domain this process keeps
      itself (``_spacing``: a replayed or delayed request cannot come too soon); 0 = off.
    """

    def __init__(
        self,
        *,
        config: FetchSettings | None = None,
        resolve_map: Mapping[str, tuple[str, int]] | None = None,
        resolve_map_only: bool = False,
        obey_robots: bool = True,
        dns_cache_s: float = 300.0,
        dns_resolver: AbstractResolver | None = None,
        imported_robots: Callable[[str], ImportedRobotsTxt | None] | None = None,
        ip_gate: IpGate | None = None,
        domain_spacing_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = c = config if config is not None else FetchSettings()
        self.robots_agent = product_token(c.user_agent)  # what robots.txt groups are matched against
        self._timeout = aiohttp.ClientTimeout(total=c.timeout_s, sock_connect=c.timeout_s, sock_read=c.read_timeout_s)
        self._host_slots = KeyedSlots(c.limit_per_host)  # connections per host (not aiohttp's: see _slots)
        self._resolve_map = dict(resolve_map or {})
        self._resolve_map_only = resolve_map_only
        self._obey_robots = obey_robots
        self._dns_cache_s = dns_cache_s
        self._dns_resolver = dns_resolver
        self._imported_robots = imported_robots
        self._ip_gate = ip_gate
        self._addresses: dict[str, tuple[str, float]] = {}  # host -> (address, monotonic expiry), for the gate
        self._ip_turn = KeyedSlots(1)
        self._clock = clock
        self.robots = RobotsCache(ttl_s=c.robots_cache_s)
        self._sitemaps_owed: set[str] = set()  # origins whose robots sitemaps must be reported again
        self._robots_turn = KeyedSlots(1)  # one robots.txt fetch per origin, however many pages wait
        self.spacing = DomainSpacing(domain_spacing_s, cap_s=c.timeout_s)
        self._domain_turns = KeyedSlots(1)
        self._session: aiohttp.ClientSession | None = None
        self._resolver: GuardedResolver | None = None
        self._semaphore: asyncio.Semaphore | None = None

    @property
    def user_agent(self) -> str:
        return self.config.user_agent

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        resolve_map: Mapping[str, tuple[str, int]] | None = None,
        imported_robots: Callable[[str], ImportedRobotsTxt | None] | None = None,
        ip_gate: IpGate | None = None,
    ) -> Fetcher:
        """A fetcher as configured; a resolver map (given, or from ``fetch.resolve_map_file``)
        is exclusive: hosts outside it fail as dns_error, so a demo crawl never leaks out. The
        domain spacing floor is ``scheduler.min_delay_s`` when one request per domain is in
        flight at a time (the default), else off."""
        f = settings.fetch
        if resolve_map is None and f.resolve_map_file is not None:
            resolve_map = load_resolve_map(f.resolve_map_file)
        if resolve_map is None and PLACEHOLDER_CONTACT in f.user_agent:
            # Site owners read the User-Agent to find who crawls them (not for a mapped demo web).
            logger.warning(
                "the User-Agent %r has a placeholder contact: set CRAWLSTREAM_FETCH_USER_AGENT "
                "(--fetch-user-agent) to name your crawler with a URL or e-mail where site owners reach you",
                f.user_agent,
            )
        return cls(
            config=f,
            resolve_map=resolve_map,
            resolve_map_only=resolve_map is not None,
            imported_robots=imported_robots,
            ip_gate=ip_gate,
            domain_spacing_s=(settings.scheduler.min_delay_s
                              if settings.scheduler.max_in_flight_per_domain == 1 else 0.0),
        )

    # -- lifecycle -----------------------------------------------------------------

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            exempt = frozenset({URL(self.config.http_proxy).host or ""}) if self.config.http_proxy else frozenset()
            self._resolver = GuardedResolver(
                self._dns_resolver if self._dns_resolver is not None else DefaultResolver(),
                allow_private_networks=self.config.allow_private_networks,
                resolve_map=self._resolve_map,
                resolve_map_only=self._resolve_map_only,
                exempt_hosts=exempt,
            )
            # No connector limits: their waiters can miss their wake-up (``_slots``); the
            # fetcher's own semaphore (concurrency) and per-host slots bound the connections in
            # use, and ``max_idle_connections`` the idle ones (``_pool``).
            connector = BoundedIdleConnector(
                max_idle=self.config.max_idle_connections,
                limit=0,
                limit_per_host=0,
                resolver=self._resolver,
                use_dns_cache=True,
                ttl_dns_cache=int(self._dns_cache_s),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                auto_decompress=False,
                headers={"User-Agent": self.user_agent, "Accept-Encoding": ACCEPT_ENCODING},
                cookie_jar=aiohttp.DummyCookieJar(),
                response_class=_PeerResponse,
            )
            self._semaphore = asyncio.Semaphore(self.config.concurrency)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Fetcher:
        self._ensure_session()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- fetching ------------------------------------------------------------------

    async def afetch(
        self,
        url: str,
        *,
        attempt: int = 0,
        if_none_match: str | None = None,
        if_modified_since: str | None = None,
        previous_content_hash: str | None = None,
        domain: str | None = None,
    ) -> FetchOutcome:
        """Fetch ``url`` once. Never raises for network or server behaviour.

        ``domain``: the URL's registered domain, whose spacing floor the page request keeps
        (``_spacing``); None (tools fetching one URL) keeps none.

        ``if_none_match`` / ``if_modified_since``: the previous response's ETag and
        Last-Modified, sent as conditional headers (a 304 answers ``not_modified``);
        ``previous_content_hash``: a 2xx body hashing the same is ``unchanged``.
        """
        session = self._ensure_session()
        assert self._semaphore is not None
        started = time.monotonic()
        fetched_at_ms = int(self._clock() * 1000)

        def done(outcome: Outcome, **kw: object) -> FetchOutcome:
            kw.setdefault("final_url", url)
            kw.setdefault("status", 0)
            return FetchOutcome(
                url=url,
                outcome=outcome,
                elapsed_ms=int((time.monotonic() - started) * 1000),
                attempt=attempt,
                fetched_at_ms=fetched_at_ms,
                **kw,  # type: ignore[arg-type]
            )

        crawl_delay_s: float | None = None
        sitemaps: tuple[str, ...] | None = None
        async with self._ip_turns(url), self._semaphore:
            try:
                self._check_target(url)
                if self._obey_robots:
                    policy, fresh = await self._arobots_policy(session, url)
                    origin = origin_of(url)
                    if fresh or origin in self._sitemaps_owed:  # report an origin's sitemaps once
                        self._sitemaps_owed.discard(origin)
                        sitemaps = robots_sitemaps(origin, policy)
                    decision = policy.decide(url, self.robots_agent)
                    crawl_delay_s = decision.crawl_delay_s
                    if not decision.allowed:
                        why = "disallowed by robots.txt" if decision.backoff_s is None else policy.reason
                        return done(
                            "robots_disallowed",
                            error=why,
                            retry_after_s=decision.backoff_s,
                            crawl_delay_s=crawl_delay_s,
                            robots_sitemaps=sitemaps,
                        )
                await self._acheck_proxied_target(url)
                conditional: dict[str, str] = {}
                if if_none_match:
                    conditional["If-None-Match"] = if_none_match
                if if_modified_since:
                    conditional["If-Modified-Since"] = if_modified_since
                async with self._domain_turn(url, domain, crawl_delay_s):
                    raw = await self._aget(session, url, self.config.max_body_bytes, conditional)
            except _Failure as exc:
                return done(exc.outcome, error=str(exc), robots_sitemaps=sitemaps)
        return self._classify(raw, done, crawl_delay_s, sitemaps, previous_content_hash)

    @contextlib.asynccontextmanager
    async def _domain_turn(self, url: str, domain: str | None, crawl_delay_s: float | None) -> AsyncIterator[None]:
        """The domain spacing floor (``_spacing``) around one page request: the domain's fetches
        take turns, each waiting out the delay since the previous one ended."""
        if domain is None or not self.spacing.enabled:
            yield
            return
        async with self._domain_turns.hold(domain):
            wait = self.spacing.wait_s(domain)
            if wait > 0:
                logger.debug("fetch of %s held %.0f ms: inside its domain's spacing", url, wait * 1000)
                await asyncio.sleep(wait)
            try:
                yield
            finally:
                self.spacing.ended(domain, crawl_delay_s)

    @contextlib.asynccontextmanager
    async def _ip_turns(self, url: str) -> AsyncIterator[None]:
        """Per-IP politeness before a connection slot is taken: one fetch per address at a
        time in this process, entered once the address is free (each GET then claims it in
        ``_aget``). A host that does not resolve passes: the fetch itself reports why."""
        address = await self._address_of(URL(url, encoded=True).host or "") if self._ip_gate is not None else None
        if address is None:
            yield
            return
        assert self._ip_gate is not None
        async with self._ip_turn.hold(address):
            await self._ip_gate.wait_free(address)
            yield

    async def _address_of(self, host: str) -> str | None:
        """The address the connection to ``host`` goes to (cached like DNS), or None."""
        try:
            return ipaddress.ip_address(host.strip("[]")).compressed
        except ValueError:
            pass
        cached = self._addresses.get(host)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        assert self._resolver is not None
        try:
            found = await self._resolver.acheck(host, 80)
        except (TimeoutError, OSError):
            return None
        if not found:
            return None
        if len(self._addresses) > 100_000:
            self._addresses.clear()
        self._addresses[host] = (found[0]["host"], time.monotonic() + self._dns_cache_s)
        return found[0]["host"]

    def _classify(
        self,
        raw: _Raw,
        done: Callable[..., FetchOutcome],
        crawl_delay_s: float | None,
        sitemaps: tuple[str, ...] | None = None,
        previous_content_hash: str | None = None,
    ) -> FetchOutcome:
        common = dict(
            final_url=raw.final_url,
            status=raw.status,
            headers=raw.headers,
            content_type=media_type(raw.headers),
            body=raw.body,
            truncated=raw.truncated,
            body_size_bytes=len(raw.body),
            crawl_delay_s=crawl_delay_s,
            robots_sitemaps=sitemaps,
            response_head=raw.head,
            ip_address=raw.peer,
            request_head=raw.request,
        )
        if raw.status in (429, 503):
            common["retry_after_s"] = parse_retry_after(raw.headers.get("retry-after"), now_s=self._clock())
        if raw.too_large:
            return done("too_large", error="decompression ratio limit exceeded (bomb?)", **common)
        if raw.status == 304:
            return done("not_modified", **common)
        if 300 <= raw.status < 400 and raw.location is not None:
            return done("redirect", redirect_location=raw.location, **common)
        if 200 <= raw.status < 300:
            chash = xxhash.xxh3_128_hexdigest(raw.body) if raw.body else ""
            if chash and chash == previous_content_hash:
                common["body"] = b""  # the store holds this body already: it need not travel on
                return done("unchanged", content_hash=chash, **common)
            return done("ok", content_hash=chash, **common)
        return done("http_error", error=f"HTTP {raw.status}", **common)

    def _check_target(self, url: str) -> None:
        try:
            parsed = URL(url, encoded=True)
        except ValueError as exc:
            raise _Failure("error", f"invalid URL {url!r}: {exc}") from exc
        raw_host = parsed.raw_host  # .host IDNA-decodes every name: most of this check's CPU
        if parsed.scheme not in ("http", "https") or not raw_host:
            raise _Failure("error", f"expected an absolute http(s) URL, got {url!r}")
        last_label = raw_host.rstrip(".").rpartition(".")[2]
        ip_like = last_label[-1:].isdigit() or last_label[:2] in ("0x", "0X") or ":" in raw_host
        if self.config.allow_private_networks or not ip_like:
            return  # allowed, or a name: checked by the resolver after DNS
        host = parsed.host or raw_host  # an IP literal: never IDNA-encoded, .host is cheap
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
            literal = True
        except ValueError:
            literal = False
        if not literal:
            host = self._legacy_ipv4(raw_host)
            if not host:
                return  # a name: checked by the resolver after DNS
            if is_public_address(host):  # aiohttp refuses to connect to such a spelling anyway
                raise _Failure("error", f"{url!r} spells IPv4 {host} in a legacy form; canonicalize the URL first")
        if not is_public_address(host):
            raise _Failure("blocked_private", f"{host} is not a public address; pass --allow-private-networks to allow")

    @staticmethod
    def _legacy_ipv4(raw_host: str) -> str:
        """The address a host ending in a number stands for (2130706433, 0177.0.0.1, 0x7f.1,
        127.1, trailing dot, percent-escaped or full-width digits), read as browsers and the
        canonicalizer do; "" for a name. Only canonical URLs reach here from the pipeline,
        but the resolver (getaddrinfo) would read these forms too, so they are judged here.
        """
        try:
            canonical = canonicalize(f"http://{raw_host}/").host
        except InvalidUrl as exc:
            raise _Failure("error", f"host {raw_host!r} is neither a name nor an IPv4 address: {exc}") from exc
        try:
            ipaddress.IPv4Address(canonical)
        except ValueError:
            return ""
        return canonical

    async def _acheck_proxied_target(self, url: str) -> None:
        """Through a proxy our connector only resolves the proxy, so check the target here.

        Best effort: a target that resolves to non-public addresses is blocked; one we cannot
        resolve goes to the proxy, which does its own DNS (and is the operator's egress
        policy). The demo web doubles as such a proxy for its own hosts.
        """
        if not self.config.http_proxy or self._resolver is None:
            return
        host = URL(url, encoded=True).host or ""
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
            return  # literal: already checked
        except ValueError:
            pass
        try:
            await self._resolver.acheck(host, 80)
        except BlockedAddress as exc:
            raise _Failure("blocked_private", str(exc)) from exc
        except OSError as exc:
            logger.debug("proxied target %s does not resolve here (%s); the proxy decides", host, exc)

    async def _aget(
        self, session: aiohttp.ClientSession, url: str, max_bytes: int, headers: Mapping[str, str] | None = None
    ) -> _Raw:
        """One GET, no redirects, body read through the bounded decoder."""
        target = URL(url, encoded=True)
        try:
            async with self._host_slots.hold((target.scheme, target.host, target.port)):
                if self._ip_gate is not None and (address := await self._address_of(target.host or "")):
                    await self._ip_gate.claim(address)  # right before the send: the spacing holds
                proxy = self.config.http_proxy
                async with session.get(target, allow_redirects=False, proxy=proxy, headers=headers) as resp:
                    headers = kept_headers(resp.headers.items())
                    location = resp.headers.get("Location")
                    absolute = urljoin(str(resp.url), location) if location else None
                    version = resp.version or aiohttp.HttpVersion11
                    head = response_head((version.major, version.minor), resp.status, resp.reason, resp.raw_headers)
                    peer = self._peer_of(resp)
                    info = resp.request_info
                    sent = request_head(info.method, info.url.raw_path_qs, info.headers.items())
                    body, truncated, too_large = await self._aread(resp, max_bytes)
                    if truncated:
                        resp.close()  # unread bytes left: never reuse this connection
                    return _Raw(
                        resp.status, str(resp.url), headers, body, truncated, too_large, absolute, head, peer, sent
                    )
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, BlockedAddress):
                raise _Failure("blocked_private", str(exc.os_error)) from exc
            if isinstance(exc.os_error, MappedHostMissing):
                raise _Failure("dns_error", str(exc.os_error)) from exc
            raise _Failure("dns_error", f"DNS lookup failed: {exc.os_error}") from exc
        except (aiohttp.ClientProxyConnectionError, aiohttp.ClientConnectorError) as exc:
            raise _Failure("connect_error", f"connect failed: {exc}") from exc
        except TimeoutError as exc:  # aiohttp's timeouts subclass asyncio.TimeoutError == TimeoutError
            raise _Failure("timeout", f"timed out ({exc.__class__.__name__})") from exc
        except _CONNECTION_LOST as exc:
            # The connection closed or reset before the response was whole: transient like a
            # refused connect (Scrapy's RetryMiddleware retries these too), so retried the same way.
            raise _Failure("connect_error", f"connection lost: {exc.__class__.__name__}: {exc}") from exc
        except (aiohttp.ClientError, UnsupportedEncoding, CorruptEncoding, zlib.error, OSError) as exc:
            raise _Failure("error", f"{exc.__class__.__name__}: {exc}") from exc

    def _peer_of(self, resp: aiohttp.ClientResponse) -> str:
        """The address the response came from (WARC-IP-Address); "" through a proxy (the peer
        is then the proxy, not the server)."""
        if self.config.http_proxy or not isinstance(resp, _PeerResponse):
            return ""
        return resp.peer

    async def _aread(self, resp: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, bool, bool]:
        """Decoded body up to ``max_bytes``; (body, truncated, too_large)."""
        decoder = make_decoder(resp.headers.get("Content-Encoding", ""))
        body = bytearray()
        max_ratio = self.config.max_decompression_ratio
        async for chunk in resp.content.iter_chunked(_CHUNK_BYTES):
            decoder.feed(chunk)
            # Inflate in steps so the ratio guard sees a bomb before the cap is reached.
            while out := decoder.read(_DECODE_STEP_BYTES):
                body += out
                if len(body) > _RATIO_FLOOR_BYTES and len(body) > max_ratio * max(decoder.consumed_bytes, 1):
                    return bytes(body[:max_bytes]), True, True
                if len(body) > max_bytes:
                    return bytes(body[:max_bytes]), True, False
        return bytes(body), False, False

    # -- robots.txt ----------------------------------------------------------------

    def owe_sitemaps(self, url: str) -> None:
        """The result of a fetch of ``url`` was dropped (its partition was lost): if that fetch
        read the origin's robots.txt, the sitemaps it named went with it, and the request's
        replay finds robots.txt cached. The next fetch of the origin reports them again (the
        deduper drops them if they were reported after all)."""
        self._sitemaps_owed.add(origin_of(url))

    async def _arobots_policy(self, session: aiohttp.ClientSession, url: str) -> tuple[RobotsPolicy, bool]:
        """(the origin's policy, whether this call fetched robots.txt for it)."""
        origin = origin_of(url)
        policy = self.robots.get(origin)
        if policy is not None:
            return policy, False
        fresh = False
        async with self._robots_turn.hold(origin):
            policy = self.robots.get(origin)
            if policy is None:
                imported = await self._aimported_robots(origin)
                if imported is not None:  # obeyed until it expires; robots.txt is not requested
                    policy, ttl_s = imported
                    self.robots.put(origin, policy, ttl_s=ttl_s)
                else:
                    policy = await self._afetch_robots(session, origin)
                    self.robots.put(origin, policy)
                    fresh = True
        return policy, fresh

    async def _aimported_robots(self, origin: str) -> tuple[RobotsPolicy, float] | None:
        """The origin's imported robots.txt (``crawlstream migrate``) and its seconds left, if any."""
        if self._imported_robots is None:
            return None
        found = await asyncio.to_thread(self._imported_robots, origin)
        if found is None:
            return None
        ttl_s = found.expires_at_ms / 1000 - self._clock()
        if ttl_s <= 0:
            return None
        return RobotsPolicy.parse(found.body[:MAX_ROBOTS_BYTES]), ttl_s

    async def _afetch_robots(self, session: aiohttp.ClientSession, origin: str) -> RobotsPolicy:
        target = origin + "/robots.txt"
        for _hop in range(MAX_ROBOTS_REDIRECTS + 1):
            try:
                self._check_target(target)
                await self._acheck_proxied_target(target)
                raw = await self._aget(session, target, MAX_ROBOTS_BYTES)
            except _Failure as exc:
                if exc.outcome in HOST_FAILURE_OUTCOMES:
                    raise  # the page's host fails the same way: report that, not robots
                logger.info("robots.txt of %s unavailable: %s", origin, exc)
                return RobotsPolicy.from_response(0, b"", error_backoff_s=self.config.robots_error_backoff_s)
            if 300 <= raw.status < 400 and raw.location:
                target = raw.location
                continue
            return RobotsPolicy.from_response(raw.status, raw.body, error_backoff_s=self.config.robots_error_backoff_s)
        return RobotsPolicy.allow_all(f"robots.txt: more than {MAX_ROBOTS_REDIRECTS} redirects")
