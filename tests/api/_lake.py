"""Test helpers: a small real lake (LakeWriter) with known contents, and the API on 127.0.0.1.

The lake's contents are known exactly (``EXPECTED``), so answers are checked against the
data written, not against the reader's own view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from crawlstream.api import RUNNER_OPTIONS, Acl, create_app
from crawlstream.lake import LakeWriter
from crawlstream.settings import ApiSettings, LakeSettings
from crawlstream.store import ContentStore
from crawlstream.urls import canonicalize

T = TypeVar("T")

TS_MS = 1_718_359_200_000  # 2024-06-14T10:00:00.000Z
BIG = 230  # URLs of example.co.uk in dataset 1: several pages, many row groups
ROW_GROUP_ROWS = 16

# dataset_id -> raw URLs written to the lake
DATASETS: dict[int, list[str]] = {
    1: [f"https://www.example.co.uk/p/{i:04d}?b=2&a=1" for i in range(BIG)]
    + [f"http://other.com/{i}" for i in range(12)],
    2: [f"https://shop.example.co.uk/item/{i}" for i in range(30)]
    + [f"https://bücher.de/buch/{i}" for i in range(5)]
    + ["http://192.168.1.1/router"],
    3: [f"http://sub.other.com/x/{i}" for i in range(7)],
    7: [f"https://example.co.uk/secret/{i}" for i in range(3)] + [f"https://secret.org/{i}" for i in range(4)],
}


def expected_urls(domain: str, dataset_id: int, datasets: dict[int, list[str]] = DATASETS) -> list[str]:
    """The canonical URLs of (domain, dataset) in URL order, each once: what the API must list."""
    canon = {canonicalize(u) for u in datasets.get(dataset_id, [])}
    return sorted({c.url for c in canon if c.domain == domain})


def write_lake(root: Path, datasets: dict[int, list[str]], *, ts_ms: int = TS_MS) -> None:
    writer = LakeWriter(root, config=LakeSettings(row_group_rows=ROW_GROUP_ROWS))
    for dataset_id, urls in datasets.items():
        for u in urls:
            writer.add_canonical(dataset_id, canonicalize(u), ts_ms=ts_ms)
    writer.close()


def run_client(
    reader: Any,
    scenario: Callable[[TestClient[Any, Any]], Awaitable[T]],
    *,
    max_limit: int = 50,
    acl: Acl | None = None,
    anonymous_reads: bool | None = None,
    registry: CollectorRegistry | None = None,
    executor_threads: int = 2,
    default_limit: int = 20,
    store: ContentStore | None = None,
    status: Any = None,
) -> T:
    """Start the API on 127.0.0.1 (a real socket), run ``scenario`` against it, stop it."""

    async def main() -> T:
        app = create_app(
            reader,
            config=ApiSettings(max_limit=max_limit, default_limit=default_limit, executor_threads=executor_threads),
            acl=acl,
            anonymous_reads=anonymous_reads,
            registry=registry if registry is not None else CollectorRegistry(),
            store=store,
            status=status,
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(**RUNNER_OPTIONS)  # the production runner options (no access log)
        async with TestClient(server) as client:
            return await asyncio.wait_for(scenario(client), timeout=120)

    return asyncio.run(main())
