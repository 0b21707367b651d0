"""The store's dictionaries and zstd contexts stay within ``store.codec_cache_bytes`` (issue 28).

The 2-hour soak's bucket compressor grew from 214 MB to 417 MB of RSS: every domain that got
its own dictionary left a compressor (~1.3 MB of tables) and a decompressor in memory for
good. Reproduced here with real dictionaries trained on real pages, in a fresh process each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import zstandard as zstd

from crawlstream.store._codec_cache import CodecCache
from crawlstream.store._dicts import DictionaryStore

MIB = 1024 * 1024

_SCRIPT = r"""
import csv, gzip, json, struct, sys
from pathlib import Path
import psutil
import zstandard as zstd
from crawlstream.store._codec_cache import CodecCache
from crawlstream.store._dicts import DictionaryStore

shared, directory, budget, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = list(csv.DictReader((shared / "html" / "manifest.csv").open(encoding="utf-8")))[:40]
bodies = [gzip.decompress((shared / "html" / r["file"]).read_bytes()) if r["file"].endswith(".gz")
          else (shared / "html" / r["file"]).read_bytes() for r in rows]
trained = zstd.train_dictionary(128 * 1024, bodies).as_bytes()
cache = CodecCache(budget)
store = DictionaryStore(directory, fsync=False, cache=cache)
ids = []
for i in range(count):  # one dictionary per domain: the trained one under a dictionary id of its own
    raw = bytearray(trained)
    struct.pack_into("<I", raw, 4, 40_000 + i)
    ids.append(store.add(f"d{i}.example", bytes(raw), samples=len(bodies), created_ms=0))

def rss():
    return psutil.Process().memory_info().rss

before = rss()
for i, dict_id in enumerate(ids):  # a put and a read of each domain, as a crawl's compressor does
    body = bodies[i % len(bodies)]
    assert store.decompressor(dict_id).decompress(store.compressor(3, dict_id).compress(body)) == body
for dict_id in ids[:5]:  # a domain whose contexts were dropped is rebuilt when it comes back
    assert store.decompressor(dict_id).decompress(store.compressor(3, dict_id).compress(bodies[0])) == bodies[0]
print(json.dumps({"growth": rss() - before, "cache_bytes": cache.bytes, "evictions": cache.evictions}))
"""


def _run(shared_data: Path, directory: Path, budget: int, count: int) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(shared_data), str(directory), str(budget), str(count)],
        capture_output=True, text=True, timeout=300, check=True,
    )
    return json.loads(out.stdout)


def test_contexts_of_many_domains_stay_within_the_budget_and_grow_without_one(
    shared_data: Path, tmp_path: Path
) -> None:
    bounded = _run(shared_data, tmp_path / "bounded", 16 * MIB, 100)
    unbounded = _run(shared_data, tmp_path / "unbounded", 4096 * MIB, 100)  # what the store did before
    assert unbounded["evictions"] == 0 and unbounded["growth"] > 100 * MIB  # ~1.45 MB per domain
    assert bounded["cache_bytes"] <= 16 * MIB and bounded["evictions"] > 0
    assert bounded["growth"] < 48 * MIB


def test_the_least_recently_used_go_first_never_the_one_just_added() -> None:
    cache = CodecCache(100)
    for key in "abc":
        cache.put(key, key.upper(), 40)  # c pushes a out
    assert len(cache) == 2 and cache.bytes == 80 and cache.evictions == 1
    assert cache.get("b", lambda: ("rebuilt", 40)) == "B"  # b is now the most recent
    assert cache.get("a", lambda: ("A2", 40)) == "A2"  # rebuilt; c goes
    assert cache.get("c", lambda: ("C2", 40)) == "C2"
    cache.put("huge", "H", 500)  # over the budget alone: kept, everything else goes
    assert len(cache) == 1 and cache.bytes == 500
    cache.discard(lambda key: key == "huge")
    assert len(cache) == 0 and cache.bytes == 0


def test_a_closed_store_takes_its_entries_out_of_a_shared_cache(tmp_path: Path) -> None:
    """A sharded store's cache outlives a shard it releases: that shard's contexts go with it."""
    samples = [f"<html><body><p>page {i} of a site, {'text ' * (i % 7)}</p></body></html>".encode() for i in range(300)]
    trained = zstd.train_dictionary(4096, samples).as_bytes()
    cache = CodecCache(64 * MIB)
    a = DictionaryStore(tmp_path / "a", fsync=False, cache=cache)
    b = DictionaryStore(tmp_path / "b", fsync=False, cache=cache)
    for store in (a, b):
        dict_id = store.add("d.example", trained, samples=len(samples), created_ms=0)
        store.compressor(3, dict_id).compress(samples[0])
    held = len(cache)
    a.close()
    assert 0 < len(cache) < held
    b.close()
    assert len(cache) == 0 and cache.bytes == 0
