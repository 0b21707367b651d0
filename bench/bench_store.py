"""Content store vs the seed's buckets, on the real pages of ../shared/data/html.

Side by side in one run, on the same-site cluster (260 booksamillion pages) and on the
whole mixed set (957 pages): (a) gzip-6 per page, (b) the seed's design: one tar per domain
compressed with zstd-19, a read decompresses the bucket, (c) the whole set as one zstd-19
stream (no random access: the ratio ceiling), (d) crawlstream.store (hot puts, then
recompression into the cold tier with trained dictionaries). Ratio = raw bytes / every byte
stored (dictionaries and index included). Reads: p50/p99 of single-record reads, warm
(same process, files cached) and cold (a fresh process, page cache dropped with
POSIX_FADV_DONTNEED on every file before each read); warm reads also in CPU time of the
reading thread (``read_warm_cpu``, and ``read_cold_fresh_process_cpu``), which a loaded machine
inflates far less than wall time. ``read_floor_page_alone_cpu`` is the same run's floor for
(d): the sampled pages each alone in a zstd-19 frame with the same dictionary, decompress +
hash only (no grouping, no store overhead).
Memory: peak RSS growth of a forked child during the write phase.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import multiprocessing as mp
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xxhash
import zstandard as zstd

from bench._harness import REPO, drop_page_cache, latency_ms, main, shared_data

READS = 300


def _load(quick: bool) -> list[tuple[str, str, bytes]]:
    from crawlstream.urls import canonicalize

    base = shared_data() / "html"
    out: list[tuple[str, str, bytes]] = []
    seen: set[str] = set()
    with open(base / "manifest.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            url = canonicalize(row["url"] or f"https://no-url.example.com/{row['file']}").url
            if url in seen:
                url = canonicalize(f"{url}{'&' if '?' in url else '?'}copy={len(out)}").url
            seen.add(url)
            out.append((url, row["site_key"], gzip.decompress((base / row["file"]).read_bytes())))
    return out




def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def _in_child(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run the write phase in a forked child; report its result and peak RSS growth."""
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()

    def target() -> None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = fn()
        result["peak_rss_growth_mb"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1)
        queue.put(result)

    proc = ctx.Process(target=target)
    proc.start()
    result = queue.get(timeout=1800)
    proc.join()
    return dict(result)


# ----------------------------------------------------------------------------- (a) gzip-6


def _gzip(pages: list[tuple[str, str, bytes]], root: Path) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        t = time.perf_counter()
        index: dict[str, tuple[int, int]] = {}
        with open(root / "pages.gz", "wb") as fh:
            for url, _, body in pages:
                blob = gzip.compress(body, 6, mtime=0)
                index[url] = (fh.tell(), len(blob))
                fh.write(blob)
        (root / "index.json").write_text(json.dumps(index))
        return {"write_s": time.perf_counter() - t}

    res = _in_child(write)
    index = json.loads((root / "index.json").read_text())

    def read(url: str) -> bytes:
        off, length = index[url]
        with open(root / "pages.gz", "rb") as fh:
            fh.seek(off)
            return gzip.decompress(fh.read(length))

    return res | {"read": read, "files": _files(root)}


# ----------------------------------------------------------------------------- (b) seed buckets


def _buckets(pages: list[tuple[str, str, bytes]], root: Path) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        t = time.perf_counter()
        by: dict[str, list[tuple[str, bytes]]] = defaultdict(list)
        for url, site, body in pages:
            by[site].append((url, body))
        where: dict[str, list[Any]] = {}
        for n, (_site, items) in enumerate(sorted(by.items())):
            bio = io.BytesIO()
            with tarfile.open(fileobj=bio, mode="w") as tf:
                for i, (url, body) in enumerate(items):
                    info = tarfile.TarInfo(f"{i}.html")
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
                    where[url] = [f"{n}.tar.zst", f"{i}.html"]
            (root / f"{n}.tar.zst").write_bytes(zstd.ZstdCompressor(level=19).compress(bio.getvalue()))
        (root / "index.json").write_text(json.dumps(where))
        return {"write_s": time.perf_counter() - t}

    res = _in_child(write)
    where = json.loads((root / "index.json").read_text())
    cache: dict[str, bytes] = {}

    def read_tar(tar: bytes, member: str) -> bytes:
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            f = tf.extractfile(member)
            assert f is not None
            return f.read()

    def read(url: str) -> bytes:  # first access: decompress the whole bucket
        bucket, member = where[url]
        tar = zstd.ZstdDecompressor().decompress((root / bucket).read_bytes())
        return read_tar(tar, member)

    def read_cached(url: str) -> bytes:  # the seed's bucket cache: decompressed tar kept in memory
        bucket, member = where[url]
        if bucket not in cache:
            cache[bucket] = zstd.ZstdDecompressor().decompress((root / bucket).read_bytes())
        return read_tar(cache[bucket], member)

    return res | {"read": read, "read_cached": read_cached, "files": _files(root)}


