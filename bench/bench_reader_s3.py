"""The query API over a local index vs the same index on S3 (versitygw on loopback, issue 26).

A small synthetic lake (``DOMAINS`` domains in 4 datasets) is built locally, then uploaded to a
LocalS3 under the same paths. For each side, through the real HTTP API (aiohttp on 127.0.0.1,
sequential requests so each request's S3 calls are its own):

* cold ``/v1/domain``: the version open (at start-up), then one domain per postings block, each
  the first to touch its block; GETs per request from ``ObjectStore.requests``;
* warm ``/v1/domain``: the same domains again, many times;
* cold / warm first page (``limit=100``) on a fresh API: the block, the lake file's footer and
  its row groups.

``python -m bench.bench_reader_s3 [--quick]``; latencies are on a shared 2-core machine.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from bench._harness import latency_ms, main
from crawlstream.api import RUNNER_OPTIONS, create_app
from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.index._formats import postings_block_of
from crawlstream.lake import LakeWriter
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import IndexSettings, LakeSettings, load
from crawlstream.urls import canonicalize, domain_prefix

DOMAINS = 2000
SHARDS = 64


def _build(root: Path, n_domains: int) -> list[str]:
    rnd = random.Random(5)
    domains = [f"site{i:05d}-{i % 7}.com" for i in range(n_domains)]
    with LakeWriter(root, config=LakeSettings()) as w:
        for ds in range(1, 5):
            for d in domains:
                for k in range(rnd.randrange(5, 150) if ds == 1 else rnd.randrange(0, 20)):
                    w.add_canonical(ds, canonicalize(f"https://www.{d}/p/{k}?x={ds}"), ts_ms=1_700_000_000_000)
    IndexBuilder(root, index=IndexSettings(postings_shards=SHARDS)).build()
    return [canonicalize(f"https://www.{d}/").domain for d in domains]


def _upload(root: Path, store: ObjectStore) -> None:
    files = sorted((p for p in root.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(root).parts)), key=lambda p: (p.name == "manifest.json", str(p)))
    for p in files:
        store.upload(p.relative_to(root).as_posix(), p)


def _one_per_block(domains: list[str]) -> list[str]:
    seen: dict[int, str] = {}
    for d in domains:
        seen.setdefault(postings_block_of(domain_prefix(d), SHARDS), d)
    return list(seen.values())


async def _timed(c: TestClient[Any, Any], path: str, store: ObjectStore | None) -> tuple[float, int]:
    before = store.requests["GET"] + store.requests["HEAD"] if store is not None else 0
    started = time.perf_counter()
    resp = await c.get(path)
    await resp.read()
    elapsed = time.perf_counter() - started
    assert resp.status == 200, (path, resp.status, await resp.text())
    after = store.requests["GET"] + store.requests["HEAD"] if store is not None else 0
    return elapsed, after - before


def _measure(make_reader: Any, store: ObjectStore | None, domains: list[str], warm_rounds: int) -> dict[str, Any]:
    cold = _one_per_block(domains)

    async def scenario(paths: list[str]) -> dict[str, Any]:
        reader: IndexReader = make_reader()
        reader.pin().release()  # the version open, as the API does at start-up
        app = create_app(reader, acl=None, registry=CollectorRegistry())
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(**RUNNER_OPTIONS)
        async with TestClient(server) as c:
            first = [await _timed(c, p, store) for p in paths]
            warm = [await _timed(c, p, store) for _ in range(warm_rounds) for p in paths]
        reader.close()
        return {
            "cold": latency_ms([t for t, _ in first]),
            "cold_requests_per_query": {"max": max(n for _, n in first), "mean": sum(n for _, n in first) / len(first)},
            "warm": latency_ms([t for t, _ in warm]),
            "warm_requests_total": sum(n for _, n in warm),
        }

    return {
        "domain": asyncio.run(scenario([f"/v1/domain/{d}" for d in cold])),
        "first_page": asyncio.run(scenario([f"/v1/domain/{d}/datasets/1/urls?limit=100" for d in cold])),
    }


def run(quick: bool) -> dict[str, Any]:
    n = 400 if quick else DOMAINS
    with tempfile.TemporaryDirectory(prefix="bench-reader-s3-") as tmp, LocalS3() as s3:
        root = Path(tmp)
        domains = _build(root, n)
        store = open_objects(parse_location("s3://crawlstream/bench"), load(s3.env).s3)
        started = time.perf_counter()
        _upload(root, store)
        upload_s = time.perf_counter() - started
        rounds = 5 if quick else 20
        local = _measure(lambda: IndexReader(root), None, domains, rounds)
        on_s3 = _measure(lambda: IndexReader(index_store=store, lake_store=store), store, domains, rounds)
        return {"domains": n, "postings_blocks": SHARDS, "upload_s": round(upload_s, 2), "local": local, "s3": on_s3}


if __name__ == "__main__":
    main(run)
