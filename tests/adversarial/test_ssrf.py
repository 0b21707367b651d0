"""SSRF: no URL a crawl discovers can point the fetcher at this machine or its private network.

The internet is simulated at its two edges and nowhere else, so the guard runs unchanged and
sees public and private addresses as it would on the real network:

* ``FakeDns`` is the fetcher's DNS resolver (its ``dns_resolver`` seam): canned answers per
  name, optionally a different one on every lookup (DNS rebinding); unknown names NXDOMAIN.
* ``FakeInternet`` stands in for the route table under aiohttp's connector: a connect to one
  of the ``PUBLIC`` addresses reaches a loopback server, a loopback connect goes through
  as is (only ``allow_private_networks`` makes one), and anything else fails with
  ENETUNREACH before a socket exists (an egress fence: no test sends a packet off the machine).

Every hostile case must end as a ``FetchOutcome`` with a reason (``blocked_private``, or for a
URL the canonicalizer rejects an ``InvalidUrl``), never a crash, and the "internal" server
(the target an attacker wants) must never see a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

import aiohappyeyeballs
import aiohttp.connector
import pytest
import zstandard
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from crawlstream.crawl import CrawlStats
from crawlstream.errors import InvalidUrl
from crawlstream.events import FetchRequest
from crawlstream.fetch import Fetcher, FetchOutcome, is_public_address
from crawlstream.fetch.service import to_result
from crawlstream.links import extract_links
from crawlstream.settings import FetchSettings
from crawlstream.urls import canonicalize

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
UA = "crawlstream-adversarial/1.0"
# Globally routable addresses (example.com's): FakeInternet routes them to the public loopback server.
PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"
PUBLIC = frozenset({PUBLIC_V4, PUBLIC_V6})


# -- the two edges ----------------------------------------------------------------------------


class FakeDns(AbstractResolver):
    """Answers ``name -> [answer, answer, ...]`` (each a list of IPs), one per lookup, the last
    repeating; unknown names fail like NXDOMAIN. Records every lookup."""

    def __init__(self, answers: Mapping[str, Sequence[Sequence[str]]]) -> None:
        self._answers = {k.lower(): [list(a) for a in v] for k, v in answers.items()}
        self._served: Counter[str] = Counter()
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        key = host.lower().rstrip(".")
        self.lookups.append(key)
        seq = self._answers.get(key)
        if seq is None:
            raise OSError(socket.EAI_NONAME, f"{host}: NXDOMAIN (fake DNS)")
        ips = seq[min(self._served[key], len(seq) - 1)]
        self._served[key] += 1
        return [
            {
                "hostname": host,
                "host": ip,
                "port": port,
                "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for ip in ips
        ]

    async def close(self) -> None:
        return None


class FakeInternet:
    """Replaces aiohappyeyeballs.start_connection (what aiohttp's connector dials through)."""

    def __init__(self, real: Callable[..., Coroutine[Any, Any, socket.socket]]) -> None:
        self._real = real
        self.connects: list[str] = []  # every address the connector asked for, in order

    async def start_connection(self, addr_infos: Sequence[Any], **kw: Any) -> socket.socket:
        routed = []
        for family, type_, proto, canonname, sockaddr in addr_infos:
            ip, port = sockaddr[0], sockaddr[1]
            self.connects.append(ip)
            if ip in PUBLIC:
                routed.append((socket.AF_INET, type_, proto, canonname, ("127.0.0.1", port)))
            elif ipaddress.ip_address(ip.split("%", 1)[0]).is_loopback:
                routed.append((family, type_, proto, canonname, sockaddr))
        if not routed:
            raise OSError(errno.ENETUNREACH, f"fake internet: no route to {[a[4][0] for a in addr_infos]}")
        return await self._real(routed, **kw)


@pytest.fixture
def internet(monkeypatch: pytest.MonkeyPatch) -> FakeInternet:
    # Fail closed: were aiohttp to stop dialing through aiohappyeyeballs, the PUBLIC addresses
    # would be dialed for real; stop here instead.
    assert aiohttp.connector.aiohappyeyeballs is aiohappyeyeballs
    fake = FakeInternet(aiohappyeyeballs.start_connection)
    monkeypatch.setattr(aiohappyeyeballs, "start_connection", fake.start_connection)
    return fake


# -- the servers ------------------------------------------------------------------------------


@dataclass
class Site:
    """One loopback HTTP server that records what it was asked."""

    port: int = 0
    seen: list[tuple[str, str]] = field(default_factory=list)  # (Host header, path)

    def paths(self) -> list[str]:
        return [path for _host, path in self.seen]


@dataclass
class Net:
    public: Site
    internal: Site
    dns: FakeDns
    internet: FakeInternet
    robots_redirects: dict[str, str]
    links_html: list[str]

    def fetcher(self, **kw: Any) -> Fetcher:
        config = FetchSettings(user_agent=UA, timeout_s=5.0, read_timeout_s=2.0, max_body_bytes=64 * 1024)
        settings = {f.name for f in fields(FetchSettings)}
        config = replace(config, **{k: v for k, v in kw.items() if k in settings})
        opts: dict[str, Any] = dict(dns_resolver=self.dns)
        opts.update((k, v) for k, v in kw.items() if k not in settings)
        return Fetcher(config=config, **opts)

    def public_url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.public.port}{path}"

    def leaked(self) -> list[str]:
        """Connects that were not to a public address (each one reached this machine)."""
        return [ip for ip in self.internet.connects if ip not in PUBLIC]