# ----------------------------------------------------------------------------- (c) one stream


def _stream(pages: list[tuple[str, str, bytes]], root: Path) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        t = time.perf_counter()
        (root / "all.zst").write_bytes(zstd.ZstdCompressor(level=19).compress(b"".join(b for _, _, b in pages)))
        return {"write_s": time.perf_counter() - t}

    return _in_child(write) | {"files": _files(root)}


# ----------------------------------------------------------------------------- (d) this store


def _store(pages: list[tuple[str, str, bytes]], root: Path) -> dict[str, Any]:
    from crawlstream.store import ContentStore

    def write() -> dict[str, Any]:
        t = time.perf_counter()
        with ContentStore(root) as store:
            for url, _, body in pages:
                store.put(url, body, content_type="text/html", fetched_at_ms=0)
            t_hot = time.perf_counter() - t
            hot = store.stats()
            t1 = time.perf_counter()
            report = store.recompress(older_than_s=0, now_ms=1)
            t_cold = time.perf_counter() - t1
            cold = store.stats()
        return {
            "write_s": t_hot,
            "recompress_s": t_cold,
            "hot_ratio": round(hot.ratio, 3),
            "dictionaries": report.dictionaries_trained,
            "dict_bytes": cold.dict_bytes,
            "index_bytes": cold.index_bytes,
            "segment_bytes": cold.segment_bytes,
        }

    res = _in_child(write)
    store = ContentStore(root)

    def read(url: str) -> bytes:
        return store.get(url)

    def floor(sample: list[str], bodies: dict[str, bytes]) -> dict[str, float]:
        """Same-run floor of a read: each sampled page alone in its own zstd-19 frame with the
        dictionary the store gave it, timed (thread CPU) as decompress + content hash only."""
        frames: dict[str, tuple[int, bytes]] = {}
        for url in set(sample):
            entry = store.entry(url)
            assert entry is not None
            dict_id = entry.location.dict_id
            frames[url] = (dict_id, store.dicts.compressor(19, dict_id).compress(bodies[url]))
        cpu = []
        for url in sample:
            dict_id, frame = frames[url]
            c = time.thread_time()
            xxhash.xxh3_128_digest(store.dicts.decompressor(dict_id).decompress(frame))
            cpu.append(time.thread_time() - c)
        return latency_ms(cpu)

    return res | {"read": read, "floor": floor, "files": _files(root), "close": store.close}


def _cold_reads_child(root: str, urls_file: str) -> None:
    """Entry of the fresh process: open the store, then time reads with the page cache dropped."""
    from crawlstream.store import ContentStore

    urls = json.loads(Path(urls_file).read_text())
    t = time.perf_counter()
    store = ContentStore(Path(root))
    open_s = time.perf_counter() - t
    files = _files(Path(root))
    samples, cpu = [], []
    for url in urls:
        drop_page_cache(files)
        t, c = time.perf_counter(), time.thread_time()
        store.get(url)
        samples.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    sys.stdout.write(json.dumps({"open_s": open_s, "samples": samples, "cpu": cpu}))


