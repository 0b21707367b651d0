"""The synthetic web's content, as a pure function of (seed, host, path).

Deterministic: every page, link, robots.txt and special behaviour derives from the seed,
so the server (``_server.py``) and the ground truth (:meth:`WebModel.reachable_pages`)
agree without sharing state. No I/O here.

Layout, for domain number ``i`` (``cs0000-demo.com``, ``cs0001-demo.net``, ...):

* host ``<domain>`` always; ``blog.<domain>`` too when ``i % 4 == 1`` (several hosts per
  registered domain). Pages: ``/`` and ``/p/<k>`` (k < pages_per_domain; the blog host has
  half as many). ``/p/k`` links to ``/p/k+1`` so everything is reachable from ``/``.
* robots.txt per host: ``i % 3 == 0`` disallows ``/private/`` (and pages link there);
  ``i % 5 == 0`` sets ``Crawl-delay``; ``i % 11 == 7`` answers 404 (allow all);
  ``i % 13 == 5`` answers 500 (RFC 9309: disallow all); ``i % 17 == 9`` redirects to
  ``/robots-moved.txt`` which disallows ``/p/2``.
* special pages on every host, linked from ``/`` of domains with ``i % special_every == 0``:
  redirect, redirect loop, 404, 500, 503 + Retry-After, 429 + Retry-After, slow, huge,
  PNG, PDF, gzip bomb, meta refresh.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from crawlstream.links import Scope
from crawlstream.robots import RobotsPolicy

__all__ = ["SPECIAL_PATHS", "Page", "WebModel"]

_TLDS = ("com", "net", "org", "co.uk", "io")

PageKind = Literal["html", "redirect", "status", "slow", "huge", "png", "pdf", "bomb", "refresh", "missing"]

# path -> kind; redirects and statuses are described in ``WebModel.page``.
SPECIAL_PATHS: dict[str, PageKind] = {
    "/redirect/1": "redirect",
    "/loop/a": "redirect",
    "/loop/b": "redirect",
    "/status/404": "status",
    "/status/500": "status",
    "/status/503": "status",
    "/status/429": "status",
    "/slow": "slow",
    "/huge": "huge",
    "/image.png": "png",
    "/doc.pdf": "pdf",
    "/bomb": "bomb",
    "/refresh": "refresh",
}


@dataclass(frozen=True)
class Page:
    """What the server answers for one (host, path); ``links`` are absolute canonical URLs."""

    kind: PageKind
    status: int = 200
    links: tuple[str, ...] = ()
    location: str | None = None  # for redirects, as sent (may be relative)
    target: str | None = None  # for redirects, absolute
    retry_after_s: int | None = None


class WebModel:
    def __init__(
        self,
        *,
        n_domains: int = 20,
        pages_per_domain: int = 10,
        seed: int = 0,
        special_every: int = 10,
        crawl_delay_s: float = 0.2,
        user_agent_token: str = "crawlstream",
    ) -> None:
        if n_domains < 1 or pages_per_domain < 3:
            raise ValueError("need at least 1 domain and 3 pages per domain")
        self.n_domains = n_domains
        self.pages_per_domain = pages_per_domain
        self.seed = seed
        self.special_every = special_every
        self.crawl_delay_s = crawl_delay_s
        self.user_agent_token = user_agent_token
        self.domains = [f"cs{i:04d}-demo.{_TLDS[i % len(_TLDS)]}" for i in range(n_domains)]
        self._index = {d: i for i, d in enumerate(self.domains)}
        self.hosts: list[str] = []
        self._host_domain: dict[str, int] = {}
        for i, d in enumerate(self.domains):
            for h in [d] + ([f"blog.{d}"] if i % 4 == 1 else []):
                self.hosts.append(h)
                self._host_domain[h] = i
        self._policies: dict[str, RobotsPolicy] = {}

    # -- structure -----------------------------------------------------------------

    def domain_index(self, host: str) -> int | None:
        return self._host_domain.get(host.lower())

    def n_pages(self, host: str) -> int:
        return self.pages_per_domain // 2 if host.startswith("blog.") else self.pages_per_domain

    def seed_urls(self) -> list[str]:
        """The home page of every domain's main host."""
        return [f"http://{d}/" for d in self.domains]

    def _rng(self, host: str, path: str) -> random.Random:
        return random.Random(f"{self.seed}:{host}:{path}")

    # -- robots.txt ----------------------------------------------------------------

    def robots(self, host: str) -> tuple[int, str, str | None]:
        """(status, body, location) of ``/robots.txt`` on ``host``."""
        i = self._host_domain[host]
        if i % 13 == 5:
            return 500, "server error\n", None
        if i % 11 == 7:
            return 404, "not found\n", None
        if i % 17 == 9:
            return 301, "", "/robots-moved.txt"
        return 200, self._robots_body(i), None

    def _robots_body(self, i: int) -> str:
        lines = [f"# robots.txt of domain {i}", "User-agent: *"]
        if i % 3 == 0:
            lines.append("Disallow: /private/")
        lines.append("Disallow: /cgi-bin/")
        if i % 5 == 0:
            lines.append(f"Crawl-delay: {self.crawl_delay_s:g}")
        lines.append(f"Sitemap: http://{self.domains[i]}/sitemap.xml")
        return "\n".join(lines) + "\n"

    def moved_robots_body(self, host: str) -> str:
        i = self._host_domain[host]
        return self._robots_body(i) + "Disallow: /p/2\n"

    def robots_policy(self, host: str) -> RobotsPolicy:
        """The policy a crawler following RFC 9309 derives for ``host``."""
        policy = self._policies.get(host)
        if policy is None:
            status, body, location = self.robots(host)
            if location is not None:
                policy = RobotsPolicy.parse(self.moved_robots_body(host))
            else:
                policy = RobotsPolicy.from_response(status, body.encode(), error_backoff_s=3600.0)
            self._policies[host] = policy
        return policy

    def disallowed_paths(self, host: str) -> list[str]:
        """Path prefixes robots.txt forbids on ``host`` (``["/"]`` when robots.txt is 5xx)."""
        policy = self.robots_policy(host)
        if policy.kind == "disallow_all":
            return ["/"]
        if policy.kind == "allow_all":
            return []
        i = self._host_domain[host]
        paths = ["/cgi-bin/"] + (["/private/"] if i % 3 == 0 else [])
        return paths + (["/p/2"] if self.robots(host)[2] is not None else [])

    def crawl_delay_s_for(self, host: str) -> float | None:
        return self.robots_policy(host).crawl_delay_s(self.user_agent_token)

    def allowed(self, url: str) -> bool:
        host = url.split("/", 3)[2]
        return self.robots_policy(host).can_fetch(url, self.user_agent_token)

    # -- pages ---------------------------------------------------------------------

    def page(self, host: str, path: str) -> Page:
        host = host.lower()
        if host not in self._host_domain:
            return Page("missing", 404)
        base = f"http://{host}"
        if path in SPECIAL_PATHS:
            return self._special(host, path)
        if path == "/":
            return Page("html", links=self._links(host, path, -1))
        if path.startswith("/p/") and path[3:].isdigit():
            k = int(path[3:])
            if k < self.n_pages(host):
                return Page("html", links=self._links(host, path, k))
        if path.startswith("/private/") and path[9:].isdigit():
            return Page("html", links=(f"{base}/",))
        return Page("missing", 404)

    def _special(self, host: str, path: str) -> Page:
        base = f"http://{host}"
        if path == "/redirect/1":
            return Page("redirect", 301, location="/p/0", target=f"{base}/p/0")
        if path == "/loop/a":
            return Page("redirect", 302, location=f"{base}/loop/b", target=f"{base}/loop/b")
        if path == "/loop/b":
            return Page("redirect", 302, location="/loop/a", target=f"{base}/loop/a")
        if path.startswith("/status/"):
            status = int(path[8:])
            retry = {503: 2, 429: 1}.get(status)
            return Page("status", status, retry_after_s=retry)
        if path == "/refresh":
            return Page("refresh", links=(f"{base}/p/1",))
        if path == "/huge":
            return Page("huge", links=(f"{base}/p/0",))
        return Page(SPECIAL_PATHS[path])

    def _links(self, host: str, path: str, k: int) -> tuple[str, ...]:
        """Outlinks of an HTML page, absolute and canonical, first-seen order, no duplicates."""
        rng = self._rng(host, path)
        i = self._host_domain[host]
        base = f"http://{host}"
        n = self.n_pages(host)
        links: list[str] = []
        if k < 0:
            links += [f"{base}/p/{j}" for j in range(min(n, 4))]
            if i % 4 == 1 and not host.startswith("blog."):
                links.append(f"http://blog.{host}/")
            if i % self.special_every == 0:
                links += [f"{base}{p}" for p in SPECIAL_PATHS if p not in ("/loop/b",)]
        else:
            if k + 1 < n:
                links.append(f"{base}/p/{k + 1}")
            links += [f"{base}/p/{rng.randrange(n)}" for _ in range(2)]
            links.append(f"{base}/")
        if i % 3 == 0:
            links.append(f"{base}/private/{rng.randrange(3)}")
        if rng.random() < 0.4 and self.n_domains > 1:
            j = rng.randrange(self.n_domains)
            other = self.domains[j]
            links.append(
                f"http://{other}/" if rng.random() < 0.5 else f"http://{other}/p/{rng.randrange(self.pages_per_domain)}"
            )
        return tuple(dict.fromkeys(links))

    # -- ground truth --------------------------------------------------------------

    def outlinks(self, url: str) -> tuple[str, ...]:
        """URLs a crawler learns from fetching ``url`` (links, or the redirect target)."""
        _, _, host, path = url.split("/", 3)
        page = self.page(host, "/" + path)
        if page.kind == "redirect":
            assert page.target is not None
            return (page.target,)
        if page.kind in ("html", "refresh", "huge"):
            return page.links
        return ()

    def reachable_pages(
        self,
        scope: Scope | None = None,
        seeds: Iterable[str] | None = None,
        *,
        redirect_adds_depth: bool = True,
    ) -> set[str]:
        """Every in-scope URL a polite crawler requests from ``seeds`` (default: all home pages).

        Includes error pages, redirects and binary pages (they are requested); excludes
        robots-disallowed URLs (never requested, so their links are never seen) and
        robots.txt itself. A redirect target counts one level deeper unless
        ``redirect_adds_depth`` is False.
        """
        start = list(seeds) if seeds is not None else self.seed_urls()
        depth: dict[str, int] = {}
        queue: deque[str] = deque()
        for url in start:
            if url not in depth and (scope is None or scope.allows(url, 0)):
                depth[url] = 0
                queue.append(url)
        fetched: set[str] = set()
        while queue:
            url = queue.popleft()
            if not self.allowed(url):
                continue
            fetched.add(url)
            is_redirect = self.page(url.split("/", 3)[2], "/" + url.split("/", 3)[3]).kind == "redirect"
            d = depth[url] + (1 if redirect_adds_depth or not is_redirect else 0)
            for link in self.outlinks(url):
                if link in depth:
                    continue
                if scope is not None and not scope.allows(link, d):
                    continue
                depth[link] = d
                queue.append(link)
        return fetched

    def all_disallowed_urls_seen(self, seeds: Iterable[str] | None = None) -> set[str]:
        """Linked URLs that robots.txt forbids: a polite crawl requests none of them."""
        start = list(seeds) if seeds is not None else self.seed_urls()
        seen = set(start)
        queue = deque(start)
        bad: set[str] = set()
        while queue:
            url = queue.popleft()
            if not self.allowed(url):
                bad.add(url)
                continue
            for link in self.outlinks(url):
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
        return bad
