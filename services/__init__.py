"""Service wiring, one package per ``crawlstream service <name>``.

Each ``crawlstream.services.<package>`` has a ``main.py`` with ``run(settings) -> int`` that
loads nothing itself: it builds lib objects with ``from_settings``, runs the loop from
``crawlstream.runtime`` and owns signals and shutdown. The names are a fixed contract
(operators and manifests use them).
"""

from __future__ import annotations

from typing import Final

__all__ = ["SERVICE_NAMES", "package_for"]

SERVICE_NAMES: Final = (
    "deduper",
    "scheduler",
    "fetcher",
    "link-extractor",
    "bucket-compressor",
    "parquet-sink",
    "index-compactor",
    "query-api",
)


def package_for(name: str) -> str:
    """``link-extractor`` -> ``crawlstream.services.link_extractor``."""
    return "crawlstream.services." + name.replace("-", "_")
