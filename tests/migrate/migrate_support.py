"""Running ``crawlstream migrate postgres`` in-process and reading back what it wrote."""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from crawlstream.cli._migrate import migrate_postgres
from crawlstream.frontier import HEADER_SIZE, LANE_SUFFIX, decode_records
from crawlstream.lake import lake_urls
from crawlstream.migrate import MigrationReport
from crawlstream.redisconn import open_redis
from crawlstream.settings import Settings, load


def migrate_settings(data_dir: Path, **extra: str) -> Settings:
    env = {
        "CRAWLSTREAM_DATA_DIR": str(data_dir),
        "CRAWLSTREAM_BUS_PARTITIONS": "4",
        "CRAWLSTREAM_BUS_FSYNC": "never",
        "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": "200000",
        "CRAWLSTREAM_LAKE_ZSTD_LEVEL": "3",
    }
    env.update(extra)
    return load(env)


def run_migration(
    settings: Settings,
    dsn: str,
    *,
    content_root: Path | None = None,
    dataset_id: int | None = 5,
    batch_rows: int = 2000,
    checkpoint_rows: int = 250_000,
    restart: bool = False,
    publish: bool = True,
    on_batch: Callable[[str, int], None] | None = None,
) -> MigrationReport:
    args = argparse.Namespace(
        dsn=dsn,
        dataset_id=dataset_id,
        content_root=content_root,
        batch_rows=batch_rows,
        checkpoint_rows=checkpoint_rows,
        checkpoint_interval_s=3600.0,
        restart=restart,
        no_publish=not publish,
    )
    return migrate_postgres(settings, args, on_batch=on_batch)


def frontier_files(data_dir: Path) -> dict[str, list[tuple[str, int, int]]]:
    """Every frontier file's records: domain -> [(url, depth, discovered_at_ms)] in fetch order
    (the priority lane ``<domain>~lane`` first, then the file)."""
    out: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for path in sorted((data_dir / "frontier").glob("*/*/*")):
        lane = path.name.endswith(LANE_SUFFIX)
        if "~" in path.name and not lane:
            continue
        domain = path.name.removesuffix(LANE_SUFFIX)
        entries, _ = decode_records(path.read_bytes()[HEADER_SIZE:], domain, lane=lane)
        records = [(e.url, e.depth, e.discovered_at_ms) for e, _ in entries]
        out[domain] = records + out[domain] if lane else out[domain] + records
    return dict(out)


def lake_rows(data_dir: Path, dataset_id: int) -> dict[str, tuple[int | None, str | None]]:
    """url -> (ts ms, extras) of every lake row of ``dataset_id`` (first row of a URL kept)."""
    out: dict[str, tuple[int | None, str | None]] = {}
    for path in sorted((data_dir / "urls" / f"dataset_id={dataset_id}").glob("*/*.parquet")):
        table = pq.read_table(path)
        urls = lake_urls(table).to_pylist()
        ts = table.column("ts").cast("int64").to_pylist()
        extras = table.column("extras").to_pylist()
        for url, t, e in zip(urls, ts, extras, strict=True):
            out.setdefault(url, (t, e))
    return out


def redis_dump(data_dir: Path) -> dict[str, Any]:
    """Every key of the data dir's Redis with its value, comparable with ==."""
    with open_redis(None, data_dir) as handle:
        client = handle.client
        out: dict[str, Any] = {}
        for key in sorted(client.scan_iter(count=1000)):
            kind = client.type(key).decode()
            if kind == "string":
                value: Any = client.get(key)
            elif kind == "hash":
                value = sorted(client.hgetall(key).items())
            elif kind == "set":
                value = sorted(client.smembers(key))
            elif kind == "zset":
                value = client.zrange(key, 0, -1, withscores=True)
            else:
                value = kind
            out[key.decode("utf-8", "surrogatepass")] = value
        return out


def tree_digest(data_dir: Path, skip: tuple[str, ...] = ("redis",)) -> dict[str, str]:
    """path -> sha256 of every file under ``data_dir`` (``skip``: top-level directories)."""
    out = {}
    for path in sorted(data_dir.rglob("*")):
        rel = path.relative_to(data_dir)
        if path.is_file() and rel.parts[0] not in skip and not rel.name.endswith(".lock"):
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def report_json(report: MigrationReport) -> dict[str, Any]:
    data = report.to_json()
    for key in ("seconds", "rows_per_s", "already_complete", "resumed", "journal_recovered_urls"):
        data.pop(key)
    for table in data["tables"].values():
        table.pop("seconds")
    return json.loads(json.dumps(data))