def _site_app(site: Site, handler: Callable[[web.Request], web.StreamResponse]) -> web.Application:
    async def record(request: web.Request) -> web.StreamResponse:
        site.seen.append((request.host, request.path))
        response = handler(request)
        response.force_close()
        return response

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", record)
    return app


async def _start(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


@asynccontextmanager
async def network(internet: FakeInternet, answers: Mapping[str, Sequence[Sequence[str]]]) -> AsyncIterator[Net]:
    """A public server (robots allow-all, /redirect?to=, /links; no keep-alive, so every
    fetch connects, and looks up, anew) and an internal one."""
    net = Net(Site(), Site(), FakeDns(answers), internet, {}, [])

    def public(request: web.Request) -> web.StreamResponse:
        host = request.host.rsplit(":", 1)[0]
        if request.path == "/robots.txt":
            if host in net.robots_redirects:
                return web.Response(status=301, headers={"Location": net.robots_redirects[host]})
            return web.Response(text="User-agent: *\nAllow: /\n")
        if request.path == "/redirect":
            return web.Response(status=302, headers={"Location": request.query["to"]})
        if request.path == "/links":
            anchors = "".join(f'<a href="{href}">x</a>\n' for href in net.links_html)
            return web.Response(text=f"<html><body>{anchors}</body></html>", content_type="text/html")
        return web.Response(text="public page")

    def internal(request: web.Request) -> web.StreamResponse:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        return web.Response(text="internal secret")

    runners = []
    try:
        for site, handler in ((net.public, public), (net.internal, internal)):
            runner, site.port = await _start(_site_app(site, handler))
            runners.append(runner)
        yield net
    finally:
        for runner in runners:
            await runner.cleanup()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 25))


async def fetch_all(fetcher: Fetcher, urls: Sequence[str]) -> list[FetchOutcome]:
    try:
        return [await fetcher.afetch(u) for u in urls]
    finally:
        await fetcher.aclose()


