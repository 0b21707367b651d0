"""A manifest flip during concurrent requests: no error, and no response mixes two versions.

Version A is built from a real lake; while 8 clients hammer the API, more rows are written
to the lake and version B is built and flipped (then old versions are garbage-collected).
Every response must equal, field for field, the answer computed from the lake contents of
the version it names.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.urls import url_key
from tests.api._lake import ROW_GROUP_ROWS, expected_urls, run_client, write_lake

Client = TestClient[Any, Any]

LAKE_A = {
    1: [f"https://flip.com/a/{i:03d}" for i in range(40)],
    2: [f"https://flip.com/b/{i:03d}" for i in range(10)],
}
LAKE_B_EXTRA = {
    1: [f"https://flip.com/a/{i:03d}x" for i in range(25)],  # interleaves with A's URLs
    5: [f"https://www.flip.com/c/{i:03d}" for i in range(8)],
}
LOOKUP = "https://flip.com/a/003x"
PATHS = [
    "/v1/domain/flip.com",
    "/v1/domain/flip.com/datasets/1/urls?offset=0&limit=30",
    "/v1/domain/flip.com/datasets/1/urls?offset=30&limit=30",
    f"/v1/url?url={LOOKUP}",
]


def _merged(*lakes: dict[int, list[str]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for lake in lakes:
        for ds, urls in lake.items():
            out.setdefault(ds, []).extend(urls)
    return out


def _expected(path: str, lake: dict[int, list[str]]) -> dict[str, Any]:
    """The body (without index_version) the API must return when serving ``lake``."""
    if path == "/v1/domain/flip.com":
        counts = [(ds, len(expected_urls("flip.com", ds, lake))) for ds in sorted(lake)]
        return {"domain": "flip.com", "datasets": [{"dataset_id": ds, "url_count": n} for ds, n in counts if n]}
    if path.startswith("/v1/url"):
        holding = [ds for ds in sorted(lake) if LOOKUP in expected_urls("flip.com", ds, lake)]
        return {
            "url": LOOKUP,
            "url_key": url_key(LOOKUP),
            "domain": "flip.com",
            "datasets": holding,
            **_no_aliases(path.split("url=", 1)[1], holding),
        }
    offset = int(path.split("offset=")[1].split("&")[0])
    urls = expected_urls("flip.com", 1, lake)
    page = urls[offset : offset + 30]
    return {
        "domain": "flip.com",
        "dataset_id": 1,
        "total": len(urls),
        "urls": page,
        "next_offset": offset + 30 if offset + 30 < len(urls) else None,
    }


def _no_aliases(requested: str, holding: list[int]) -> dict[str, Any]:
    """The ``/v1/url`` fields of a URL without recorded redirects or raw form (ADR 024)."""
    return {
        "requested_url": requested,
        "canonical_url": LOOKUP,
        "canonical_datasets": holding,
        "redirects": [],
        "redirect_end": "none",
        "raw_form": None,
    }


def _observed(body: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in {"index_version", "domain_id", "items", "next"}}
    if "items" in body:
        out["urls"] = [i["url"] for i in body["items"]]
    return out


@pytest.mark.parametrize("where", ["local", "s3"])
def test_flip_during_concurrent_requests_serves_each_request_from_one_version(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On S3 the build is uploaded as built (manifest last) and the old version's objects stay
    (removing them under readers is the S3 gc's business, not this test's)."""
    root = tmp_path
    write_lake(root, LAKE_A)
    builder = IndexBuilder(
        root, index=IndexSettings(postings_shards=4, keep_versions=1), lake=LakeSettings(row_group_rows=ROW_GROUP_ROWS)
    )
    version_a = builder.build().version
    assert version_a is not None
    store = None
    if where == "s3":
        from tests.index._s3 import s3_store, upload_tree

        store = s3_store(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_prefix"))
        upload_tree(root, store)
        reader = IndexReader(index_store=store, lake_store=store, manifest_poll_s=0.05)
    else:
        reader = IndexReader(root)

    def flip() -> str | None:
        write_lake(root, LAKE_B_EXTRA)
        version = builder.build().version  # incremental: scans only the new files, flips the manifest
        if store is not None:
            upload_tree(root, store)
        return version

    async def go(c: Client) -> tuple[list[tuple[str, int, str | None, dict[str, Any]]], str | None, Any]:
        results: list[tuple[str, int, str | None, dict[str, Any]]] = []
        stop = asyncio.Event()

        async def client_loop(i: int) -> None:
            n = i
            while not stop.is_set():
                path = PATHS[n % len(PATHS)]
                n += 1
                resp = await c.get(path)
                results.append((path, resp.status, resp.headers.get("X-Index-Version"), await resp.json()))

        tasks = [asyncio.create_task(client_loop(i)) for i in range(8)]
        await asyncio.sleep(0.4)
        version_b = await asyncio.to_thread(flip)
        await asyncio.sleep(0.4)
        gc = await asyncio.to_thread(builder.gc)  # only unpinned old versions go
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*tasks)
        return results, version_b, gc

    try:
        results, version_b, gc = run_client(reader, go, executor_threads=4)
    finally:
        reader.close()
    assert version_b is not None and version_b != version_a
    lakes = {version_a: LAKE_A, version_b: _merged(LAKE_A, LAKE_B_EXTRA)}
    seen = {version_a: 0, version_b: 0}
    for path, status, header_version, body in results:
        assert status == 200, (path, body)
        assert header_version == body["index_version"] in lakes
        assert _observed(body) == _expected(path, lakes[body["index_version"]]), (path, body["index_version"])
        seen[body["index_version"]] += 1
    assert seen[version_a] > 0 and seen[version_b] > 0, seen  # the flip happened mid-run
    assert results[-1][2] == version_b  # and the API moved on to the new version
    assert version_a in gc.removed_versions + gc.pinned_versions
