"""The store's archive tier on S3 (issue 26, ADR 029): page read latency and maintenance upload rate.

The same real pages (a random sample of ../shared/data/html: ``--quick`` 60, else 150) are put
into two stores and moved to the archive tier by one maintenance pass (every tier age zero):
one keeps its archive segments local, the other uploads them to a real S3 server (versitygw on
loopback, ``crawlstream.devtools.locals3``). Reported: the pass's wall time for each, the time
and bytes of the uploads alone (MB/s), and single-page read latency from each store reopened
(every page in random order, twice: the first round pays one HEAD per segment object as its
handle opens, the second is one ranged GET per page); and the upload rate of full-size (16 MiB)
segment files, since a sample this small makes one archive segment.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import latency_ms, main

SAMPLE = {True: 60, False: 150}


def _pages(quick: bool) -> list[tuple[str, bytes]]:
    from bench.bench_store import _load

    pages = [(url, body) for url, _, body in _load(False)]
    return random.Random(1).sample(pages, SAMPLE[quick])


def _reads(store: Any, urls: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for round_name in ("first_round", "second_round"):
        order = random.Random(round_name).sample(urls, len(urls))
        samples = []
        for url in order:
            t0 = time.perf_counter()
            store.get(url)
            samples.append(time.perf_counter() - t0)
        out[round_name] = latency_ms(samples)
    return out


def run(quick: bool) -> dict[str, Any]:
    from crawlstream.devtools.locals3 import LocalS3
    from crawlstream.objectstore import open_objects, parse_location
    from crawlstream.settings import load
    from crawlstream.store import ContentStore
    from crawlstream.store._segments import Segments

    pages = _pages(quick)
    urls = [u for u, _ in pages]
    uploads = {"s": 0.0, "bytes": 0, "objects": 0}
    plain_upload = Segments.upload

    def timed_upload(self: Segments, name: str) -> None:
        size = self.path(name).stat().st_size
        t0 = time.perf_counter()
        plain_upload(self, name)
        uploads["s"] += time.perf_counter() - t0
        uploads["bytes"] += size
        uploads["objects"] += 1

    Segments.upload = timed_upload  # type: ignore[method-assign]
    out: dict[str, Any] = {"pages": len(pages), "raw_mb": round(sum(len(b) for _, b in pages) / 1e6, 2)}
    with tempfile.TemporaryDirectory() as tmp, LocalS3(buckets=("bench",)) as server:
        archive = open_objects(parse_location("s3://bench/archive"), load(server.env).s3)
        for kind, target in (("local", None), ("s3", archive)):
            root = Path(tmp) / kind
            with ContentStore(root, archive=target) as store:
                for i, (url, body) in enumerate(pages):
                    store.put(url, body, fetched_at_ms=1_600_000_000_000 + i)
                t0 = time.perf_counter()
                store.maintain(ages_zero=True)
                pass_s = time.perf_counter() - t0
            with ContentStore(root, archive=target) as store:
                out[kind] = {"pass_s": round(pass_s, 2), "reads": _reads(store, urls)}
        out["s3"]["uploads"] = {
            "objects": uploads["objects"],
            "mb": round(uploads["bytes"] / 1e6, 3),
            "s": round(uploads["s"], 3),
            "mb_per_s": round(uploads["bytes"] / 1e6 / max(uploads["s"], 1e-9), 1),
        }
        out["s3"]["requests"] = dict(archive.requests)
        out["s3"]["bulk_uploads"] = _bulk_uploads(archive, Path(tmp))
    return out


def _bulk_uploads(archive: Any, tmp: Path, count: int = 4, size: int = 16 << 20) -> dict[str, float]:
    """The upload path of a maintenance batch (``ObjectStore.upload`` of a finished segment file)
    at a full archive segment's size: ``count`` incompressible files of ``size`` bytes."""
    path = tmp / "segment.bin"
    path.write_bytes(random.Random(2).randbytes(size))
    t0 = time.perf_counter()
    for i in range(count):
        archive.upload(f"bulk/{i}.seg", path)
    elapsed = time.perf_counter() - t0
    return {"objects": count, "mb_each": size / 1e6, "s": round(elapsed, 3),
            "mb_per_s": round(count * size / 1e6 / elapsed, 1)}


if __name__ == "__main__":
    main(run)