# The names the attacker's DNS answers with private addresses (FakeDns, whatever the real DNS says).
PUBLIC_NAMES: dict[str, list[list[str]]] = {
    "www.public.test": [[PUBLIC_V4]],
    "v6.public.test": [[PUBLIC_V6]],
    "other.public.test": [[PUBLIC_V4]],
}
PRIVATE_NAMES: dict[str, list[list[str]]] = {
    "localhost": [["127.0.0.1", "::1"]],
    "internal.test": [["127.0.0.1"]],
    "metadata.test": [["169.254.169.254"]],
    "ec2-v6-metadata.test": [["fd00:ec2::254"]],
    "link-local-v6.test": [["fe80::1"]],
    "loopback-v6.test": [["::1"]],
    "mapped.test": [["::ffff:127.0.0.1"]],
    "mapped-hex.test": [["::ffff:7f00:1"]],
    "compat.test": [["::127.0.0.1"]],
    "nat64.test": [["64:ff9b::a9fe:a9fe"]],
    "sixtofour.test": [["2002:7f00:1::"]],
    "sixtofour-metadata.test": [["2002:a9fe:a9fe::1"]],
    "teredo.test": [["2001:0:4136:e378:8000:63bf:80ff:fffe"]],
    "site-local.test": [["fec0::1"]],
    "zero.test": [["0.0.0.0"]],
    "unspecified-v6.test": [["::"]],
    "cgnat.test": [["100.64.0.1"]],
    "cgnat-top.test": [["100.127.255.254"]],
    "rfc1918.test": [["10.0.0.1", "172.16.0.1", "192.168.1.1"]],
    "benchmarking.test": [["198.18.0.1"]],
    "broadcast.test": [["255.255.255.255"]],
    "multicast.test": [["224.0.0.1"]],
}
ANSWERS = {**PUBLIC_NAMES, **PRIVATE_NAMES}

# Hosts that spell a private address without DNS: every encoding a browser, the canonicalizer
# or getaddrinfo accepts. "{port}" is the internal server's port.
LITERAL_HOSTS = [
    "127.0.0.1",
    "2130706433",  # decimal
    "0177.0.0.1",  # octal
    "017700000001",  # octal, one number
    "0x7f.0.0.1",  # hex
    "0x7f000001",  # hex, one number
    "0x7F.0x00.0x00.0x01",
    "127.1",  # short forms
    "127.0.1",
    "0x7f.1",
    "127.000.000.001",
    "127.0.0.1.",  # trailing dot
    "%31%32%37.0.0.1",  # percent-escaped
    "１２７.０.０.１",  # full-width digits
    "127。0。0。1",  # ideographic full stops
    "0",  # 0.0.0.0
    "0.0.0.0",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::]",
    "[::ffff:127.0.0.1]",  # IPv4-mapped
    "[::ffff:7f00:1]",
    "[::ffff:0:7f00:1]",  # IPv4-translated (SIIT)
    "[::127.0.0.1]",  # IPv4-compatible
    "[64:ff9b::7f00:1]",  # NAT64
    "[64:ff9b::a9fe:a9fe]",
    "[64:ff9b:1::7f00:1]",
    "[2002:7f00:1::]",  # 6to4 of 127.0.0.1
    "[2002:a9fe:a9fe::]",  # 6to4 of 169.254.169.254
    "[2002:c0a8:101::1]",  # 6to4 of 192.168.1.1
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",  # Teredo, client 127.0.0.1
    "169.254.169.254",  # cloud metadata
    "2852039166",  # 169.254.169.254 in decimal
    "[fe80::1]",
    "[fe80::a9fe:a9fe]",
    "[fd00:ec2::254]",  # AWS IMDS over IPv6
    "[fec0::1]",  # site-local (deprecated, still routed by some networks)
    "100.64.0.1",  # carrier-grade NAT
    "100.127.255.254",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "198.18.0.1",
    "224.0.0.1",
    "255.255.255.255",
]


# -- literal hosts ----------------------------------------------------------------------------


