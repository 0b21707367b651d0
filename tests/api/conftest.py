"""Fixtures: a small real lake + index (LakeWriter + IndexBuilder) and a reader over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.settings import IndexSettings, LakeSettings
from tests.api._lake import DATASETS, ROW_GROUP_ROWS, write_lake


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api-lake")
    write_lake(root, DATASETS)
    IndexBuilder(root, index=IndexSettings(postings_shards=4), lake=LakeSettings(row_group_rows=ROW_GROUP_ROWS)).build()
    return root


@pytest.fixture(scope="module")
def reader(lake_root: Path) -> Iterator[IndexReader]:
    r = IndexReader(lake_root)
    yield r
    r.close()
