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
* special pages on every host, linked from ``/`` of domains with ``i % special_every == 0``
  (none with ``special_every=0``):
  redirect, a chain of three redirects (``/chain/1``; the second hop's Location is absolute and
  not canonical), redirect loop, 404, 500, 503 + Retry-After, 429 + Retry-After, slow, huge,
  PNG, PDF (``X-Robots-Tag: noindex``), gzip bomb, meta refresh, and robots directives:
  ``<meta name=robots>`` noindex / nofollow, ``<meta name=crawlstream content=none>``, a
  meta for another crawler (ignored), ``X-Robots-Tag: noindex`` and an agent-prefixed
  ``X-Robots-Tag``. That ``/`` also links ``rel=nofollow`` to ``/hidden/rel`` (and to
  ``/p/0``, reachable anyway); ``/hidden/*`` pages are linked only in ways a polite crawler
  does not follow, so they are never reachable.
* seeds: :meth:`WebModel.seed_urls` (canonical) and :meth:`WebModel.raw_seed_lines` (the same
  URLs written in non-canonical forms).
* sitemaps: every robots.txt names ``http://<domain>/sitemap.xml`` (a robots.txt that
  answers 404 names none: a crawler then tries ``/sitemap.xml`` of that host). Every host
  serves a small ``urlset`` there, except the main host of special domains, which serves
  a sitemap index of ``/sitemaps/pages.xml``, ``/sitemaps/extra.xml.gz`` (gzip, listing
  ``/from-sitemap``: reachable only through it), and three a crawler must skip whole:
  ``broken.xml`` (malformed), ``dtd.xml`` (billion laughs) and ``bomb.xml.gz`` (inflates
  past any sane cap). Each lists a ``/from-*`` page that is thereby never reachable.
* validators (ADR 022): HTML pages send ``ETag`` and ``Last-Modified`` (``/`` and ``/p/k``
  with ``k % 3 == 0``), only ``Last-Modified`` (``k % 3 == 1``) or neither (``k % 3 == 2``),
  and answer a matching If-None-Match / If-Modified-Since with 304. With
  ``changing_every = N > 0``, ``/p/k`` with ``k % N == 0`` changes on every full response
  (its revision, counted by the server, is part of the body and of Last-Modified).
"""

from __future__ import annotations

import email.utils
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from crawlstream.links import Scope
from crawlstream.robots import RobotsPolicy
from crawlstream.sitemaps import robots_sitemaps

__all__ = ["SITEMAP_PATHS", "SPECIAL_PATHS", "Page", "SitemapVariant", "WebModel", "not_modified"]

_TLDS = ("com", "net", "org", "co.uk", "io")

PageKind = Literal[
    "html", "redirect", "status", "slow", "huge", "png", "pdf", "bomb", "refresh", "missing", "sitemap"
]
SitemapVariant = Literal["urlset", "index", "broken", "dtd", "bomb"]

# path -> kind; redirects and statuses are described in ``WebModel.page``.
SPECIAL_PATHS: dict[str, PageKind] = {
    "/redirect/1": "redirect",
    "/chain/1": "redirect",  # a chain of three hops: /chain/1 -> /chain/2 -> /chain/3 -> /p/2
    "/chain/2": "redirect",
    "/chain/3": "redirect",
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
    "/directives/noindex": "html",
    "/directives/nofollow": "html",
    "/directives/agent-none": "html",
    "/directives/other-agent": "html",
    "/directives/header-noindex": "html",
    "/directives/header-agent": "html",
}
# Special pages reached only by following a redirect (never linked).
_CHAINED_PATHS = ("/loop/b", "/chain/2", "/chain/3")
# Pages no polite crawler reaches (linked only by nofollow, or listed only by a bad sitemap).
_HIDDEN_PATHS = frozenset(
    {"/hidden/rel", "/hidden/meta", "/hidden/agent", "/hidden/header"}
    | {"/from-broken-sitemap", "/from-dtd-sitemap", "/from-bomb-sitemap"}
)
# The sitemap index's children on special domains' main hosts: path -> (variant, gzip).
SITEMAP_PATHS: dict[str, tuple[SitemapVariant, bool]] = {
    "/sitemaps/pages.xml": ("urlset", False),
    "/sitemaps/extra.xml.gz": ("urlset", True),
    "/sitemaps/broken.xml": ("broken", False),
    "/sitemaps/dtd.xml": ("dtd", False),
    "/sitemaps/bomb.xml.gz": ("bomb", True),
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
    nofollow_links: tuple[str, ...] = ()  # rendered rel=nofollow: never followed
    blocked_links: tuple[str, ...] = ()  # rendered plainly on a nofollow page (or a bad sitemap)
    meta_robots: tuple[tuple[str, str], ...] = ()  # (name, content) of <meta> tags
    x_robots_tag: tuple[str, ...] = ()  # one X-Robots-Tag header each
    noindex: bool = False  # fetched and stored, but kept out of the index
    sitemap: SitemapVariant | None = None  # kind "sitemap": what the document is
    gzip: bool = False  # kind "sitemap": served as a gzip file


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
        changing_every: int = 0,
    ) -> None:
        if n_domains < 1 or pages_per_domain < 3:
            raise ValueError("need at least 1 domain and 3 pages per domain")
        self.n_domains = n_domains
        self.pages_per_domain = pages_per_domain
        self.seed = seed
        self.special_every = special_every
        self.crawl_delay_s = crawl_delay_s
        self.user_agent_token = user_agent_token
        self.changing_every = changing_every
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

    def raw_seed_lines(self) -> list[str]:
        """:meth:`seed_urls` as a person writes them: each (but every seventh) in a different
        non-canonical form of the same URL (case, default port, fragment, dot segments,
        userinfo, trailing dot, no path), deterministically by domain number."""
        forms = (
            lambda d: f"HTTP://{d.upper()}/",
            lambda d: f"http://{d}:80/#top",
            lambda d: f"http://{d}/p/../",
            lambda d: f"http://{d}./?",
            lambda d: f"http://{d}",
            lambda d: f"http://visitor@{d}/./",
            lambda d: f"http://{d}/",  # already canonical: no raw form to record
        )
        return [forms[i % len(forms)](d) for i, d in enumerate(self.domains)]

    def is_special(self, i: int) -> bool:
        """Whether domain number ``i`` links the special pages (``special_every`` 0: none does)."""
        return self.special_every > 0 and i % self.special_every == 0

    # -- validators and revisions (ADR 022) ------------------------------------------

    @staticmethod
    def _page_number(path: str) -> int:
        """k of ``/p/k``; 0 for ``/``; -1 for anything else."""
        if path == "/":
            return 0
        return int(path[3:]) if path.startswith("/p/") and path[3:].isdigit() else -1

    def validator_kinds(self, host: str, path: str) -> tuple[bool, bool]:
        """(sends ETag, sends Last-Modified) for the HTML page at ``path``."""
        k = self._page_number(path)
        if k < 0:
            return True, True
        return k % 3 == 0, k % 3 in (0, 1)

    def changes(self, host: str, path: str) -> bool:
        """Whether the page has a new body on every full (200) response."""
        k = self._page_number(path)
        return self.changing_every > 0 and path != "/" and k >= 0 and k % self.changing_every == 0

    def changing_pages(self) -> set[str]:
        """Reachable pages that change on every visit."""
        return {u for u in self.reachable_pages() if self.changes(*_host_path(u))}

    @staticmethod
    def last_modified_s(revision: int) -> int:
        """Last-Modified of a page's ``revision`` (epoch seconds): an hour per revision."""
        return 1_767_225_600 + 3600 * revision  # 2026-01-01T00:00:00Z

    @classmethod
    def last_modified(cls, revision: int) -> str:
        return email.utils.formatdate(cls.last_modified_s(revision), usegmt=True)

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
        if path == "/sitemap.xml" or path in SITEMAP_PATHS:
            return self._sitemap(host, path)
        if path in _HIDDEN_PATHS or path == "/from-sitemap":
            return Page("html", links=(f"{base}/",))
        if path == "/":
            special = self.is_special(self._host_domain[host])
            nofollow = (f"{base}/hidden/rel", f"{base}/p/0") if special else ()
            return Page("html", links=self._links(host, path, -1), nofollow_links=nofollow)
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
        if path == "/chain/1":
            return Page("redirect", 301, location="/chain/2", target=f"{base}/chain/2")
        if path == "/chain/2":  # absolute, not canonical as written: the alias map keeps the raw form
            return Page("redirect", 302, location=f"HTTP://{host.upper()}/chain/3", target=f"{base}/chain/3")
        if path == "/chain/3":
            return Page("redirect", 307, location="/p/2", target=f"{base}/p/2")
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
        if path == "/doc.pdf":
            return Page("pdf", x_robots_tag=("noindex",), noindex=True)
        if path.startswith("/directives/"):
            return self._directive_page(host, path)
        return Page(SPECIAL_PATHS[path])

    def _directive_page(self, host: str, path: str) -> Page:
        base = f"http://{host}"
        agent = self.user_agent_token
        if path == "/directives/noindex":
            return Page("html", links=(f"{base}/p/1",), meta_robots=(("robots", "noindex"),), noindex=True)
        if path == "/directives/nofollow":
            return Page("html", blocked_links=(f"{base}/hidden/meta",), meta_robots=(("ROBOTS", "index, NoFollow"),))
        if path == "/directives/agent-none":
            return Page(
                "html",
                blocked_links=(f"{base}/hidden/agent",),
                meta_robots=(("otherbot", "noindex"), (agent, "none")),
                noindex=True,
            )
        if path == "/directives/other-agent":
            return Page("html", links=(f"{base}/p/2",), meta_robots=(("otherbot", "noindex, nofollow"),))
        if path == "/directives/header-noindex":
            return Page("html", links=(f"{base}/",), x_robots_tag=("noarchive, noindex",), noindex=True)
        # header-agent: one header for another crawler, one for us (they arrive joined).
        return Page(
            "html",
            blocked_links=(f"{base}/hidden/header",),
            x_robots_tag=("otherbot: noindex", f"{agent}: nofollow"),
        )

    # -- sitemaps ------------------------------------------------------------------

    def _has_sitemap_index(self, host: str) -> bool:
        i = self._host_domain[host]
        return self.is_special(i) and host == self.domains[i]

    def _sitemap(self, host: str, path: str) -> Page:
        base = f"http://{host}"
        i = self._host_domain[host]
        if path == "/sitemap.xml":
            if self._has_sitemap_index(host):
                return Page("sitemap", links=tuple(f"{base}{p}" for p in SITEMAP_PATHS), sitemap="index")
            pages = [f"{base}/"] + [f"{base}/p/{k}" for k in (0, 2) if k < self.n_pages(host)]
            return Page("sitemap", links=tuple(pages), sitemap="urlset")
        if not self._has_sitemap_index(host):
            return Page("missing", 404)
        variant, gzipped = SITEMAP_PATHS[path]
        if path == "/sitemaps/pages.xml":
            listed = [f"{base}/", f"{base}/p/{self.n_pages(host) - 1}", f"{base}/directives/noindex"]
            if i % 3 == 0:
                listed.append(f"{base}/private/1")  # disallowed by robots.txt: listed, never fetched
            return Page("sitemap", links=tuple(listed), sitemap=variant)
        if path == "/sitemaps/extra.xml.gz":
            return Page("sitemap", links=(f"{base}/from-sitemap", f"{base}/p/0"), sitemap=variant, gzip=gzipped)
        hidden = f"{base}/from-{variant}-sitemap"
        return Page("sitemap", blocked_links=(hidden,), sitemap=variant, gzip=gzipped)

    def robots_sitemaps(self, host: str) -> tuple[str, ...]:
        """The sitemaps a crawler learns from ``host``'s robots.txt (or its fallback)."""
        return robots_sitemaps(f"http://{host}", self.robots_policy(host))

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
            if self.is_special(i):
                links += [f"{base}{p}" for p in SPECIAL_PATHS if p not in _CHAINED_PATHS]
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
        if page.kind in ("html", "refresh", "huge", "sitemap"):
            return page.links  # never nofollow or blocked links, nor a bad sitemap's entries
        return ()

    def _touch(self, host: str, seen_hosts: set[str]) -> tuple[str, ...]:
        """The sitemaps a crawler learns on its first request to ``host`` (robots.txt is read then)."""
        if host in seen_hosts:
            return ()
        seen_hosts.add(host)
        return self.robots_sitemaps(host)

    def reachable_pages(
        self,
        scope: Scope | None = None,
        seeds: Iterable[str] | None = None,
        *,
        redirect_adds_depth: bool = True,
    ) -> set[str]:
        """Every in-scope URL a polite crawler requests from ``seeds`` (default: all home pages).

        Includes error pages, redirects, binary pages and sitemaps (they are requested);
        excludes robots-disallowed URLs (never requested, so their links are never seen),
        robots.txt itself, and links a polite crawler does not follow (``rel=nofollow``,
        a nofollow page's, a skipped sitemap's). A host's sitemaps are learned on its first
        request (robots.txt is read then), one level deeper than that request; a redirect
        target counts one level deeper unless ``redirect_adds_depth`` is False.
        """
        start = list(seeds) if seeds is not None else self.seed_urls()
        depth: dict[str, int] = {}
        queue: deque[str] = deque()
        for url in start:
            if url not in depth and (scope is None or scope.allows(url, 0)):
                depth[url] = 0
                queue.append(url)
        fetched: set[str] = set()
        hosts: set[str] = set()
        while queue:
            url = queue.popleft()
            for sitemap in self._touch(url.split("/", 3)[2], hosts):
                if sitemap not in depth and (scope is None or scope.allows(sitemap, depth[url] + 1)):
                    depth[sitemap] = depth[url] + 1
                    queue.append(sitemap)
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
        hosts: set[str] = set()
        while queue:
            url = queue.popleft()
            for sitemap in self._touch(url.split("/", 3)[2], hosts):
                if sitemap not in seen:
                    seen.add(sitemap)
                    queue.append(sitemap)
            if not self.allowed(url):
                bad.add(url)
                continue
            for link in self.outlinks(url):
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
        return bad

    def noindex_pages(self, seeds: Iterable[str] | None = None) -> set[str]:
        """Reachable pages that say noindex (meta robots or X-Robots-Tag): fetched and
        stored, never in the URL index."""
        return {u for u in self.reachable_pages(seeds=seeds) if self._page_of(u).noindex}

    def unfollowed_only_pages(self, seeds: Iterable[str] | None = None) -> set[str]:
        """Pages linked from reachable ones only through links a polite crawler does not
        follow (rel=nofollow, a nofollow page's links, a skipped sitemap's entries)."""
        reachable = self.reachable_pages(seeds=seeds)
        unfollowed: set[str] = set()
        for url in reachable:
            page = self._page_of(url)
            unfollowed.update(page.nofollow_links, page.blocked_links)
        return unfollowed - reachable

    def sitemap_only_pages(self, seeds: Iterable[str] | None = None) -> set[str]:
        """Reachable pages no HTML page links to: only a sitemap lists them."""
        reachable = self.reachable_pages(seeds=seeds)
        linked: set[str] = set()
        for url in reachable:
            if self._page_of(url).kind != "sitemap":
                linked.update(self.outlinks(url))
        return {u for u in reachable if self._page_of(u).kind != "sitemap"} - linked - set(
            seeds if seeds is not None else self.seed_urls()
        )

    def _page_of(self, url: str) -> Page:
        _, _, host, path = url.split("/", 3)
        return self.page(host, "/" + path)


def _host_path(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    host, _, path = rest.partition("/")
    return host, "/" + path


def not_modified(
    if_none_match: str | None, if_modified_since: str | None, etag: str | None, last_modified_s: int | None
) -> bool:
    """RFC 9110 section 13.2.2 for GET: If-None-Match decides when present (weak comparison,
    ``*`` matches), else If-Modified-Since against Last-Modified. Pure."""
    if if_none_match is not None:
        if etag is None:
            return False
        tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
        return "*" in tags or etag.removeprefix("W/") in tags
    if if_modified_since is None or last_modified_s is None:
        return False
    try:
        since = email.utils.parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError, IndexError):
        return False
    return since is not None and last_modified_s <= since.timestamp()
