"""The seed crawler's database for the migration tests: schema, generated rows, hostile values.

``load_seed_crawl`` fills a database with ``n_rows`` rows over the three tables (about half
visited, two fifths frontier, a tenth domain metadata) from real URLs (the Reddit link dumps
in ../shared/data) and generated ones, plus a fixed set of hostile rows whose outcomes the
tests know: NULLs everywhere, URLs that do not canonicalize, duplicate rows, robots.txt of
10 KB and of 600 KB, content paths that are missing or escape the content root.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from crawlstream.migrate import SEED_SCHEMA_SQL

NOW_S = 1_800_000_000  # the tests' "now" is real time; every "future" expiry is far past it
FUTURE_S = 4_000_000_000
PAST_S = 1_600_000_000

VISITED_COLUMNS = ("url", "url_sha256", "crawled_timestamp", "http_status_code", "content_storage_path",
                   "redirected_to_url")
FRONTIER_COLUMNS = ("url", "domain", "depth", "priority", "added_timestamp")
DOMAIN_COLUMNS = ("domain", "robots_txt_content", "robots_txt_expires_timestamp", "is_manually_excluded",
                  "last_scheduled_fetch_timestamp")

# URL -> the InvalidUrl reason (or "missing"/"blank") the migration must count it under.
HOSTILE_URLS: dict[str | None, str] = {
    None: "missing",
    "": "blank",
    "   ": "blank",
    "javascript:alert(1)": "scheme",
    "ftp://files.example.com/a": "scheme",
    "/relative/path": "scheme",
    "http://": "host",
    "http://exa mple.com/": "host",
    "http://example.com:99999/": "port",
    "http://" + "a" * 9000 + ".com/": "length",
}


def create_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def create_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SEED_SCHEMA_SQL)


def copy_rows(dsn: str, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    count = 0
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                count += 1
        conn.commit()
    return count


def real_urls(shared_data: Path, limit: int) -> list[str]:
    """Links submitted to Reddit in 2008, as found (duplicates, odd schemes and all)."""
    path = shared_data / "urls" / "reddit-webtext" / "RS_v2_2008-03.urk.json-00.gz"
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            out.append(json.loads(line)["u"])
            if len(out) >= limit:
                break
    return out


def sha(url: str | None) -> str | None:
    return None if url is None else hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class SeedCrawl:
    """What was loaded, for the assertions: row counts per table and the special rows."""

    rows: dict[str, int] = field(default_factory=dict)
    content_files: int = 0  # rows whose body file exists under the content root
    content_missing: int = 0
    content_outside: int = 0
    redirects: int = 0
    excluded_domains: set[str] = field(default_factory=set)
    robots_future: dict[str, int] = field(default_factory=dict)  # host -> expiry s (largest)
    robots_truncated: int = 0


def robots_body(i: int, size: int) -> str:
    head = f"# robots.txt {i}\nUser-agent: *\nDisallow: /private-{i}/\n"
    filler = "".join(f"Disallow: /generated/{i}/{k}/\n" for k in range(size // 28 + 1))
    return (head + filler)[:size]


def load_seed_crawl(dsn: str, shared_data: Path, content_root: Path, n_rows: int, seed: int = 7) -> SeedCrawl:
    """Fill the seed's tables with about ``n_rows`` rows; body files go under ``content_root``."""
    rng = random.Random(seed)
    create_schema(dsn)
    out = SeedCrawl()
    n_visited, n_frontier = n_rows // 2, n_rows * 2 // 5
    n_domains = max(20, n_rows - n_visited - n_frontier)
    domains = [f"site{i}-example{'.com' if i % 3 else '.org'}" for i in range(n_domains)]
    reddit = real_urls(shared_data, min(n_visited // 2, 20_000))

    visited: list[tuple[Any, ...]] = []
    content_root.mkdir(parents=True, exist_ok=True)
    for i in range(n_visited):
        url = reddit[i] if i < len(reddit) else f"https://{domains[i % n_domains]}/page/{i}?ref={i % 7}"
        status = rng.choice((200, 200, 200, 301, 404, 500, None))
        path: str | None = None
        if i % 50 == 0:
            path = f"content/{i % 97:02d}/{i}.html"
            file = content_root / path
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(f"<html><body>page {i} of {url}</body></html>".encode("utf-8", "surrogatepass"))
            out.content_files += 1
        elif i % 50 == 1:
            path = f"content/missing/{i}.html"
            out.content_missing += 1
        redirect = f"https://{domains[(i + 1) % n_domains]}/moved/{i}" if i % 33 == 0 else None
        out.redirects += redirect is not None
        visited.append((url, sha(url), NOW_S - rng.randrange(10**7), status, path, redirect))
    # hostile visited rows
    for url in HOSTILE_URLS:
        visited.append((url, sha(url), None, None, None, None))
    visited.append(("https://site1-example.com/escape", None, -5, 999999, "../../../../etc/passwd", ""))
    out.content_outside += 1
    visited.append(("https://site1-example.com/absolute", None, NOW_S, 200, "/etc/hostname", None))
    out.content_outside += 1
    visited += visited[:50]  # duplicate rows
    out.rows["visited_urls"] = copy_rows(dsn, "visited_urls", VISITED_COLUMNS, visited)

    frontier: list[tuple[Any, ...]] = []
    for i in range(n_frontier):
        domain = domains[rng.randrange(n_domains)]
        depth = rng.choice((0, 1, 2, 3, None))
        priority = rng.choice((1.0, 0.9, 0.5, 0.1, None))
        frontier.append((f"http://{domain}/queued/{i}", domain, depth, priority, NOW_S - rng.randrange(10**6)))
    for url in HOSTILE_URLS:
        frontier.append((url, None, None, None, None))
    frontier += [(v[0], None, 1, 0.5, None) for v in visited[len(reddit) : len(reddit) + 30]]  # visited already
    frontier += frontier[:40]  # duplicate rows
    frontier.append(("http://site2-example.org/deep", "site2-example.org", 10**6, 1.0, NOW_S))  # depth clamped
    frontier.append(("http://site2-example.org/negative", "site2-example.org", -3, float("nan"), NOW_S))
    out.rows["frontier"] = copy_rows(dsn, "frontier", FRONTIER_COLUMNS, frontier)

    meta: list[tuple[Any, ...]] = []
    for i, domain in enumerate(domains):
        body: str | None = None
        expires: int | None = None
        if i % 4 == 0:
            body = robots_body(i, 10 * 1024 if i % 8 == 0 else 200)
            expires = FUTURE_S if i % 3 else PAST_S
            if expires == FUTURE_S:
                out.robots_future[domain] = expires
        excluded = i % 25 == 3
        if excluded:
            out.excluded_domains.add(domain)
        meta.append((domain, body, expires, excluded, NOW_S + i if i % 5 == 0 else None))
    meta.append((None, "User-agent: *\nDisallow: /\n", FUTURE_S, True, None))  # no domain
    meta.append(("", None, None, None, None))
    meta.append(("exa mple.com", None, None, True, None))  # not a host name
    meta.append((f"blog.{domains[4]}", None, None, True, None))  # a host: its registered domain is excluded
    out.excluded_domains.add(domains[4])
    meta.append((domains[8], robots_body(8, 600 * 1024), FUTURE_S + 10, None, None))  # over 500 KiB
    out.robots_future[domains[8]] = FUTURE_S + 10
    out.robots_truncated += 1
    meta.append((domains[12], "User-agent: *\nAllow: /\n", None, None, -1))  # NULL expiry
    meta += meta[:10]  # duplicate rows
    out.rows["domain_metadata"] = copy_rows(dsn, "domain_metadata", DOMAIN_COLUMNS, meta)
    return out
