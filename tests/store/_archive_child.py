"""Child process for the archive-tier crash test: a store whose archive segments are S3 objects,
put and maintained (tiering into archive with uploads, deletes, compaction) until SIGKILLed.

``ROOT SIDE S3_PREFIX``: put 60 pages (each acknowledged as a line of SIDE), write "MAINTAIN",
then over and over: maintenance with ages zero (uploads archive segments), new puts, deletes
of every fourth page (announced as "?URL", acknowledged as "-URL"), maintenance again (compaction removes objects).
``ROOT SIDE S3_PREFIX upload|offload``: put 60 pages, then SIGKILL itself inside the first archive
batch right after its uploads (before the swap), or right after the swap (before the local copy
is removed): the two windows a kill at random rarely hits.
The S3 endpoint and credentials come from the environment (AWS_*).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from crawlstream.objectstore import open_objects, parse_location
from crawlstream.settings import load
from crawlstream.store import ContentStore, StoreConfig


def body_for(url: str) -> bytes:
    seed = sum(url.encode()) % 97
    return f"<html><title>{url}</title><body>".encode() + bytes(range(seed, seed + 90)) * 30 + url.encode() * 20


def main() -> None:
    root, side, prefix = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    archive = open_objects(parse_location(prefix), load(dict(os.environ)).s3)
    config = StoreConfig(segment_bytes=32 * 1024, dict_min_samples=8, global_dict_min_samples=16,
                         maintenance_budget_bytes=24 * 1024, compact_dead_ratio=0.3)
    store = ContentStore(root, config=config, archive=archive)
    count = 0

    def put(n: int) -> None:
        nonlocal count
        for i in range(count, count + n):
            url = f"https://site{i % 5}.example.com/page/{i}"
            store.put(url, body_for(url), fetched_at_ms=i)
            os.write(fd, (url + "\n").encode())
        count += n

    put(60)
    if len(sys.argv) > 4:
        die_at(sys.argv[4])
    os.write(fd, b"MAINTAIN\n")
    while True:
        store.maintain(ages_zero=True)
        put(20)
        for i in range(count - 40, count, 4):
            url = f"https://site{i % 5}.example.com/page/{i}"
            os.write(fd, ("?" + url + "\n").encode())  # a kill from here on: either outcome is right
            if store.delete(url):
                os.write(fd, ("-" + url + "\n").encode())
        store.maintain(ages_zero=True)


def die_at(window: str) -> None:
    """SIGKILL this process at ``window`` of the next archive batch."""
    from crawlstream.store._segments import Segments
    from crawlstream.store._tiering import Tiering

    def die(*_: Any, **__: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if window == "upload":
        Tiering._swap = die  # type: ignore[method-assign]
    else:
        Segments.offload = die  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
