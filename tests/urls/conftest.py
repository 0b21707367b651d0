"""Fixtures for the URL identity tests: the real URL lists in ../shared/data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def kasztp_urls(shared_data: Path) -> list[str]:
    """48k real URLs (ada-url's kasztp.txt), one per line, the first with a BOM."""
    with gzip.open(
        shared_data / "urls" / "ada-url-various-datasets" / "kasztp.txt.gz", "rt", encoding="utf-8"
    ) as fh:
        return [line.rstrip("\n") for line in fh]


@pytest.fixture(scope="session")
def reddit_urls(shared_data: Path) -> list[str]:
    """The "u" field of one month of reddit-webtext submissions (~30k URLs)."""
    path = sorted((shared_data / "urls" / "reddit-webtext").glob("*.gz"))[0]
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line)["u"] for line in fh if line.strip()]
