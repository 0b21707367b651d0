"""The fetch core against the synthetic web on 127.0.0.1 (real HTTP, real sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from aiohttp import ClientSession, web

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.devtools.demoweb._render import PNG_BYTES
from crawlstream.fetch import Fetcher, FetchOutcome
from crawlstream.settings import FetchSettings
from tests.fetch.fetch_support import UA, demo_fetcher

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)




async def fetch_all(fetcher: Fetcher, *urls: str) -> list[FetchOutcome]:
    try:
        return [await fetcher.afetch(u, attempt=1) for u in urls]
    finally:
        await fetcher.aclose()


def fetch_one(web_: DemoWeb, url: str, **kw: Any) -> FetchOutcome:
    return run(fetch_all(demo_fetcher(web_, **kw), url))[0]


def domain(web_: DemoWeb, i: int) -> str:
    return web_.model.domains[i]


def paths_requested(web_: DemoWeb, host: str) -> list[str]:
    return [r.path for r in web_.requests() if r.host == host]


def test_html_page_is_ok_with_body_headers_and_robots_crawl_delay(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 0)  # i % 5 == 0: Crawl-delay in robots.txt
    out = fetch_one(demo_web, f"http://{host}/p/1")
    assert out.outcome == "ok" and out.status == 200
    assert out.content_type == "text/html"
    assert b"<a " in out.body and not out.truncated
    assert out.body_size_bytes == len(out.body)
    assert out.headers["content-type"].startswith("text/html")
    assert all(name == name.lower() for name in out.headers)
    assert out.crawl_delay_s == demo_web.model.crawl_delay_s
    assert out.attempt == 1 and out.elapsed_ms >= 0 and out.fetched_at_ms > 0


def test_user_agent_is_sent_on_pages_and_robots(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 2)
    fetch_one(demo_web, f"http://{host}/p/0")
    agents = {r.user_agent for r in demo_web.requests() if r.host == host}
    assert agents == {UA}


def test_http_errors_report_status_and_retry_after(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 1)
    outs = run(
        fetch_all(
            demo_fetcher(demo_web),
            *(f"http://{host}/status/{code}" for code in (404, 500, 503, 429)),
        )
    )
    assert [(o.outcome, o.status) for o in outs] == [
        ("http_error", 404),
        ("http_error", 500),
        ("http_error", 503),
        ("http_error", 429),
    ]
    assert [o.retry_after_s for o in outs] == [None, None, 2.0, 1.0]


def test_slow_page_times_out_before_the_server_answers(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, f"http://{domain(demo_web, 3)}/slow", timeout_s=0.5, read_timeout_s=0.5)
    assert out.outcome == "timeout" and out.status == 0
    assert out.elapsed_ms < demo_web.slow_s * 1000


def test_huge_page_is_truncated_at_the_cap_and_flagged(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, f"http://{domain(demo_web, 4)}/huge", max_body_bytes=100_000)
    assert out.outcome == "ok" and out.truncated
    assert out.body_size_bytes == len(out.body) == 100_000
    assert out.body.startswith(b"<!DOCTYPE html>")


def test_gzip_bomb_is_abandoned_by_the_ratio_limit(demo_web: DemoWeb) -> None:
    """32 MiB of zeros in ~32 KiB of gzip: stopped soon after 1 MiB decoded, not at the 8 MiB cap."""
    out = fetch_one(demo_web, f"http://{domain(demo_web, 4)}/bomb", max_body_bytes=8 * 1024 * 1024)
    assert out.outcome == "too_large" and out.truncated
    assert out.body_size_bytes <= 2 * 1024 * 1024


def test_gzip_bomb_body_is_capped_on_decoded_bytes(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, f"http://{domain(demo_web, 4)}/bomb", max_body_bytes=64 * 1024)
    assert out.truncated and out.body_size_bytes == 64 * 1024
    assert out.body == bytes(64 * 1024)


def test_binary_content_type_is_reported_and_body_kept(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, f"http://{domain(demo_web, 6)}/image.png")
    assert out.outcome == "ok" and out.content_type == "image/png" and not out.is_html
    assert out.body == PNG_BYTES
    pdf = fetch_one(demo_web, f"http://{domain(demo_web, 6)}/doc.pdf")
    assert pdf.content_type == "application/pdf" and pdf.body.startswith(b"%PDF")


def test_redirect_is_reported_with_absolute_location_and_not_followed(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 8)
    demo_web.clear_log()
    out = fetch_one(demo_web, f"http://{host}/redirect/1")
    assert out.outcome == "redirect" and out.status == 301
    assert out.redirect_location == f"http://{host}/p/0"
    assert "/p/0" not in paths_requested(demo_web, host)


def test_redirect_loop_hops_are_reported_one_at_a_time(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 8)
    a, b = run(fetch_all(demo_fetcher(demo_web), f"http://{host}/loop/a", f"http://{host}/loop/b"))
    assert a.redirect_location == f"http://{host}/loop/b"
    assert b.redirect_location == f"http://{host}/loop/a"


def test_private_address_is_blocked_after_resolution_without_allow_private(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 10)
    demo_web.clear_log()
    out = fetch_one(demo_web, f"http://{host}/p/0", allow_private_networks=False)
    assert out.outcome == "blocked_private" and out.status == 0
    assert "127.0.0.1" in out.error
    assert paths_requested(demo_web, host) == []  # not even robots.txt


def test_literal_loopback_ip_is_blocked_without_allow_private(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, f"http://127.0.0.1:{demo_web.port}/", allow_private_networks=False)
    assert out.outcome == "blocked_private"
    out6 = fetch_one(demo_web, "http://[::ffff:127.0.0.1]/", allow_private_networks=False)
    assert out6.outcome == "blocked_private"


def test_localhost_name_is_blocked_after_real_dns(demo_web: DemoWeb) -> None:
    out = fetch_one(
        demo_web,
        f"http://localhost:{demo_web.port}/",
        allow_private_networks=False,
        resolve_map={},
        resolve_map_only=False,
    )
    assert out.outcome == "blocked_private"


def test_unresolvable_host_is_a_dns_error() -> None:
    fetcher = Fetcher(config=FetchSettings(user_agent=UA, timeout_s=5.0))
    out = run(fetch_all(fetcher, "http://no-such-host.invalid/page"))[0]
    assert out.outcome == "dns_error" and out.status == 0


def test_host_outside_the_resolver_map_is_a_dns_error_when_map_only(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, "http://www.example.com/")
    assert out.outcome == "dns_error"


def test_refused_connection_is_a_connect_error(demo_web: DemoWeb) -> None:
    import socket

    with socket.socket() as s:  # grab a free port, then close it so nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fetcher = Fetcher(
        config=FetchSettings(user_agent=UA, allow_private_networks=True),
        resolve_map={"closed.test": ("127.0.0.1", port)},
        obey_robots=False,
    )
    out = run(fetch_all(fetcher, "http://closed.test/"))[0]
    assert out.outcome == "connect_error"


def test_robots_disallowed_path_is_not_requested(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 3)  # i % 3 == 0: Disallow: /private/
    demo_web.clear_log()
    out = fetch_one(demo_web, f"http://{host}/private/1")
    assert out.outcome == "robots_disallowed" and out.retry_after_s is None
    assert paths_requested(demo_web, host) == ["/robots.txt"]


def test_robots_5xx_disallows_everything_and_asks_for_backoff(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 5)  # robots.txt answers 500
    demo_web.clear_log()
    out = fetch_one(demo_web, f"http://{host}/p/0", robots_error_backoff_s=42.0)
    assert out.outcome == "robots_disallowed" and out.retry_after_s == 42.0
    assert paths_requested(demo_web, host) == ["/robots.txt"]


def test_robots_404_allows_everything(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 7)  # robots.txt answers 404
    out = fetch_one(demo_web, f"http://{host}/cgi-bin/x")
    assert out.outcome == "http_error" and out.status == 404  # fetched: no rules apply


def test_robots_redirect_is_followed_to_the_moved_file(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 9)  # robots.txt -> 301 -> /robots-moved.txt (Disallow: /p/2)
    demo_web.clear_log()
    blocked, allowed = run(fetch_all(demo_fetcher(demo_web), f"http://{host}/p/2", f"http://{host}/p/1"))
    assert blocked.outcome == "robots_disallowed" and allowed.outcome == "ok"
    assert paths_requested(demo_web, host) == ["/robots.txt", "/robots-moved.txt", "/p/1"]


def test_robots_is_fetched_once_per_origin_under_concurrency(demo_web: DemoWeb) -> None:
    host = domain(demo_web, 11)
    demo_web.clear_log()

    async def go() -> list[FetchOutcome]:
        fetcher = demo_fetcher(demo_web)
        try:
            return await asyncio.gather(*(fetcher.afetch(f"http://{host}/p/{k}", attempt=0) for k in range(5)))
        finally:
            await fetcher.aclose()

    outs = run(go())
    assert {o.outcome for o in outs} == {"ok"}
    assert paths_requested(demo_web, host).count("/robots.txt") == 1


def test_proxy_setting_sends_requests_through_the_proxy(demo_web: DemoWeb) -> None:
    seen: list[str] = []

    async def forward(request: web.Request) -> web.Response:
        seen.append(str(request.url))  # absolute-form target as the client sent it
        async with ClientSession(auto_decompress=False) as s:
            upstream = f"http://127.0.0.1:{demo_web.port}{request.rel_url}"
            async with s.get(
                upstream, headers={"Host": request.host, "User-Agent": request.headers["User-Agent"]}
            ) as r:
                body = await r.read()
                return web.Response(
                    status=r.status, body=body, headers={"Content-Type": r.headers.get("Content-Type", "")}
                )

    async def go() -> FetchOutcome:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", forward)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            fetcher = demo_fetcher(demo_web, http_proxy=f"http://127.0.0.1:{port}")
            return (await fetch_all(fetcher, f"http://{domain(demo_web, 12)}/p/3"))[0]
        finally:
            await runner.cleanup()

    out = run(asyncio.wait_for(go(), 20))
    host = domain(demo_web, 12)
    assert out.outcome == "ok"
    assert seen == [f"http://{host}/robots.txt", f"http://{host}/p/3"]


def test_demo_web_doubles_as_a_forward_proxy_for_its_hosts(demo_web: DemoWeb) -> None:
    """The other way to reach the demo (e.g. for Scrapy): --http-proxy http://127.0.0.1:PORT, no resolver map."""
    host = domain(demo_web, 13)
    demo_web.clear_log()
    fetcher = Fetcher(config=FetchSettings(user_agent=UA, http_proxy=demo_web.proxy_url, timeout_s=5.0))
    out = run(fetch_all(fetcher, f"http://{host}/p/1"))[0]
    assert out.outcome == "ok" and b"<a " in out.body
    assert paths_requested(demo_web, host) == ["/robots.txt", "/p/1"]


