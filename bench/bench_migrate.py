"""``crawlstream migrate postgres``: rows/s and peak memory of migrating the seed's three tables.

A throw-away PostgreSQL server (``LocalPostgres``) gets the seed's schema and 100,000 rows
(10,000 quick): half ``visited_urls`` (real Reddit links from ../shared/data, then generated
URLs over one domain per 100 rows (40 queued URLs per domain: the seed sizes its frontier at 160 per
domain), 2% with a stored body on disk), two fifths ``frontier`` (a fifth of
them already visited) and a tenth ``domain_metadata`` (a quarter with a robots.txt body, a
twentieth excluded). The migration runs as its own process (``crawlstream migrate postgres``,
embedded mode, publishing to ``urls.records`` as by default), so its wall time, CPU time and
peak RSS are its own; it is then run again (the finished no-op) and with ``--restart`` (every
row read again, nothing new). ``rows_per_cpu_s`` is the one-core rate of the whole process
(goal: 50,000), start-up included; ``marginal`` is the rate past the costs every run pays
whatever its size (start-up, opening the stores: ``fixed_cpu_s``), from a second database with
a tenth of the rows (same generator): the extra CPU per extra row (meaningful from 100,000
rows: below that, the 256 lake files per checkpoint and start-up noise dominate both runs).

``python -m bench migrate [--quick]``; ``CRAWLSTREAM_BENCH_MIGRATE_ROWS=N`` loads N rows instead.

Baseline in the same run: with ``CRAWLSTREAM_BENCH_BASELINE=DIR`` (a directory holding an older
``crawlstream`` package, e.g. ``git archive <ref> libs services schemas`` unpacked, with
``services`` and ``schemas`` copied into ``crawlstream/``), the first run is measured twice
with each, interleaved, and ``first_run_vs_baseline_cpu`` is the ratio of their best CPU times.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import REPO, shared_data
from crawlstream.devtools.localpg import LocalPostgres
from crawlstream.migrate import SEED_SCHEMA_SQL


def _reddit(limit: int) -> list[str]:
    path = shared_data() / "urls" / "reddit-webtext" / "RS_v2_2008-04.urk.json-00.gz"
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            out.append(json.loads(line)["u"])
            if len(out) >= limit:
                break
    return out


def _load(dsn: str, n_rows: int, content_root: Path) -> dict[str, int]:
    import psycopg

    rng = random.Random(11)
    n_visited, n_frontier = n_rows // 2, n_rows * 2 // 5
    n_meta = n_rows - n_visited - n_frontier
    n_domains = max(10, n_rows // 100)
    domains = [f"d{i}-bench.{('com', 'org', 'net', 'io')[i % 4]}" for i in range(n_domains)]
    reddit = _reddit(min(20_000, n_visited))
    visited = []
    for i in range(n_visited):
        url = reddit[i] if i < len(reddit) else f"https://www.{domains[i % n_domains]}/articles/{i}/index.html?ref=feed"
        path = None
        if i % 50 == 0:
            path = f"c/{i % 100:02d}/{i}.html"
            (content_root / path).parent.mkdir(parents=True, exist_ok=True)
            (content_root / path).write_bytes(b"<html><body>" + str(i).encode() * 200 + b"</body></html>")
        visited.append((url, None, 1_700_000_000 + i, rng.choice((200, 200, 301, 404)), path, None))
    frontier = []
    for i in range(n_frontier):
        if i % 5 == 0:
            url = visited[rng.randrange(n_visited)][0]
        else:
            url = f"https://www.{domains[rng.randrange(n_domains)]}/queued/{i}"
        frontier.append((url, None, rng.randrange(4), rng.choice((1.0, 0.5, 0.1)), 1_700_000_000 + i))
    meta = []
    for i in range(n_meta):
        body = f"User-agent: *\nDisallow: /private/{i}/\n" * 20 if i % 4 == 0 else None
        host = domains[i] if i < n_domains else f"h{i // n_domains}.{domains[i % n_domains]}"
        meta.append((host, body, 4_000_000_000 if body else None, i % 20 == 0, 1_700_000_000 + i))
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(SEED_SCHEMA_SQL)
        for table, cols, rows in (
            (
                "visited_urls",
                "url, url_sha256, crawled_timestamp, http_status_code, content_storage_path, redirected_to_url",
                visited,
            ),
            ("frontier", "url, domain, depth, priority, added_timestamp", frontier),
            (
                "domain_metadata",
                "domain, robots_txt_content, robots_txt_expires_timestamp, is_manually_excluded, "
                "last_scheduled_fetch_timestamp",
                meta,
            ),
        ):
            with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        cur.execute("ANALYZE")
        conn.commit()
    return {"visited_urls": n_visited, "frontier": n_frontier, "domain_metadata": n_meta}


def _migrate(
    dsn: str,
    data_dir: Path,
    content_root: Path,
    *extra: str,
    code: Path | None = None,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One ``crawlstream migrate postgres`` process: its report, wall and CPU seconds, peak RSS.

    ``code``: a directory holding another ``crawlstream`` package to run instead (the baseline);
    ``settings``: extra ``CRAWLSTREAM_*`` variables.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAWLSTREAM_", "KAFKA_", "REDIS_URL"))}
    env.update(
        {
            "CRAWLSTREAM_DATA_DIR": str(data_dir),
            "CRAWLSTREAM_BUS_PARTITIONS": "16",
            "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": "10000000",
            "CRAWLSTREAM_LOG_LEVEL": "WARNING",
            **(settings or {}),
        }
    )
    if code is not None:
        env["PYTHONPATH"] = str(code)
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crawlstream",
                "migrate",
                "postgres",
                "--dsn",
                dsn,
                "--content-root",
                str(content_root),
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=REPO,
        )
        assert proc.stdout is not None
        stdout = proc.stdout.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time and peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"crawlstream migrate failed ({proc.returncode}): {stderr[-3000:]}")
    wall_s = time.perf_counter() - started
    report = json.loads(stdout)
    cpu_s, peak = usage.ru_utime + usage.ru_stime, usage.ru_maxrss
    return {
        "rows": report["rows"],
        "wall_s": round(wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "rows_per_s": round(report["rows"] / wall_s),
        "rows_per_cpu_s": round(report["rows"] / cpu_s) if cpu_s else None,
        "peak_rss_mb": round(peak / 1024, 1),
        "outcomes": {name: t["outcomes"] for name, t in report["tables"].items()},
        "table_rows_per_s": {
            name: round(t["rows"] / t["seconds"]) if t["seconds"] else None for name, t in report["tables"].items()
        },
        "already_complete": report["already_complete"],
    }


def _baseline_code() -> Path | None:
    """``CRAWLSTREAM_BENCH_BASELINE``: a directory holding an older ``crawlstream`` package."""
    value = os.environ.get("CRAWLSTREAM_BENCH_BASELINE")
    if not value:
        return None
    code = Path(value)
    if not (code / "crawlstream" / "__init__.py").is_file():
        raise SystemExit(f"CRAWLSTREAM_BENCH_BASELINE={value} holds no crawlstream package (bench_migrate docstring)")
    return code


def _database(pg: LocalPostgres, name: str) -> str:
    import psycopg

    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg.dsn_for(name)


def _marginal(small: dict[str, Any], big: dict[str, Any]) -> dict[str, Any]:
    """The one-core rate past what a run costs whatever its size (start-up, opening the stores):
    the extra CPU of ``big`` over ``small`` per extra row."""
    extra_rows, extra_cpu = big["rows"] - small["rows"], big["cpu_s"] - small["cpu_s"]
    return {
        "cpu_us_per_row": round(1e6 * extra_cpu / extra_rows, 1) if extra_rows > 0 else None,
        "rows_per_cpu_s": round(extra_rows / extra_cpu) if extra_cpu > 0 else None,
        "fixed_cpu_s": round(small["cpu_s"] - small["rows"] * extra_cpu / extra_rows, 2) if extra_rows > 0 else None,
    }


def run(quick: bool) -> dict[str, Any]:
    n_rows = int(os.environ.get("CRAWLSTREAM_BENCH_MIGRATE_ROWS") or (10_000 if quick else 100_000))
    baseline_code = _baseline_code()
    with tempfile.TemporaryDirectory(prefix="bench-migrate-") as tmp, LocalPostgres() as pg:
        root = Path(tmp)
        loaded = _load(pg.dsn, n_rows, root / "content")
        small_dsn = _database(pg, "small")  # a tenth of the rows: the marginal rate, past fixed costs
        _load(small_dsn, max(1000, n_rows // 10), root / "content-small")
        result: dict[str, Any] = {"rows_loaded": loaded}
        if baseline_code is not None:
            # Interleaved, best CPU of two each: the machine's load changes between runs.
            pairs = [
                (
                    _migrate(pg.dsn, root / f"base{i}", root / "content", code=baseline_code),
                    _migrate(pg.dsn, root / f"new{i}", root / "content"),
                )
                for i in range(2)
            ]
            base = min((b for b, _ in pairs), key=lambda r: r["cpu_s"])
            new = min((n for _, n in pairs), key=lambda r: r["cpu_s"])
            result["baseline_first_run"] = base
            result["baseline_code"] = str(baseline_code)
            result["first_run_vs_baseline_cpu"] = round(base["cpu_s"] / new["cpu_s"], 2)
            result["cpu_s_pairs"] = [(b["cpu_s"], n["cpu_s"]) for b, n in pairs]
            base_small = _migrate(small_dsn, root / "base-small", root / "content-small", code=baseline_code)
            result["baseline_marginal"] = _marginal(base_small, base)
        first = _migrate(pg.dsn, root / "data", root / "content")
        again = _migrate(pg.dsn, root / "data", root / "content")
        restart = _migrate(pg.dsn, root / "data", root / "content", "--restart", "--no-publish")
        no_publish = _migrate(pg.dsn, root / "data2", root / "content", "--no-publish")
        small = _migrate(small_dsn, root / "small", root / "content-small")
        result.update(
            {
                "first_run": first,
                "second_run": again,
                "restart": restart,
                "first_run_no_publish": no_publish,
                "first_run_small": small,
                "marginal": _marginal(small, first),
            }
        )
        return result
