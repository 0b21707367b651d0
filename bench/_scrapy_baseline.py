"""Scrapy baseline for ``bench_crawl``: crawl the synthetic web through its forward proxy.

Run as a subprocess (``python -m bench._scrapy_baseline --seeds-file F --proxy URL ...``) so
its CPU time is measured on its own. Prints one JSON line of Scrapy's stats to stdout.

Tuned as a strong, fair broad crawl (Scrapy's "broad crawls" advice): robots obeyed, one
request per domain, no delay, no AutoThrottle, no cookies, no HTTP cache, the downloader-aware
priority queue, retries and timeout equal to crawlstream's. Pages are not stored (the
callback does nothing): crawlstream stores every page, so this favours Scrapy.

Scrapy cannot use a resolver map, so every request goes through the demo web's forward
proxy (``meta['proxy']``). Scrapy's connection pool keeps at most
``CONCURRENT_REQUESTS_PER_DOMAIN`` idle connections per pool key, and with a proxy all
requests share one key (the proxy); ``PooledHTTPHandler`` raises that to
``CONCURRENT_REQUESTS`` so the proxy route does not cost Scrapy a TCP connect per request.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import Crawler, CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class PooledHTTPHandler(HTTP11DownloadHandler):
    """HTTP/1.1 handler whose pool keeps CONCURRENT_REQUESTS idle connections per key."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._pool.maxPersistentPerHost = crawler.settings.getint("CONCURRENT_REQUESTS")


def _spider_class(seeds: list[str], domains: list[str]) -> type[CrawlSpider]:
    class DemoSpider(CrawlSpider):
        name = "demo"
        allowed_domains = domains
        start_urls = seeds
        rules = (
            Rule(
                # deny_extensions=[]: crawlstream fetches (and stores) .png/.pdf links too;
                # tags include <link rel=alternate>, which the demo web uses for some links.
                LinkExtractor(allow_domains=domains, deny_extensions=[], tags=("a", "area", "link")),
                callback="parse_page",
                follow=True,
            ),
        )

        async def start(self) -> Any:  # Scrapy >= 2.13
            for req in self._seed_requests():
                yield req

        def start_requests(self) -> Iterable[Request]:  # older Scrapy
            return self._seed_requests()

        def _seed_requests(self) -> list[Request]:
            # dont_filter=False (Scrapy's default start requests bypass the dupefilter, so every
            # home page would be fetched twice when later pages link back to it).
            return [Request(u) for u in self.start_urls]

        def parse_page(self, response: Any) -> None:
            return None

    return DemoSpider


class ProxyMiddleware:
    """Route every request (robots.txt included) through the demo web's forward proxy."""

    def __init__(self, proxy: str) -> None:
        self.proxy = proxy

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProxyMiddleware:
        return cls(crawler.settings.get("BENCH_PROXY"))

    def process_request(self, request: Request, spider: Any = None) -> None:
        request.meta.setdefault("proxy", self.proxy)
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds-file", required=True)
    p.add_argument("--proxy", required=True)
    p.add_argument("--timeout-s", type=float, default=30.0)
    p.add_argument("--retries", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--max-body-bytes", type=int, default=5 * 1024 * 1024)
    p.add_argument("--max-depth", type=int, default=20)
    p.add_argument("--user-agent", default="crawlstream/0.1 (+https://example.invalid/crawlstream)")
    args = p.parse_args(argv)
    with open(args.seeds_file, encoding="utf-8") as f:
        seeds = [line.strip() for line in f if line.strip()]
    domains = sorted({urlsplit(u).hostname or "" for u in seeds} - {""})
    settings = {
        "BOT_NAME": "bench",
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": True,
        "USER_AGENT": args.user_agent,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 0,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "AUTOTHROTTLE_ENABLED": False,
        "HTTPCACHE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": True,
        "RETRY_TIMES": args.retries,
        "DOWNLOAD_TIMEOUT": args.timeout_s,
        "DOWNLOAD_MAXSIZE": args.max_body_bytes,
        "DOWNLOAD_WARNSIZE": 0,
        "DEPTH_LIMIT": args.max_depth,
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "DOWNLOAD_HANDLERS": {"http": PooledHTTPHandler},
        "DOWNLOADER_MIDDLEWARES": {ProxyMiddleware: 1},
        "BENCH_PROXY": args.proxy,
    }
    started = time.perf_counter()
    process = CrawlerProcess(settings, install_root_handler=False)
    crawler = process.create_crawler(_spider_class(seeds, domains))
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    out = {
        "seconds": round(time.perf_counter() - started, 3),
        "stats": {k: v for k, v in stats.items() if isinstance(v, int | float | str)},
    }
    sys.stdout.write(json.dumps(out, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