def test_proxied_target_resolving_to_loopback_is_still_blocked(demo_web: DemoWeb) -> None:
    config = FetchSettings(user_agent=UA, http_proxy=f"http://127.0.0.1:{demo_web.port}", timeout_s=5.0)
    fetcher = Fetcher(config=config)
    out = run(fetch_all(fetcher, "http://localhost/"))[0]
    assert out.outcome == "blocked_private"


def test_only_the_fetch_that_reads_robots_txt_reports_the_hosts_sitemaps(demo_web: DemoWeb) -> None:
    fetcher = demo_fetcher(demo_web)
    d1, d7 = domain(demo_web, 1), domain(demo_web, 7)  # robots.txt names one sitemap / answers 404
    first, second, missing = run(
        fetch_all(fetcher, f"http://{d1}/", f"http://{d1}/p/1", f"http://{d7}/p/1")
    )
    assert first.robots_sitemaps == (f"http://{d1}/sitemap.xml",)
    assert second.robots_sitemaps is None  # robots.txt came from the cache
    assert missing.robots_sitemaps == (f"http://{d7}/sitemap.xml",)  # none named: the host's own is tried


def test_every_x_robots_tag_header_is_kept_joined(demo_web: DemoWeb) -> None:
    out = fetch_one(demo_web, f"http://{domain(demo_web, 0)}/directives/header-agent")
    assert out.headers["x-robots-tag"] == "otherbot: noindex, crawlstream: nofollow"