def _measure(
    name: str, built: dict[str, Any], pages: list[tuple[str, str, bytes]], raw: int, sample: list[str]
) -> dict[str, Any]:
    stored = sum(p.stat().st_size for p in built["files"])
    out: dict[str, Any] = {
        "ratio": round(raw / stored, 3),
        "stored_bytes": stored,
        "write_mb_s": round(raw / 1e6 / built["write_s"], 2),
        "peak_rss_growth_mb": built["peak_rss_growth_mb"],
    }
    for key in ("recompress_s", "hot_ratio", "dictionaries", "dict_bytes", "index_bytes", "segment_bytes"):
        if key in built:
            out[key] = built[key]
    if "recompress_s" in built:
        out["recompress_mb_s"] = round(raw / 1e6 / built["recompress_s"], 2)
    bodies = {u: b for u, _, b in pages}
    read = built.get("read")
    if read is not None:
        for url in sample[:20]:
            assert read(url) == bodies[url], f"{name}: {url} did not round-trip"
        warm, warm_cpu = [], []
        for url in sample:
            t, c = time.perf_counter(), time.thread_time()
            read(url)
            warm.append(time.perf_counter() - t)
            warm_cpu.append(time.thread_time() - c)
        out["read_warm"] = latency_ms(warm)
        out["read_warm_cpu"] = latency_ms(warm_cpu)
        if "floor" in built:
            out["read_floor_page_alone_cpu"] = built["floor"](sample, bodies)
        cold = []
        for url in sample[: max(20, len(sample) // 5)]:
            drop_page_cache(built["files"])
            t = time.perf_counter()
            read(url)
            cold.append(time.perf_counter() - t)
        out["read_cold_cache_dropped"] = latency_ms(cold)
    if "read_cached" in built:
        for url in sample:
            built["read_cached"](url)
        cached = []
        for url in sample:
            t = time.perf_counter()
            built["read_cached"](url)
            cached.append(time.perf_counter() - t)
        out["read_bucket_cache_hit"] = latency_ms(cached)
    return out


def _run_set(label: str, pages: list[tuple[str, str, bytes]]) -> dict[str, Any]:
    raw = sum(len(b) for _, _, b in pages)
    rng = random.Random(5)
    sample = [rng.choice(pages)[0] for _ in range(READS)]
    result: dict[str, Any] = {"pages": len(pages), "raw_bytes": raw}
    with tempfile.TemporaryDirectory(prefix=f"bench-store-{label}-") as tmp:
        for name, build in (
            ("a_gzip6_per_page", _gzip),
            ("b_seed_tar_zstd19_per_domain", _buckets),
            ("c_one_zstd19_stream", _stream),
            ("d_crawlstream_store", _store),
        ):
            root = Path(tmp) / name
            root.mkdir()
            built = build(pages, root)
            result[name] = _measure(name, built, pages, raw, sample)
            if name == "d_crawlstream_store":
                built["close"]()
                urls_file = Path(tmp) / "urls.json"
                urls_file.write_text(json.dumps(sample[:100]))
                proc = subprocess.run(
                    [sys.executable, "-m", "bench.bench_store", "--cold-read", str(root), str(urls_file)],
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                    timeout=600,
                    check=True,
                )
                cold = json.loads(proc.stdout)
                result[name]["read_cold_fresh_process"] = latency_ms(cold["samples"])
                result[name]["read_cold_fresh_process_cpu"] = latency_ms(cold["cpu"])
                result[name]["open_s"] = round(cold["open_s"], 3)
    d, b, c = result["d_crawlstream_store"], result["b_seed_tar_zstd19_per_domain"], result["c_one_zstd19_stream"]
    result["d_vs_b_ratio"] = round(d["ratio"] / b["ratio"], 3)
    result["d_vs_c_ratio"] = round(d["ratio"] / c["ratio"], 3)
    return result


def run(quick: bool) -> dict[str, Any]:
    pages = _load(quick)
    cluster = [p for p in pages if p[1] == "booksamillion.com"]
    out: dict[str, Any] = {"same_site_cluster": _run_set("cluster", cluster)}
    if not quick:
        out["mixed_set"] = _run_set("mixed", pages)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cold-read"]:
        _cold_reads_child(sys.argv[2], sys.argv[3])
    else:
        main(run)
