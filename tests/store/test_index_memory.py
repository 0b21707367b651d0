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
import tracemalloc
from pathlib import Path

from crawlstream.store import ContentStore, StoreConfig

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
