"""Fixtures for the content store tests: the real pages of ../shared/data/html."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from crawlstream.urls import canonicalize


def load_pages(shared_data: Path) -> list[tuple[str, bytes]]:
    """(canonical url, raw html) for every page of html/manifest.csv; synthetic URL when empty."""
    base = shared_data / "html"
    seen: set[str] = set()
    pages: list[tuple[str, bytes]] = []
    with open(base / "manifest.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            body = gzip.decompress((base / row["file"]).read_bytes())
            url = row["url"] or f"https://no-url.example.com/{row['file']}"
            url = canonicalize(url).url
            if url in seen:  # a few pages share a URL: keep each page under its own
                url = canonicalize(f"{url}{'&' if '?' in url else '?'}copy={len(pages)}").url
            seen.add(url)
            pages.append((url, body))
    return pages


@pytest.fixture(scope="session")
def real_pages(shared_data: Path) -> list[tuple[str, bytes]]:
    return load_pages(shared_data)
