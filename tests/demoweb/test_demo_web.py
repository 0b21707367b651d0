"""The synthetic web: deterministic, self-consistent ground truth, and a server that logs what it serves."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import threading
import time
from collections.abc import Iterator

import pytest

from crawlstream.devtools.demoweb import SPECIAL_PATHS, DemoWeb, WebModel
from crawlstream.devtools.demoweb._render import render_html
from crawlstream.fetch import Fetcher
from crawlstream.links import Scope, extract_links
from crawlstream.settings import load
from crawlstream.urls import canonicalize, registered_domain


@pytest.fixture(scope="module")
def web() -> Iterator[DemoWeb]:
    with DemoWeb(20, pages_per_domain=6, seed=3, slow_s=0.2, bomb_bytes=4 * 1024 * 1024) as running:
        yield running


def get(web: DemoWeb, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host, "User-Agent": "demo-test"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_domain_names_are_their_own_registered_domain_and_blogs_share_it() -> None:
    model = WebModel(n_domains=40)
    assert all(registered_domain(d) == d for d in model.domains)
    blogs = [h for h in model.hosts if h.startswith("blog.")]
    assert blogs and all(registered_domain(h) == h[len("blog.") :] for h in blogs)
    assert len(set(model.domains)) == 40


def test_same_seed_same_web_other_seed_other_links() -> None:
    a, b, c = WebModel(n_domains=30, seed=1), WebModel(n_domains=30, seed=1), WebModel(n_domains=30, seed=2)
    assert a.reachable_pages() == b.reachable_pages()
    host = a.domains[1]
    assert render_html(a.page(host, "/p/1"), host, "/p/1", 1) == render_html(b.page(host, "/p/1"), host, "/p/1", 1)
    assert [a.page(h, "/p/1").links for h in a.hosts] != [c.page(h, "/p/1").links for h in c.hosts]


def test_every_rendered_page_yields_exactly_the_model_links_through_the_extractor() -> None:
    """The pages write links in many forms; extraction must give back the model's canonical URLs."""
    model = WebModel(n_domains=40, pages_per_domain=8, seed=5)
    checked = 0
    for url in sorted(model.reachable_pages()):
        host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        page = model.page(host, path)
        if page.kind not in ("html", "refresh"):
            continue
        body, ctype = render_html(page, host, path, model.seed)
        x_robots_tag = ", ".join(page.x_robots_tag) or None  # as the fetcher joins repeated headers
        got = {link.url for link in extract_links(body, url, content_type=ctype, x_robots_tag=x_robots_tag)}
        assert got - {url} == set(page.links) - {url}, url
        checked += 1
    assert checked > 200


def test_model_urls_are_canonical() -> None:
    model = WebModel(n_domains=20)
    for url in model.reachable_pages():
        assert canonicalize(url).url == url


def test_ground_truth_excludes_robots_disallowed_and_includes_specials() -> None:
    model = WebModel(n_domains=30, pages_per_domain=6)
    reachable = model.reachable_pages()
    disallowed = model.all_disallowed_urls_seen()
    assert disallowed and not (reachable & disallowed)
    assert any("/private/" in u for u in disallowed)
    assert f"http://{model.domains[9]}/p/2" in disallowed  # robots.txt moved by redirect
    assert not any(model.domains[5] in u for u in reachable)  # robots.txt answers 500
    for path in SPECIAL_PATHS:
        assert f"http://{model.domains[0]}{path}" in reachable
    assert model.disallowed_paths(model.domains[5]) == ["/"]
    assert model.disallowed_paths(model.domains[7]) == []  # robots.txt 404


def test_scope_limits_the_ground_truth_by_domain_and_depth() -> None:
    model = WebModel(n_domains=20, pages_per_domain=10)
    d0 = model.domains[1]
    one_domain = model.reachable_pages(Scope(frozenset({d0})), seeds=[f"http://{d0}/"])
    assert one_domain and all(registered_domain(u.split("/")[2]) == d0 for u in one_domain)
    shallow = model.reachable_pages(Scope(frozenset({d0}), max_depth=1), seeds=[f"http://{d0}/"])
    assert f"http://{d0}/" in shallow and len(shallow) < len(one_domain)
    assert f"http://blog.{d0}/" in one_domain  # second host of the same registered domain


