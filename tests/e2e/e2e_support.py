"""End-to-end crawl support: the synthetic web on 127.0.0.1 and settings for a fast, polite crawl.

Delays are scaled down (scheduler minimum 50 ms, robots Crawl-delay 300 ms, back-off capped
at 300 ms) and the fetch timeout sits below the slow page's delay, so a 30-domain crawl with
every special page finishes in seconds while every politeness rule still applies.
"""

from __future__ import annotations

from pathlib import Path

from crawlstream.demoweb import DemoWeb
from crawlstream.settings import Settings, load

MIN_DELAY_S = 0.05
CRAWL_DELAY_S = 0.3
MAX_RETRIES = 2
MAX_BODY_BYTES = 256 * 1024
FETCH_TIMEOUT_S = 1.0  # below SLOW_S, with room for a loaded machine (the web shares the test process)
SLOW_S = 2.0


def crawl_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """``CRAWLSTREAM_*`` variables of the test crawl (also used by the CLI subprocess tests)."""
    env = {
        "CRAWLSTREAM_DATA_DIR": str(data_dir),
        "CRAWLSTREAM_BUS_PARTITIONS": "4",
        "CRAWLSTREAM_BUS_FSYNC": "never",
        "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.1",
        "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": "100000",
        "CRAWLSTREAM_DEDUPE_SNAPSHOT_INTERVAL_S": "1",
        "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": str(MIN_DELAY_S),
        "CRAWLSTREAM_SCHEDULER_RESPONSE_TIME_FACTOR": "0.5",
        "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.3",
        "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": str(MAX_RETRIES),
        "CRAWLSTREAM_FETCH_TIMEOUT_S": str(FETCH_TIMEOUT_S),
        "CRAWLSTREAM_FETCH_READ_TIMEOUT_S": str(FETCH_TIMEOUT_S),
        "CRAWLSTREAM_FETCH_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "CRAWLSTREAM_FETCH_ROBOTS_ERROR_BACKOFF_S": "0.3",
        "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
        "CRAWLSTREAM_CRAWL_CHECK_INTERVAL_S": "0.2",
        "CRAWLSTREAM_CRAWL_PROGRESS_INTERVAL_S": "2",
    }
    env.update(extra)
    return env


def crawl_settings(data_dir: Path, **extra: str) -> Settings:
    return load(crawl_env(data_dir, **extra))


def demo_web(n_domains: int = 30, **kw: object) -> DemoWeb:
    """The web every e2e test crawls (not started)."""
    args: dict[str, object] = {
        "pages_per_domain": 8,
        "seed": 4,
        "crawl_delay_s": CRAWL_DELAY_S,
        "slow_s": SLOW_S,
        "huge_bytes": 1024 * 1024,
        "bomb_bytes": 8 * 1024 * 1024,
    }
    args.update(kw)
    return DemoWeb(n_domains, **args)  # type: ignore[arg-type]
