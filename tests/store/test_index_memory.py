"""A content store's memory must not grow with the pages it holds (issue 28, ADR 036).

The 2-hour soak of session 18 kept the crawl going at ~150 pages/s: every service's RSS stayed
flat except the bucket compressors', which rose ~1.3 KB for every page they stored, all run
long. The url index lived in memory as Python objects (an ``Entry`` with its strings, a
``Location``, a tag set, and a slot in four dicts per URL), ~1.2 KB a page: a member that had
stored 10M pages needed ~13 GB for its index alone. ADR 036 moved it into SQLite (its page
cache is bounded by ``store.index_cache_bytes`` and allocated outside the Python heap).
Measured here at small scale: the Python heap a store holds after 1,000 puts and after 6,000
more, per page.
"""

from __future__ import annotations

import gc
import itertools
import random
import tracemalloc
from pathlib import Path

import psutil

from crawlstream.store import ContentStore, ShardedStore, StoreConfig
from crawlstream.urls import domain_checksum

# What a bounded index may still cost per page: nothing in memory should be per page at all,
# and this leaves room for caches that fill as the store grows but have a ceiling.
BOUND_BYTES_PER_PAGE = 150


def _put(store: ContentStore, i: int) -> None:
    domain = f"site{i % 200}.example"
    body = f"<html><title>Post {i}</title><body>{'lorem ipsum ' * 40}{i}</body></html>".encode()
    store.put(f"http://www.{domain}/blog/post-{i}.html", body, content_type="text/html",
              title=f"Post number {i} on a synthetic site", status=200)


def test_the_heap_a_store_holds_does_not_grow_with_the_pages_it_stores(tmp_path: Path) -> None:
    store = ContentStore(tmp_path / "store", config=StoreConfig(fsync="never"))
    tracemalloc.start()
    try:
        for i in range(1_000):
            _put(store, i)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1_000, 7_000):
            _put(store, i)
        gc.collect()
        per_page = (tracemalloc.get_traced_memory()[0] - before) / 6_000
    finally:
        tracemalloc.stop()
        store.close()
    assert per_page < BOUND_BYTES_PER_PAGE, f"the store's heap grew {per_page:.0f} B per stored page"


# What one open, warm shard may add to a member: its index's page cache (64 KiB of pages) and the
# store's own objects. At an eighth of the setting each (512 KiB) a shard held ~0.76 MB warm: a
# member's 64 held ~49 MB, freed by every close and filled again for ~20 minutes, the sawtooth of
# the bucket compressors' RSS in session 27's soak (ADR 034 "Session 27").
BOUND_RSS_PER_WARM_SHARD = 200_000  # 0.04 MB measured at 64 KiB, 0.54 MB at 512 KiB
SHARDS_WARMED = 16
PAGES_PER_SHARD = 2_500


def test_a_members_shards_warm_their_index_caches_within_a_bound(tmp_path: Path) -> None:
    domains: dict[int, str] = {}
    for i in itertools.count():
        domain = f"site{i}.example"
        domains.setdefault(domain_checksum(domain), domain)
        if len(domains) == SHARDS_WARMED:
            break
    urls = [f"http://www.{domain}/blog/{n * 7919 % 100_003}/post-{n}.html"
            for domain in domains.values() for n in range(PAGES_PER_SHARD)]
    with ShardedStore(tmp_path / "store", config=StoreConfig(fsync="never")) as store:
        for n, url in enumerate(urls):
            store.put(url, f"<html><body>{'lorem ipsum ' * 20}{n}</body></html>".encode(), content_type="text/html",
                      title=f"Post {n}", status=200)
            if n % 100 == 99:
                store.sync()
    gc.collect()
    with ShardedStore(tmp_path / "store", config=StoreConfig(fsync="never")) as store:
        process = psutil.Process()
        before = process.memory_info().rss
        rng = random.Random(3)
        for _ in range(10 * SHARDS_WARMED * 250):  # every shard looked up ~2,500 times, at random
            assert store.entry(rng.choice(urls)) is not None
        per_shard = (process.memory_info().rss - before) / SHARDS_WARMED
    assert per_shard < BOUND_RSS_PER_WARM_SHARD, f"a warm shard added {per_shard / 1e6:.2f} MB of RSS"