@pytest.mark.parametrize("host", LITERAL_HOSTS)
def test_private_address_in_any_spelling_is_refused_raw_and_after_canonicalization(
    internet: FakeInternet, host: str
) -> None:
    """Fetched as written (a caller that skips canonicalization) and as the pipeline would."""

    async def go() -> tuple[list[FetchOutcome], Net, str | None]:
        async with network(internet, ANSWERS) as net:
            raw = f"http://{host}:{net.internal.port}/secret"
            try:
                canonical: str | None = canonicalize(raw).url
            except InvalidUrl:
                canonical = None  # refused before any fetch: fine
            urls = [raw] if canonical is None else [raw, canonical]
            return await fetch_all(net.fetcher(), urls), net, canonical

    outs, net, _canonical = run(go())
    assert [o.outcome for o in outs] == ["blocked_private"] * len(outs), [(o.url, o.outcome, o.error) for o in outs]
    assert all("not a public address" in o.error for o in outs)
    assert net.internal.seen == [] and net.internet.connects == []


@pytest.mark.parametrize("name", sorted(PRIVATE_NAMES))
def test_name_resolving_only_to_private_addresses_is_refused_after_dns(internet: FakeInternet, name: str) -> None:
    async def go() -> tuple[FetchOutcome, Net]:
        async with network(internet, ANSWERS) as net:
            url = canonicalize(f"http://{name}:{net.internal.port}/secret").url
            return (await fetch_all(net.fetcher(), [url]))[0], net

    out, net = run(go())
    assert out.outcome == "blocked_private" and "non-public addresses" in out.error
    assert net.dns.lookups == [name]  # checked once, robots.txt never fetched
    assert net.internet.connects == [] and net.internal.seen == []


def test_mixed_answer_connects_only_to_its_public_address(internet: FakeInternet) -> None:
    answers = {**ANSWERS, "mixed.test": [["127.0.0.1", PUBLIC_V4, "10.0.0.1"]]}

    async def go() -> tuple[FetchOutcome, Net]:
        async with network(internet, answers) as net:
            return (await fetch_all(net.fetcher(), [net.public_url("mixed.test", "/p")]))[0], net

    out, net = run(go())
    assert out.outcome == "ok" and out.body == b"public page"
    assert set(net.internet.connects) == {PUBLIC_V4}
    assert net.public.paths() == ["/robots.txt", "/p"]


def test_harness_sees_a_leak_when_private_networks_are_allowed(internet: FakeInternet) -> None:
    """The control: with the guard off the same URLs reach the internal server, so the empty
    ``internal.seen`` of the other tests means refused, not unreachable."""

    async def go() -> tuple[list[FetchOutcome], Net]:
        async with network(internet, ANSWERS) as net:
            urls = [f"http://127.0.0.1:{net.internal.port}/secret", f"http://internal.test:{net.internal.port}/s2"]
            return await fetch_all(net.fetcher(allow_private_networks=True), urls), net

    outs, net = run(go())
    assert [o.outcome for o in outs] == ["ok", "ok"] and outs[0].body == b"internal secret"
    assert "/secret" in net.internal.paths() and "/s2" in net.internal.paths()


def test_legacy_spelling_of_a_public_address_is_an_error_not_a_crash(internet: FakeInternet) -> None:
    async def go() -> FetchOutcome:
        async with network(internet, ANSWERS) as net:
            return (await fetch_all(net.fetcher(), [f"http://1572395042:{net.public.port}/"]))[0]  # 93.184.216.34

    out = run(go())
    assert out.outcome == "error" and "canonicalize" in out.error


# -- the whole path: discovered links, redirects, robots.txt -----------------------------------


