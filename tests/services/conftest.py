"""Storage-side service tests: real embedded bus, real store, lake and index on tmp_path."""

from __future__ import annotations

import csv
import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from crawlstream.settings import Settings, load


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    """Settings on tmp_path: 4 partitions, fast polls, no bus fsync (tests only)."""

    def make(**env: str) -> Settings:
        base = {
            "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"),
            "CRAWLSTREAM_BUS_PARTITIONS": "4",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.05",
        }
        base.update(env)
        return load(base)

    return make


@pytest.fixture(scope="session")
def html_pages(shared_data: Path) -> list[tuple[str, bytes]]:
    """A few real pages (url, html bytes) of different sites, small ones to stay fast."""
    rows = list(csv.DictReader((shared_data / "html" / "manifest.csv").open(encoding="utf-8")))
    rows = [r for r in rows if r["file"].endswith(".gz") and 5_000 < int(r["html_bytes"]) < 120_000]
    picked: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for row in rows:
        if row["site_key"] in seen:
            continue
        seen.add(row["site_key"])
        picked.append((row["url"], gzip.decompress((shared_data / "html" / row["file"]).read_bytes())))
        if len(picked) == 6:
            break
    assert len(picked) == 6, "expected at least 6 small pages of distinct sites in shared data"
    return picked