def test_server_answers_by_host_header_and_logs_every_request(web: DemoWeb) -> None:
    web.clear_log()
    d1 = web.model.domains[1]
    status, headers, body = get(web, d1, "/p/1")
    assert status == 200 and headers["content-type"].startswith("text/html") and b"<a " in body
    assert get(web, "unknown.example", "/")[0] == 404
    log = web.requests()
    assert [(r.host, r.path, r.status) for r in log] == [(d1, "/p/1", 200), ("unknown.example", "/", 404)]
    assert log[0].user_agent == "demo-test" and log[0].time_s <= log[1].time_s


def test_a_request_that_waited_in_a_stalled_loop_is_recorded_as_such(web: DemoWeb) -> None:
    """A loaded machine starves the server's thread: a request then waits unanswered, our
    fetcher times out and the crawler retries, and the server handles both close together. The
    record says when the first may have arrived and that its client had gone (CI, session 29: a
    "duplicate" and a 0.11 s "gap" under a 0.3 s Crawl-delay, from a crawler that had kept both)."""
    loop = web._loop
    assert loop is not None
    settings = load({"CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true", "CRAWLSTREAM_FETCH_TIMEOUT_S": "0.3",
                     "CRAWLSTREAM_FETCH_READ_TIMEOUT_S": "0.3"})
    url = f"http://{web.model.domains[2]}/p/1"

    async def fetch_through_a_stall() -> tuple[float, float, list[str]]:
        async with Fetcher.from_settings(settings, resolve_map=web.resolve_map) as fetcher:
            await fetcher.afetch(f"http://{web.model.domains[2]}/p/0")  # robots.txt read while healthy
            web.clear_log()
            stalled = threading.Event()
            loop.call_soon_threadsafe(lambda: (stalled.set(), time.sleep(1.0)))
            assert stalled.wait(5)
            sent = time.monotonic()
            outcomes = [(await fetcher.afetch(url)).outcome]
            await asyncio.sleep(0.75)  # the crawler's delay before the retry; the stall ends meanwhile
            retried = time.monotonic()
            outcomes.append((await fetcher.afetch(url)).outcome)
            return sent, retried, outcomes

    sent, retried, outcomes = asyncio.run(fetch_through_a_stall())
    assert outcomes == ["timeout", "ok"]
    first, second = web.requests()
    assert first.abandoned and not second.abandoned
    assert first.earliest_s is not None and first.earliest_s <= sent < first.time_s
    assert second.time_s - first.time_s < retried - sent - 0.5, "the stall brought them closer together"
    assert first.apart_s(second) >= retried - sent, "the gap the crawler kept is not ruled out"
    assert get(web, web.model.domains[2], "/p/2")[0] == 200
    third = web.requests()[-1]
    assert third.earliest_s is None and not third.abandoned
    assert third.apart_s(second) == pytest.approx(third.time_s - second.arrived_from_s)


def test_server_serves_robots_variants(web: DemoWeb) -> None:
    d = web.model.domains
    assert get(web, d[0], "/robots.txt")[2].decode().count("Crawl-delay") == 1
    assert get(web, d[5], "/robots.txt")[0] == 500
    assert get(web, d[7], "/robots.txt")[0] == 404
    status, headers, _ = get(web, d[9], "/robots.txt")
    assert status == 301 and headers["location"] == "/robots-moved.txt"
    assert b"Disallow: /p/2" in get(web, d[9], "/robots-moved.txt")[2]


def test_server_special_pages(web: DemoWeb) -> None:
    host = web.model.domains[2]
    assert get(web, host, "/status/503")[1]["retry-after"] == "2"
    assert get(web, host, "/status/429")[1]["retry-after"] == "1"
    status, headers, _ = get(web, host, "/loop/b")
    assert status == 302 and headers["location"] == "/loop/a"
    assert get(web, host, "/image.png")[1]["content-type"] == "image/png"
    status, headers, body = get(web, host, "/bomb")
    assert headers["content-encoding"] == "gzip" and len(gzip.decompress(body)) == web.bomb_bytes
    assert len(get(web, host, "/huge")[2]) >= web.huge_bytes


def test_resolve_map_covers_every_host_on_the_server_port(web: DemoWeb) -> None:
    assert set(web.resolve_map) == set(web.hosts)
    assert set(web.resolve_map.values()) == {("127.0.0.1", web.port)}
    assert web.seed_urls() == [f"http://{d}/" for d in web.model.domains]