def test_links_of_a_public_page_to_private_targets_are_all_refused_and_counted(internet: FakeInternet) -> None:
    """Page -> extract_links (canonicalizes) -> fetch each -> FetchResult -> crawl stats."""

    async def go() -> tuple[list[FetchOutcome], int, Net]:
        async with network(internet, ANSWERS) as net:
            port = net.internal.port
            net.links_html = [f"http://{h}:{port}/secret" for h in LITERAL_HOSTS]
            net.links_html += [f"http://{n}:{port}/secret" for n in PRIVATE_NAMES]
            net.links_html += [f"//2130706433:{port}/relative", f"http://user:pw@0x7f.1:{port}/userinfo"]
            fetcher = net.fetcher()
            try:
                page = await fetcher.afetch(net.public_url("www.public.test", "/links"))
                assert page.outcome == "ok"
                links = extract_links(page.body, page.final_url, content_type=page.headers.get("content-type"))
                return [await fetcher.afetch(link.url) for link in links], len(net.links_html), net
            finally:
                await fetcher.aclose()

    outs, offered, net = run(go())
    stats = CrawlStats()
    for i, out in enumerate(outs):
        request = FetchRequest(url=out.url, url_key=i, domain="x", depth=1, attempt=0, requested_at_ms=0, dataset_id=1)
        stats.add(to_result(request, out, zstandard.ZstdCompressor(level=1)), partition=0, offset=i)
    # Canonical forms coincide (every spelling of 127.0.0.1 is one URL): fewer links than hrefs.
    assert 20 <= len(outs) <= offered
    assert stats.by_outcome == Counter({"blocked_private": len(outs)})
    assert stats.errors == len(outs)
    assert net.internal.seen == [] and net.leaked() == []


# URLs whose parsers disagree (WHATWG, RFC 3986, yarl) about which part is the host.
CONFUSING_URLS = [
    "http://www.public.test:{pp}\\@127.0.0.1:{ip}/",
    "http://127.0.0.1:{ip}\\@www.public.test:{pp}/",
    "http://www.public.test:{pp}#@127.0.0.1:{ip}/",
    "http://www.public.test:{pp}?@127.0.0.1:{ip}/",
    "http://127.0.0.1:{ip}#@www.public.test:{pp}/",
    "http://www.public.test:{pp}@127.0.0.1:{ip}/",
    "http://www.public.test:{pp}%00@127.0.0.1:{ip}/",
    "http://127.0.0.1:{ip}%2f@www.public.test:{pp}/",
    "http://www.public.test:{pp}%2f@127.0.0.1:{ip}/",
    "http://[::ffff:127.0.0.1]:{ip}@www.public.test:{pp}/",
    "http:\\\\127.0.0.1:{ip}\\secret",
    "http:/127.0.0.1:{ip}/secret",
    "http:///127.0.0.1:{ip}/secret",
    " \thttp://127.0.0.1:{ip}/secret\n",
    "HTTP://127.0.0.1:{ip}/secret",
    "http://127.0.0.1\t:{ip}/secret",
    "http://[fe80::1%25lo]:{ip}/secret",
    "http://[::1%25lo]:{ip}/secret",
]


@pytest.mark.parametrize("template", CONFUSING_URLS)
def test_url_parser_confusion_never_reaches_a_private_address(internet: FakeInternet, template: str) -> None:
    """Raw and canonicalized: whichever host a parser picks, a private one is refused."""

    async def go() -> tuple[list[FetchOutcome], Net]:
        async with network(internet, ANSWERS) as net:
            raw = template.format(pp=net.public.port, ip=net.internal.port)
            urls = [raw]
            with contextlib.suppress(InvalidUrl):
                urls.append(canonicalize(raw).url)
            return await fetch_all(net.fetcher(), urls), net

    outs, net = run(go())
    assert {o.outcome for o in outs} <= {"blocked_private", "ok", "error"}, [(o.url, o.outcome) for o in outs]
    assert all(o.body in (b"", b"public page") for o in outs)
    assert net.internal.seen == [] and net.leaked() == []


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:{port}/secret",
        "http://2130706433:{port}/secret",
        "http://0x7f.1:{port}/secret",
        "http://[::ffff:127.0.0.1]:{port}/secret",
        "http://[::1]:{port}/secret",
        "http://169.254.169.254/latest/meta-data/",
        "http://internal.test:{port}/secret",
        "http://metadata.test/latest/meta-data/",
        "//127.0.0.1:{port}/scheme-relative",
        "http://public@127.0.0.1:{port}/userinfo",
    ],
)
def test_redirect_from_public_origin_to_private_target_is_not_followed_and_its_hop_refused(
    internet: FakeInternet, location: str
) -> None:
    async def go() -> tuple[FetchOutcome, FetchOutcome, Net]:
        async with network(internet, ANSWERS) as net:
            target = location.format(port=net.internal.port)
            fetcher = net.fetcher()
            try:
                first = await fetcher.afetch(net.public_url("www.public.test", f"/redirect?to={target}"))
                assert first.redirect_location is not None
                hop = canonicalize(first.redirect_location).url  # what the link extractor emits
                return first, await fetcher.afetch(hop), net
            finally:
                await fetcher.aclose()

    first, second, net = run(go())
    assert first.outcome == "redirect" and first.status == 302
    assert second.outcome == "blocked_private"
    assert net.internal.seen == [] and net.leaked() == []


