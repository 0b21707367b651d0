"""A synthetic web on loopback shared by the fetch tests (started once per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crawlstream.devtools.demoweb import DemoWeb


@pytest.fixture(scope="module")
def demo_web() -> Iterator[DemoWeb]:
    web = DemoWeb(20, pages_per_domain=6, seed=7, slow_s=2.0, huge_bytes=1024 * 1024, bomb_bytes=32 * 1024 * 1024)
    with web:
        yield web
