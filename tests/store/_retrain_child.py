"""Child process for the retraining crash tests: grows and drifts one domain until SIGKILLed.

``python _retrain_child.py ROOT SIDE SHARED_DATA``: puts real pages (the page's index in the
shared set is the URL's first path segment), acknowledging each put as a line in SIDE after it
returns; after the first dictionary is trained writes "RETRAIN", then adds pages (product pages,
then more and more articles of other sites) and runs maintenance passes over and over. The
growth factor is 1.5, so nearly every pass retrains, recompresses and drops a dictionary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from conftest import load_pages

from crawlstream.store import ContentStore, StoreConfig

OPTS = StoreConfig(
    warm_level=3,
    cold_level=6,
    archive_level=6,
    dict_min_samples=8,
    global_dict_min_samples=8,
    maintenance_budget_bytes=512 * 1024,
    segment_bytes=512 * 1024,
    compact_dead_ratio=0.3,
    dict_retrain_growth=1.5,
)


def url_for(index: int, n: int) -> str:
    return f"https://www.shopdrift.com/{index}/{n}"


def main() -> None:
    root, side, shared = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    pages = load_pages(shared)
    products = [i for i, (url, _) in enumerate(pages) if "booksamillion.com" in url]
    others = [i for i, (url, body) in enumerate(pages) if "booksamillion.com" not in url and len(body) < 200_000]
    fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    store = ContentStore(root, config=OPTS)
    n = 0

    def put(index: int) -> None:
        nonlocal n
        url = url_for(index, n)
        store.put(url, pages[index][1], fetched_at_ms=n)
        os.write(fd, (url + "\n").encode())  # acknowledged: put() returned
        n += 1

    for index in products[:16]:
        put(index)
    store.maintain(ages_zero=True)
    os.write(fd, b"RETRAIN\n")
    rounds = 0
    while True:
        share = min(rounds, 6)  # of 8 pages per round, this many are articles: the domain drifts
        for k in range(8):
            pool = others if k < share else products
            put(pool[(n * 7 + k) % len(pool)])
        store.maintain(ages_zero=True)
        rounds += 1


if __name__ == "__main__":
    main()