def test_redirect_chain_through_public_hosts_is_checked_at_every_hop(internet: FakeInternet) -> None:
    async def go() -> tuple[list[FetchOutcome], Net]:
        async with network(internet, ANSWERS) as net:
            last = f"http://internal.test:{net.internal.port}/secret"
            middle = net.public_url("other.public.test", f"/redirect?to={last}")
            url: str | None = net.public_url("www.public.test", f"/redirect?to={middle}")
            fetcher = net.fetcher()
            outs: list[FetchOutcome] = []
            try:
                while url is not None and len(outs) < 5:
                    outs.append(await fetcher.afetch(canonicalize(url).url))
                    url = outs[-1].redirect_location
            finally:
                await fetcher.aclose()
            return outs, net

    outs, net = run(go())
    assert [o.outcome for o in outs] == ["redirect", "redirect", "blocked_private"]
    assert net.internal.seen == [] and net.leaked() == []


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/robots.txt", "http://internal.test:{port}/robots.txt"])
def test_robots_txt_redirect_to_private_target_is_refused(internet: FakeInternet, target: str) -> None:
    """robots.txt redirects are the one thing the fetcher follows: each hop is checked."""

    async def go() -> tuple[FetchOutcome, Net]:
        async with network(internet, ANSWERS) as net:
            net.robots_redirects["www.public.test"] = target.format(port=net.internal.port)
            return (await fetch_all(net.fetcher(), [net.public_url("www.public.test", "/page")]))[0], net

    out, net = run(go())
    assert out.outcome == "blocked_private"
    assert net.public.paths() == ["/robots.txt"]  # the page itself is not fetched either
    assert net.internal.seen == [] and net.leaked() == []


# -- DNS rebinding -----------------------------------------------------------------------------


def test_dns_rebinding_between_robots_and_page_is_refused_at_connect(internet: FakeInternet) -> None:
    """Public for robots.txt, then 127.0.0.1 (TTL 0): the page's own lookup is checked again."""
    answers = {**ANSWERS, "rebind.test": [[PUBLIC_V4], ["127.0.0.1"]]}

    async def go() -> tuple[FetchOutcome, Net]:
        async with network(internet, answers) as net:
            fetcher = net.fetcher(dns_cache_s=0)
            return (await fetch_all(fetcher, [net.public_url("rebind.test", "/page")]))[0], net

    out, net = run(go())
    assert net.dns.lookups.count("rebind.test") == 2
    assert out.outcome == "blocked_private"
    assert net.public.paths() == ["/robots.txt"]
    assert net.internal.seen == [] and net.leaked() == []


def test_dns_rebinding_on_every_lookup_never_reaches_a_private_address(internet: FakeInternet) -> None:
    """The answer flips on every lookup; each connection goes to the answer its own check saw."""
    flips = [[PUBLIC_V4], ["127.0.0.1"]] * 6
    answers = {**ANSWERS, "flip.test": flips}

    async def go() -> tuple[list[FetchOutcome], Net]:
        async with network(internet, answers) as net:
            fetcher = net.fetcher(dns_cache_s=0, obey_robots=False)
            return await fetch_all(fetcher, [net.public_url("flip.test", "/page")] * 12), net

    outs, net = run(go())
    assert [o.outcome for o in outs] == ["ok", "blocked_private"] * 6
    assert len(net.dns.lookups) == 12 and set(net.internet.connects) == {PUBLIC_V4}
    assert net.internal.seen == []


