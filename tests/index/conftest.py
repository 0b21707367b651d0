"""A multi-dataset test lake: ~20 datasets, Zipf-ish domains, real Reddit URLs, replays."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.errors import InvalidUrl
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.lake import LakeWriter
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.urls import canonicalize

DATASETS = 20


def _hosts(shared_data: Path, n: int) -> list[str]:
    lines = (shared_data / "urls" / "protego-top-10000-websites.txt").read_text().split()
    return lines[:n]


def _reddit(shared_data: Path, n: int) -> list[str]:
    out = []
    with gzip.open(shared_data / "urls" / "reddit-webtext" / "RS_v2_2008-05.urk.json-00.gz", "rt") as fh:
        for line in fh:
            out.append(json.loads(line)["u"])
            if len(out) >= n:
                break
    return out


def write_test_lake(root: Path, shared_data: Path, *, seed: int = 7, row_group_rows: int = 64) -> None:
    """Write the lake in two passes per dataset; the second replays part of the first."""
    rnd = random.Random(seed)
    hosts = _hosts(shared_data, 400)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(hosts))]
    reddit = _reddit(shared_data, 3000)
    for rnd_pass in range(2):
        w = LakeWriter(root, config=LakeSettings(row_group_rows=row_group_rows))
        for ds in range(1, DATASETS + 1):
            if rnd_pass == 1 and ds % 4:
                continue  # only every 4th dataset gets a second (overlapping) ingest
            picks = rnd.choices(hosts, weights, k=250)
            urls = [f"https://{h}/p/{rnd.randrange(60)}?q={rnd.randrange(3)}" for h in picks]
            urls += reddit[(ds * 150) % 2800 : (ds * 150) % 2800 + 150]
            for u in urls:
                try:
                    canon = canonicalize(u)
                except InvalidUrl:
                    continue
                w.add_canonical(ds, canon, ts_ms=1_700_000_000_000 + rnd.randrange(10**6))
        w.close()


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    root = tmp_path_factory.mktemp("lake")
    write_test_lake(root, shared_data)
    IndexBuilder(root, index=IndexSettings(postings_shards=8)).build()
    return root


@pytest.fixture(scope="module")
def _s3_lake(lake_root: Path, request: pytest.FixtureRequest) -> str:
    """``lake_root`` uploaded once per module to the S3 server; its ``s3://`` location."""
    from tests.index._s3 import s3_store, upload_tree

    store = s3_store(request.getfixturevalue("s3_server"))
    upload_tree(lake_root, store)
    return str(store.location)


@pytest.fixture(params=["local", "s3"])
def index_reader(request: pytest.FixtureRequest, lake_root: Path) -> Iterator[IndexReader]:
    """A reader of the test lake, from the local directory or from S3 (same answers expected)."""
    if request.param == "local":
        reader = IndexReader(lake_root)
    else:
        from tests.index._s3 import s3_store

        store = s3_store(request.getfixturevalue("s3_server"), request.getfixturevalue("_s3_lake"))
        reader = IndexReader(index_store=store, lake_store=store)
    yield reader
    reader.close()
