"""The query API over an index and lake on a real S3 server (versitygw), and paging across a
manifest flip (local and S3): every page of a walk comes from the version it started on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexBuilder, IndexReader, read_manifest
from crawlstream.objectstore import ObjectStore, RetryPolicy
from crawlstream.settings import IndexSettings, LakeSettings
from tests.api._lake import ROW_GROUP_ROWS, expected_urls, run_client, write_lake
from tests.index._s3 import s3_store, upload_tree

Client = TestClient[Any, Any]

LAKE_A = {
    1: [f"https://flip.com/a/{i:03d}" for i in range(40)],
    2: [f"https://flip.com/b/{i:03d}" for i in range(10)] + [f"https://other.org/{i}" for i in range(5)],
}
LAKE_B_EXTRA = {1: [f"https://flip.com/a/{i:03d}x" for i in range(25)]}  # interleaves with A's URLs


def _builder(root: Path) -> IndexBuilder:
    return IndexBuilder(root, index=IndexSettings(postings_shards=4, keep_versions=1),
                        lake=LakeSettings(row_group_rows=ROW_GROUP_ROWS))


def _publish(root: Path, store: ObjectStore | None, removed: tuple[str, ...] | list[str] = ()) -> None:
    """S3: upload what the local build wrote (manifest last), delete what gc removed."""
    if store is None:
        return
    upload_tree(root, store)
    for version in removed:
        store.delete_prefix(f"index/{version}")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_paging_walk_reads_every_page_from_its_first_version_across_a_flip(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    write_lake(tmp_path, LAKE_A)
    builder = _builder(tmp_path)
    version_a = builder.build().version
    store = None
    if where == "s3":
        store = s3_store(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_prefix"))
        _publish(tmp_path, store)
        reader = IndexReader(index_store=store, lake_store=store, manifest_poll_s=0.05)
    else:
        reader = IndexReader(tmp_path)

    async def go(c: Client) -> tuple[list[dict[str, Any]], dict[str, Any], tuple[int, dict[str, Any]], str | None]:
        pages = [await (await c.get("/v1/domain/flip.com/datasets/1/urls?limit=7")).json()]

        def flip() -> str | None:
            write_lake(tmp_path, LAKE_B_EXTRA)
            version = builder.build().version
            _publish(tmp_path, store)
            return version

        version_b = await asyncio.to_thread(flip)
        await asyncio.sleep(0.1)  # past the S3 reader's manifest poll interval
        while pages[-1]["next"] is not None:
            resp = await c.get(pages[-1]["next"])
            assert resp.status == 200, await resp.text()
            pages.append(await resp.json())
        fresh = await (await c.get("/v1/domain/flip.com/datasets/1/urls?limit=7")).json()
        gc = await asyncio.to_thread(builder.gc)
        await asyncio.to_thread(_publish, tmp_path, store, gc.removed_versions)
        await asyncio.sleep(0.1)
        gone = await c.get(pages[0]["next"])
        return pages, fresh, (gone.status, await gone.json()), version_b

    try:
        pages, fresh, (gone_status, gone), version_b = run_client(reader, go, max_limit=50)
    finally:
        reader.close()
    assert version_b is not None and version_b != version_a
    assert {p["index_version"] for p in pages} == {version_a}
    assert len(pages) == 6 and all(p["total"] == 40 for p in pages)
    assert [i["url"] for p in pages for i in p["items"]] == expected_urls("flip.com", 1, LAKE_A)
    assert pages[0]["next"] == f"/v1/domain/flip.com/datasets/1/urls?offset=7&limit=7&version={version_a}"
    assert fresh["index_version"] == version_b and fresh["total"] == 65  # a new walk sees the new version
    assert gone_status == 410 and gone["error"] == "version_gone" and "start over" in gone["message"]


def test_a_corrupt_postings_block_on_s3_is_a_502_counted_never_a_wrong_answer(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str
) -> None:
    write_lake(tmp_path, LAKE_A)
    _builder(tmp_path).build()
    store = s3_store(s3_server, s3_prefix)
    upload_tree(tmp_path, store)
    manifest = read_manifest(tmp_path)
    assert manifest is not None
    postings = s3_server.path_of("crawlstream", store.key(manifest.current().files["postings"]))
    data = bytearray(postings.read_bytes())
    data[-10] ^= 0xFF  # inside the last block's compressed body
    postings.write_bytes(bytes(data))
    reader = IndexReader(index_store=store, lake_store=store)
    registry = CollectorRegistry()

    async def go(c: Client) -> list[tuple[int, dict[str, Any]]]:
        out = []
        for path in ("/v1/domain/flip.com", "/v1/domain/other.org", "/healthz"):
            resp = await c.get(path)
            out.append((resp.status, await resp.json()))
        return out

    try:
        answers = run_client(reader, go, registry=registry)
    finally:
        reader.close()
    errors = [body for status, body in answers if status == 502]
    assert errors and all(e["error"] == "corrupt_data" and "checksum" in e["message"] for e in errors)
    assert all(status in (200, 502) for status, _ in answers)  # a block the flip missed still answers
    assert answers[-1][0] == 200  # the version itself is sound: healthz
    assert registry.get_sample_value("crawlstream_api_integrity_errors_total") == len(errors)


def test_an_s3_outage_is_a_fast_503_cached_answers_still_served_and_it_recovers(tmp_path: Path) -> None:
    write_lake(tmp_path, LAKE_A)
    _builder(tmp_path).build()
    with LocalS3() as server:
        store = s3_store(server, "s3://crawlstream/api-outage")
        upload_tree(tmp_path, store)
        store.retry = RetryPolicy(deadline_s=1.0)
        reader = IndexReader(index_store=store, lake_store=store, manifest_poll_s=0.2)

        async def go(c: Client) -> dict[str, Any]:
            out: dict[str, Any] = {"warm": (await c.get("/v1/domain/flip.com")).status}
            await asyncio.to_thread(server.stop, keep_data=True)
            try:
                await asyncio.sleep(0.3)  # a manifest poll is due and fails: the version stays
                out["cached"] = (await c.get("/v1/domain/flip.com")).status
                timings = []
                for path in ("/v1/domain/other.org", "/v1/domain/other.org",
                             "/v1/domain/flip.com/datasets/1/urls?limit=5"):
                    started = time.monotonic()
                    resp = await c.get(path)
                    timings.append((resp.status, (await resp.json())["error"], time.monotonic() - started))
                out["down"] = timings
            finally:
                await asyncio.to_thread(server.restart)
            started = time.monotonic()
            while (await c.get("/v1/domain/other.org")).status != 200:
                assert time.monotonic() - started < 15, "the API did not recover"
                await asyncio.sleep(0.2)
            out["recovered_s"] = time.monotonic() - started
            out["page"] = (await c.get("/v1/domain/flip.com/datasets/1/urls?limit=5")).status
            return out

        try:
            out = run_client(reader, go)
        finally:
            reader.close()
    assert out["warm"] == 200 and out["cached"] == 200
    assert all(status == 503 and code == "index_unavailable" for status, code, _ in out["down"])
    assert out["down"][0][2] < 3.0  # the store's deadline (1 s) and its back-off, not a hang
    assert max(t for _, _, t in out["down"][1:]) < 0.5  # then at once, until the next probe
    assert out["page"] == 200
