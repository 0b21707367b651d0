"""The content store's last known numbers, kept for the status page of a process that does not
hold the store.

Only a process that opens the store can count its URLs and raw bytes (``ContentStore.stats()``
walks its index), and a store has one writer: the API beside a crawl sizes the store's files
and nothing more. So each process that computes the store's stats saves them in
``<data_dir>/status/store_stats.json`` (atomically, with the time): the query API when it holds
the store (``api.serve_content``, as ``crawlstream demo`` runs it), ``crawlstream store stats``
and ``crawlstream store maintain``. ``StatusCollector`` shows them, with their age, when it
sizes the files instead. A snapshot that cannot be written is logged, never an error: it only
feeds a page.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawlstream.durable import write_atomically
from crawlstream.errors import CrawlstreamError

if TYPE_CHECKING:
    from crawlstream.store import StoreStats

__all__ = ["STORE_STATS_FILE", "read_store_stats", "save_store_stats", "store_numbers"]

logger = logging.getLogger(__name__)

STORE_STATS_FILE = Path("status") / "store_stats.json"


def store_numbers(st: StoreStats) -> dict[str, Any]:
    """What the status page shows of ``ContentStore.stats()``."""
    return {
        "urls": st.urls,
        "raw_bytes": st.raw_bytes,
        "stored_bytes": st.stored_bytes,
        "ratio": round(st.ratio, 3),
        "bytes_by_tier": {t: int(v.get("bytes", 0)) for t, v in st.by_tier.items()},
        "quarantined_urls": len(st.quarantined_urls),
    }


def save_store_stats(data_dir: Path, st: StoreStats, *, now: float | None = None) -> dict[str, Any]:
    """Save ``st``'s numbers with ``saved_at_ms`` (``now``, default the wall clock); returns them."""
    saved = store_numbers(st) | {"saved_at_ms": int((time.time() if now is None else now) * 1000)}
    path = data_dir / STORE_STATS_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(saved).encode())
    except (OSError, CrawlstreamError) as exc:
        logger.warning("status: cannot save the store's stats to %s: %s", path, exc)
    return saved


def read_store_stats(data_dir: Path) -> dict[str, Any] | None:
    """The saved numbers, or None when none were saved. A damaged file raises (ValueError...)."""
    try:
        raw = (data_dir / STORE_STATS_FILE).read_bytes()
    except FileNotFoundError:
        return None
    saved = json.loads(raw)
    if not isinstance(saved, dict) or not isinstance(saved.get("saved_at_ms"), int):
        raise ValueError(f"{STORE_STATS_FILE}: not a store stats snapshot")
    return saved
