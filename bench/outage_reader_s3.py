"""A 20 s S3 outage under 4 concurrent API clients: statuses and latencies by phase (issue 26).

``python -m bench.outage_reader_s3`` (a measurement, not part of ``make bench``): half the
requests ask for domains whose postings block is cached ("warm"), half for others ("cold").
The reader's S3 deadline is 10 s: min(``s3.deadline_s``, ``api.request_timeout_s``) by default.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from bench.bench_reader_s3 import _build, _upload
from crawlstream.api import RUNNER_OPTIONS, create_app
from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexReader
from crawlstream.objectstore import RetryPolicy, open_objects, parse_location
from crawlstream.settings import ApiSettings, load

OUTAGE_S = 20.0


async def _clients(c: TestClient[Any, Any], domains: list[str], s3: LocalS3) -> tuple[list[Any], float | None]:
    warm = domains[:20]
    for d in warm:
        await c.get(f"/v1/domain/{d}")
    log: list[tuple[str, str, int, float]] = []
    phase = {"p": "up"}

    async def client(i: int) -> None:
        n = i
        while phase["p"] != "done":
            kind = "warm" if n % 2 else "cold"
            d = warm[n % 20] if kind == "warm" else domains[20 + (n * 7) % (len(domains) - 20)]
            n += 1
            started = time.monotonic()
            resp = await c.get(f"/v1/domain/{d}")
            await resp.read()
            log.append((phase["p"], kind, resp.status, time.monotonic() - started))
            await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(client(i)) for i in range(4)]
    await asyncio.sleep(1)
    phase["p"] = "down"
    await asyncio.to_thread(s3.stop, keep_data=True)
    await asyncio.sleep(OUTAGE_S)
    await asyncio.to_thread(s3.restart)
    phase["p"] = "back"
    back = time.monotonic()
    recovered = None
    while time.monotonic() - back < 15:
        await asyncio.sleep(0.05)
        if recovered is None and any(p == "back" and k == "cold" and s == 200 for p, k, s, _ in log[-8:]):
            recovered = time.monotonic() - back
    phase["p"] = "done"
    await asyncio.gather(*tasks)
    return log, recovered


async def _main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-outage-") as tmp, LocalS3() as s3:
        domains = _build(Path(tmp), 600)
        store = open_objects(parse_location("s3://crawlstream/outage"), load(s3.env).s3)
        _upload(Path(tmp), store)
        store.retry = RetryPolicy(deadline_s=10.0)
        reader = IndexReader(index_store=store, lake_store=store)
        reader.pin().release()
        app = create_app(reader, acl=None, registry=CollectorRegistry(), config=ApiSettings())
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(**RUNNER_OPTIONS)
        async with TestClient(server) as c:
            log, recovered = await _clients(c, domains, s3)
        reader.close()
    by: dict[str, list[float]] = collections.defaultdict(list)
    for p, k, s, dt in log:
        by[f"{p} {k} {s}"].append(dt)
    out: dict[str, Any] = {"outage_s": OUTAGE_S, "recovered_within_s": recovered}
    for key, v in sorted(by.items()):
        v.sort()
        out[key] = {"n": len(v), "p50_ms": round(v[len(v) // 2] * 1e3, 1), "max_ms": round(v[-1] * 1e3, 1)}
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(asyncio.run(_main()), indent=1) + "\n")
