"""``store stats``: counts and sizes, live and dead segment bytes, the on-disk ratio's denominator.

Live bytes are estimates: a group record counts its live body members' share (member sizes
from the group headers alone, learned once and cached by the maintenance engine). Counts are
aggregates the index database computes over a snapshot: no entry is held in memory.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from crawlstream.store._dicts import DictionaryStore
from crawlstream.store._index import UrlIndex
from crawlstream.store._model import TIERS
from crawlstream.store._quarantine import Quarantine
from crawlstream.store._recovery import quarantined_urls
from crawlstream.store._reports import StoreStats
from crawlstream.store._segments import Segments
from crawlstream.store._tiering import Tiering

__all__ = ["collect_stats"]


def _tier_row() -> dict[str, int]:
    # raw_bytes: the live pages' raw sizes (per URL, as StoreStats.raw_bytes): raw_bytes / live_bytes
    # is the tier's compression ratio (crawlstream_store_tier_ratio)
    return {"urls": 0, "records": 0, "segments": 0, "bytes": 0, "live_bytes": 0, "raw_bytes": 0}


def collect_stats(
    root: Path,
    *,
    segments: Segments,
    dicts: DictionaryStore,
    index: UrlIndex,
    quarantine: Quarantine,
    tiering: Tiering,
    lock: threading.RLock,
    now_ms: int | None = None,
) -> StoreStats:
    """Aggregates of a snapshot of the index (read without the store lock) and the files' sizes."""
    with lock:
        snapshot = index.snapshot()
        quarantined = quarantined_urls(index, quarantine)
    with snapshot:
        usage = tiering.usage(snapshot, learn=1 << 62)
        totals = snapshot.tier_totals()
        bodies = snapshot.distinct_bodies()
        uses = snapshot.dict_uses()
    by_tier: dict[str, dict[str, int]] = {t: _tier_row() for t in TIERS}
    for tier, (urls, raw, records) in totals.items():
        row = by_tier.setdefault(tier, _tier_row())
        row["urls"], row["raw_bytes"], row["records"] = urls, raw, records
    with lock:
        seg_bytes = live_bytes = 0
        seg_files = segments.local_files()
        for name, size in sorted(segments.sizes().items()):  # archive objects included
            seg_bytes += size
            live = min(size, int(usage.get(name, 0)))
            live_bytes += live
            tier_stats = by_tier.setdefault(name.split("/", 1)[0], _tier_row())
            tier_stats["segments"] += 1
            tier_stats["bytes"] += size
            tier_stats["live_bytes"] += live
        index_files = index.checkpoint()
        index_bytes = sum(p.stat().st_size for p in index_files if p.exists())
        shared_memory = index.path.with_name(index.path.name + "-shm")  # gone with the last connection
        counted = {*index_files, *seg_files, shared_memory}
        other = sum(
            p.stat().st_size
            for p in root.rglob("*")
            if p.is_file() and p not in counted and p.parent != dicts.directory
        )
        current = {i.dict_id for i in dicts.current().values()}
        now = int(time.time() * 1000) if now_ms is None else now_ms
        versions = [
            {
                "id": info.dict_id,
                "domain": info.domain,
                "generation": info.generation,
                "current": info.dict_id in current,
                "records": uses.get(info.dict_id, 0),
                "size_bytes": info.size_bytes,
                "samples": info.samples,
                "pool": info.pool,
                "age_s": max(0, now - info.created_ms) // 1000,
            }
            for info in dicts.infos()
        ]
        return StoreStats(
            urls=sum(n for n, _, _ in totals.values()),
            bodies=bodies,
            raw_bytes=sum(raw for _, raw, _ in totals.values()),
            segment_bytes=seg_bytes,
            dict_bytes=dicts.stored_bytes(),
            index_bytes=index_bytes,
            dictionaries=len(dicts.infos()),
            quarantined_regions=len(quarantine.regions()),
            by_tier=by_tier,
            live_bytes=live_bytes,
            dead_bytes=seg_bytes - live_bytes,
            other_bytes=other,
            quarantined_urls=quarantined,
            dictionary_versions=versions,
        )
