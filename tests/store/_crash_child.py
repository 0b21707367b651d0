"""Child process for the crash tests: writes to a store until SIGKILLed.

``append ROOT SIDE``: put pages forever; after each put returns, append its URL to SIDE.
``recompress ROOT SIDE N``: put N old pages (acknowledging each), write "RECOMPRESS" to SIDE,
then recompress them into the cold tier (and again into archive), over and over.
``maintain ROOT SIDE N``: put N pages, write "MAINTAIN", then run bounded maintenance passes
(ages zero: tiering, then compaction after deleting every third page) with puts and deletes
between them, over and over; deletes are acknowledged as "-URL" lines.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from crawlstream.devtools.demoweb._render import _padding
from crawlstream.store import ContentStore, StoreConfig


def body_for(url: str) -> bytes:
    """A page's body, the same in the child and the test. site3's pages are random words, whose
    archive groups are written in bzip2 (ADR 026): kills land in both kinds of group."""
    if "//site3." in url:
        return f"<html>{_padding(random.Random(url), (9_000, 9_000), 0)}</html>".encode()
    seed = sum(url.encode()) % 97
    return (
        f"<html><title>{url}</title><body>".encode()
        + bytes(range(seed, seed + 90)) * 40
        + url.encode() * 30
        + b"</body></html>"
    )


def main() -> None:
    mode, root, side = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if mode == "maintain":  # opens the store itself, with maintenance settings (one writer: one open)
        maintain(root, fd, int(sys.argv[4]))
    config = StoreConfig(segment_bytes=256 * 1024, dict_min_samples=8, global_dict_min_samples=16)
    store = ContentStore(root, config=config)
    if mode == "append":
        i = 0
        while True:
            url = f"https://site{i % 7}.example.com/page/{i}"
            store.put(url, body_for(url), fetched_at_ms=i)
            os.write(fd, (url + "\n").encode())  # acknowledged: put() returned
            i += 1
    count = int(sys.argv[4])
    for i in range(count):
        url = f"https://site{i % 5}.example.com/page/{i}"
        store.put(url, body_for(url), fetched_at_ms=i)
        os.write(fd, (url + "\n").encode())
    os.write(fd, b"RECOMPRESS\n")
    while True:
        store.recompress(older_than_s=0, tier="cold", now_ms=10**12)
        store.recompress(older_than_s=0, tier="archive", now_ms=10**12)
        for i in range(count, count + 20):  # new hot records so the next round has work
            url = f"https://site{i % 5}.example.com/page/{i}"
            store.put(url, body_for(url), fetched_at_ms=i)
            os.write(fd, (url + "\n").encode())
        count += 20


def maintain(root: Path, fd: int, count: int) -> None:
    config = StoreConfig(
        segment_bytes=64 * 1024,
        dict_min_samples=8,
        global_dict_min_samples=16,
        maintenance_budget_bytes=48 * 1024,
        compact_dead_ratio=0.3,
        cold_level=9,
        archive_level=9,
    )
    store = ContentStore(root, config=config)
    for i in range(count):
        url = f"https://site{i % 5}.example.com/page/{i}"
        store.put(url, body_for(url), fetched_at_ms=i)
        os.write(fd, (url + "\n").encode())
    os.write(fd, b"MAINTAIN\n")
    while True:
        store.maintain(ages_zero=True)
        for i in range(count, count + 30):
            url = f"https://site{i % 5}.example.com/page/{i}"
            store.put(url, body_for(url), fetched_at_ms=i)
            os.write(fd, (url + "\n").encode())
            if i % 3 == 0:
                gone = f"https://site{(i - 20) % 5}.example.com/page/{i - 20}"
                # "?" first: a kill between the delete and its "-" line leaves the URL in doubt
                os.write(fd, ("?" + gone + "\n").encode())
                if store.delete(gone):
                    os.write(fd, ("-" + gone + "\n").encode())
        count += 30


if __name__ == "__main__":
    main()