def test_dns_answer_is_pinned_by_the_cache_not_looked_up_twice(internet: FakeInternet) -> None:
    """With the DNS cache on, the checked answer serves robots.txt and the page: no second lookup
    an attacker could answer differently."""
    answers = {**ANSWERS, "rebind.test": [[PUBLIC_V4], ["127.0.0.1"]]}

    async def go() -> tuple[FetchOutcome, Net]:
        async with network(internet, answers) as net:
            return (await fetch_all(net.fetcher(), [net.public_url("rebind.test", "/page")]))[0], net

    out, net = run(go())
    assert out.outcome == "ok"
    assert net.dns.lookups == ["rebind.test"] and set(net.internet.connects) == {PUBLIC_V4}
    assert net.internal.seen == []


# -- through a forward proxy -------------------------------------------------------------------


@asynccontextmanager
async def proxy_server() -> AsyncIterator[Site]:
    """A forward proxy on loopback that records absolute-form targets and forwards nothing."""
    site = Site()

    async def handle(request: web.Request) -> web.Response:
        site.seen.append((request.host, str(request.url)))
        return web.Response(text="User-agent: *\nAllow: /\n" if request.path == "/robots.txt" else "via proxy")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner, site.port = await _start(app)
    try:
        yield site
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("target", ["http://proxy.test:{pport}/admin", "http://internal.test/", "http://127.1/"])
def test_proxied_target_on_a_private_address_is_refused_even_the_proxy_itself(
    internet: FakeInternet, target: str
) -> None:
    """Regression: the proxy's own name was exempt from the target check, so a crawled link to
    ``http://PROXY-HOST:PORT/admin`` was sent to the proxy (which serves it from loopback)."""
    answers = {**ANSWERS, "proxy.test": [["127.0.0.1"]]}

    async def go() -> tuple[FetchOutcome, Site]:
        async with network(internet, answers) as net, proxy_server() as proxy:
            fetcher = net.fetcher(http_proxy=f"http://proxy.test:{proxy.port}")
            return (await fetch_all(fetcher, [target.format(pport=proxy.port)]))[0], proxy

    out, proxy = run(go())
    assert out.outcome == "blocked_private", out.error
    assert proxy.seen == []


def test_proxied_public_target_still_goes_through_the_proxy(internet: FakeInternet) -> None:
    answers = {**ANSWERS, "proxy.test": [["127.0.0.1"]]}

    async def go() -> tuple[FetchOutcome, Site]:
        async with network(internet, answers) as net, proxy_server() as proxy:
            fetcher = net.fetcher(http_proxy=f"http://proxy.test:{proxy.port}")
            return (await fetch_all(fetcher, ["http://www.public.test/page"]))[0], proxy

    out, proxy = run(go())
    assert out.outcome == "ok" and out.body == b"via proxy"
    assert [url for _h, url in proxy.seen] == ["http://www.public.test/robots.txt", "http://www.public.test/page"]


# -- the address check itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    "ip",
    [
        "2002:7f00:1::",  # regression: 6to4 addresses were judged as IPv6 only (public)
        "2002:a00:1::",
        "2002:a9fe:a9fe::",
        "2002:c0a8:101::",
        "2002:6440:1::",  # 100.64.0.1
        "fec0::1",  # regression: site-local was public
        "fec0:0:0:ffff::1",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
    ],
)
def test_ipv6_forms_carrying_a_private_ipv4_or_site_scope_are_not_public(ip: str) -> None:
    assert not is_public_address(ip)


@pytest.mark.parametrize("ip", ["2002:5db8:d822::1", PUBLIC_V6, "::ffff:93.184.216.34"])
def test_ipv6_forms_of_public_addresses_stay_public(ip: str) -> None:
    assert is_public_address(ip)
