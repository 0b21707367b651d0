"""Lake + index benchmark: ingest rate, build rate, bytes per URL, lookup latency warm/cold.

Quick mode (default, also under ``make bench``): ~1M generated URLs over 30 datasets plus
the real URL lists of ../shared/data/urls (one dataset per file). Full mode (opt-in:
``CRAWLSTREAM_BENCH_INDEX_FULL=1`` or ``--full``): >= 10M generated URLs and a domain with
> 1M URLs in one dataset for the offset-1,000,000 page.

Baselines measured in the same run: the same rows as sorted zstd-19 text (bytes), a
Python dict (domain lookup), and binary search over the sorted strings (ADR 003).
"""

from __future__ import annotations

import bisect
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zstandard

from bench._harness import REPO, latency_ms, main, shared_data

N_DATASETS = 30


_WORDS = ("news", "blog", "item", "product", "2024", "video", "user", "tag", "wiki", "a", "story", "shop",
          "en", "category", "post", "view", "page", "search", "img", "docs")


def _domains(n: int, rnd: random.Random) -> list[str]:
    tlds = ["com"] * 12 + ["org", "net", "de", "co.uk", "io", "fr", "jp", "com.au", "info", "ru", "nl"]
    out = []
    for i in range(n):
        stem = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(4, 11)))
        out.append(f"{stem}{i}.{rnd.choice(tlds)}")
    return out


def zipf_domains(n_urls: int, rnd: random.Random) -> tuple[list[str], list[float]]:
    """The generator's domains and their Zipf weights (the first draws of ``rnd``)."""
    domains = _domains(max(1000, n_urls // 20), rnd)
    return domains, [1.0 / (i + 1) for i in range(len(domains))]


def generate(work: Path, n_urls: int, big_rows: int, seed: int = 11) -> tuple[list[Path], list[str], list[float]]:
    """One zstd text file of raw URLs per dataset; Zipf domain popularity shared by datasets."""
    rnd = random.Random(seed)
    domains, weights = zipf_domains(n_urls, rnd)
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    paths = []
    per = n_urls // N_DATASETS
    cctx = zstandard.ZstdCompressor(level=3)
    for ds in range(1, N_DATASETS + 1):
        picks = rnd.choices(domains, cum_weights=cum, k=per)
        lines = []
        for d in picks:
            host = "www." + d if rnd.random() < 0.7 else f"{rnd.choice(_WORDS)}.{d}"
            path = "/".join(rnd.choice(_WORDS) for _ in range(rnd.randint(1, 3)))
            q = f"?id={rnd.randrange(10**6)}" if rnd.random() < 0.4 else ""
            lines.append(f"https://{host}/{path}/{rnd.randrange(10**5)}{q}")
        if ds == 1:
            lines += [f"https://www.bigdomain.com/p/{i:08d}/{rnd.choice(_WORDS)}" for i in range(big_rows)]
        if ds % 10 == 0:
            lines += ["not a url", "http://", "javascript:void(0)"]
        p = work / f"gen-{ds:02d}.txt.zst"
        p.write_bytes(cctx.compress(("\n".join(lines) + "\n").encode()))
        paths.append(p)
    return paths, domains, weights


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _sorted_text_zstd19(root: Path) -> tuple[int, int]:
    """The same (dataset, url) rows as text: per dataset, sorted unique URLs; zstd -19."""
    import duckdb

    from crawlstream.lake import DERIVED_SQL

    glob = (root / "urls" / "**" / "*.parquet").as_posix()
    con = duckdb.connect()
    con.execute("SET threads=2")
    text_path = root.parent / "sorted-urls.txt"
    con.execute(
        "COPY (SELECT u FROM (SELECT DISTINCT dataset_id, "
        f"{DERIVED_SQL['url']} AS u "
        f"FROM read_parquet('{glob}', hive_partitioning=true)) ORDER BY dataset_id, u) "
        f"TO '{text_path.as_posix()}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\t')"
    )
    rows = con.execute(
        f"SELECT count(*) FROM (SELECT DISTINCT dataset_id, domain, scheme, host_prefix, port, path_query "
        f"FROM read_parquet('{glob}', hive_partitioning=true))"
    ).fetchone()[0]  # type: ignore[index]
    cctx = zstandard.ZstdCompressor(level=19, threads=2)
    size = 0
    with open(text_path, "rb") as src:
        for chunk in cctx.read_to_iter(src, read_size=1 << 22):
            size += len(chunk)
    text_path.unlink()
    return size, int(rows)


def _queries(idx: Any, domains: list[str], weights: list[float], n: int, rnd: random.Random) -> list[tuple[str, int]]:
    out = []
    for d in rnd.choices(domains, weights=weights, k=n * 2):
        ds = idx.datasets_for_domain(d)
        if ds:
            out.append((d, rnd.choice(ds).dataset_id))
        if len(out) >= n:
            break
    return out


def _warm_latency(root: Path, domains: list[str], weights: list[float], deep: tuple[str, int, int]) -> dict[str, Any]:
    from crawlstream.index import IndexReader

    rnd = random.Random(5)
    reader = IndexReader(root)
    res: dict[str, Any] = {}
    with reader.pin() as idx:
        queries = _queries(idx, domains, weights, 2000, rnd)
    for d, ds in queries[:300]:  # warm the caches the way steady traffic does
        with reader.pin() as idx:
            idx.datasets_for_domain(d)
            idx.urls(d, ds, 0, 100)
    samples = []
    for d, _ in queries:
        t = time.perf_counter()
        with reader.pin() as idx:
            idx.datasets_for_domain(d)
        samples.append(time.perf_counter() - t)
    res["datasets_for_domain"] = latency_ms(samples)
    samples = []
    for d, ds in queries:
        t = time.perf_counter()
        with reader.pin() as idx:
            idx.urls(d, ds, 0, 100)
        samples.append(time.perf_counter() - t)
    res["first_page_100"] = latency_ms(samples)
    domain, ds, offset = deep
    samples = []
    for i in range(300):
        off = offset + rnd.randrange(0, 40_000) if i % 2 else offset
        t = time.perf_counter()
        with reader.pin() as idx:
            page = idx.urls(domain, ds, off, 100)
        samples.append(time.perf_counter() - t)
        assert page is not None and len(page.items) == 100
    res[f"page_at_offset_{offset}"] = latency_ms(samples)
    samples = []
    for d, ds in queries[:300]:
        with reader.pin() as idx:
            page = idx.urls(d, ds, 0, 1)
        if page and page.items:
            url = page.items[0].url
            t = time.perf_counter()
            with reader.pin() as idx:
                found = idx.lookup_url(url)
            samples.append(time.perf_counter() - t)
            assert ds in found
    res["lookup_url"] = latency_ms(samples)
    reader.close()
    return res


_COLD_SCRIPT = r"""
import json, sys, time
from pathlib import Path
from bench._harness import drop_page_cache
from crawlstream.index import IndexReader
root = Path(sys.argv[1]); queries = json.loads(sys.argv[2]); deep = json.loads(sys.argv[3])
files = [p for p in root.rglob("*") if p.is_file() and (p.suffix in (".parquet", ".bin", ".roar", ".zst"))]
def drop():
    drop_page_cache(files)
out = {"open": [], "datasets_for_domain": [], "first_page_100": [], "deep_page": []}
for d, ds in queries:
    drop()
    t = time.perf_counter(); r = IndexReader(root); p = r.pin(); out["open"].append(time.perf_counter() - t)
    t = time.perf_counter(); p.datasets_for_domain(d); out["datasets_for_domain"].append(time.perf_counter() - t)
    drop()
    t = time.perf_counter(); p.urls(d, ds, 0, 100); out["first_page_100"].append(time.perf_counter() - t)
    drop()
    t = time.perf_counter(); p.urls(deep[0], deep[1], deep[2], 100); out["deep_page"].append(time.perf_counter() - t)
    p.release(); r.close()
print(json.dumps(out))
"""


def _cold_latency(root: Path, queries: list[tuple[str, int]], deep: tuple[str, int, int]) -> dict[str, Any]:
    """Fresh process; before each measured call the page cache of every lake/index file is dropped."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "libs"), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, "-c", _COLD_SCRIPT, str(root), json.dumps(queries), json.dumps(list(deep))],
        capture_output=True, text=True, env=env, timeout=1800, check=True,
    )
    raw = json.loads(proc.stdout)
    return {k: latency_ms(v) for k, v in raw.items()}


def _domain_dictionary(domains: list[str]) -> dict[str, Any]:
    """ADR 003: bytes/domain and lookup time of the candidate domain -> id structures."""
    from crawlstream.index._formats import domain_offsets
    from crawlstream.index._version import _Domains

    doms = sorted(set(domains))
    blob = "\n".join(doms).encode()
    zblob = zstandard.ZstdCompressor(level=19).compress(blob)
    rnd = random.Random(3)
    probe = rnd.sample(doms, min(20000, len(doms))) + [f"missing{i}.example" for i in range(2000)]
    out: dict[str, Any] = {"domains": len(doms), "domains_zst_bytes_per_domain": round(len(zblob) / len(doms), 2)}

    # (a) what the index uses: bisect over the decompressed blob, line offsets computed at open
    t = time.perf_counter()
    offsets = memoryview(domain_offsets(blob).astype("<q").tobytes()).cast("q")
    view = _Domains(blob, offsets)
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    for d in probe:
        key = d.encode()
        i = bisect.bisect_left(view, key)
        _ = i < len(view) and view[i] == key
    per = (time.perf_counter() - t) / len(probe)
    out["bisect_blob_offsets_at_open"] = {"extra_bytes_per_domain_on_disk": 0, "lookup_us": round(per * 1e6, 2),
                                          "offsets_ms_at_open": round(open_s * 1000, 1),
                                          "process_bytes_per_domain": 8}
    # (b) binary search over the sorted strings (offsets only)
    t = time.perf_counter()
    for d in probe:
        i = bisect.bisect_left(doms, d)
        _ = i < len(doms) and doms[i] == d
    per = (time.perf_counter() - t) / len(probe)
    out["bisect_sorted_strings_in_memory"] = {"extra_bytes_per_domain": 8, "lookup_us": round(per * 1e6, 2),
                                              "note": "needs the decoded list in memory (~60 B/domain of objects)"}
    # (c) Python dict baseline (everything in process memory)
    table = {d: i for i, d in enumerate(doms)}
    t = time.perf_counter()
    for d in probe:
        table.get(d)
    per = (time.perf_counter() - t) / len(probe)
    out["python_dict_baseline"] = {"lookup_us": round(per * 1e6, 3),
                                   "process_bytes_per_domain": round(sys.getsizeof(table) / len(doms), 1)}
    # (d) BBHash-style MPHF (gamma 2), pure Python, with an 8-byte fingerprint check
    out["bbhash_gamma2_pure_python"] = _bbhash_measure(doms, probe)
    return out


def _bbhash_measure(doms: list[str], probe: list[str]) -> dict[str, Any]:
    import xxhash

    gamma = 2.0
    keys = [d.encode() for d in doms]
    levels: list[tuple[bytearray, int]] = []
    remaining = keys
    t0 = time.perf_counter()
    level = 0
    while remaining and level < 30:
        m = max(64, int(gamma * len(remaining)) // 64 * 64 + 64)
        seen = bytearray(m // 8)
        coll = bytearray(m // 8)
        pos = [xxhash.xxh3_64_intdigest(k, seed=level) % m for k in remaining]
        for p in pos:
            byte, bit = p >> 3, 1 << (p & 7)
            if seen[byte] & bit:
                coll[byte] |= bit
            seen[byte] |= bit
        bits = bytearray(m // 8)
        nxt = []
        for k, p in zip(remaining, pos, strict=True):
            byte, bit = p >> 3, 1 << (p & 7)
            if coll[byte] & bit:
                nxt.append(k)
            else:
                bits[byte] |= bit
        levels.append((bits, m))
        remaining = nxt
        level += 1
    # rank directory: cumulative popcount per 64-bit word
    ranks = []
    total = 0
    for bits, _m in levels:
        words = [int.from_bytes(bits[i : i + 8], "little") for i in range(0, len(bits), 8)]
        cum = []
        for w in words:
            cum.append(total)
            total += w.bit_count()
        ranks.append((words, cum))
    build_s = time.perf_counter() - t0
    bits_total = sum(m for _, m in levels)
    rank_bytes = sum(4 * len(c) for _, c in ranks)

    def lookup(k: bytes) -> int | None:
        for lvl, (words, cum) in enumerate(ranks):
            m = levels[lvl][1]
            p = xxhash.xxh3_64_intdigest(k, seed=lvl) % m
            w = words[p >> 6]
            if w >> (p & 63) & 1:
                return cum[p >> 6] + (w & ((1 << (p & 63)) - 1)).bit_count()
        return None

    fps = [0] * len(keys)
    for k in keys:
        r = lookup(k)
        assert r is not None
        fps[r] = xxhash.xxh3_64_intdigest(k)
    t = time.perf_counter()
    for d in probe:
        k = d.encode()
        r = lookup(k)
        _ = r is not None and fps[r] == xxhash.xxh3_64_intdigest(k)
    per = (time.perf_counter() - t) / len(probe)
    return {
        "mphf_bits_per_domain": round((bits_total + rank_bytes * 8) / len(keys), 2),
        "extra_bytes_per_domain_with_8B_fingerprint": round((bits_total / 8 + rank_bytes) / len(keys) + 8, 2),
        "plus_id_to_string_offsets": "8 B/domain (same as (a))",
        "lookup_us": round(per * 1e6, 2),
        "build_s": round(build_s, 2),
        "levels": len(levels),
    }


def _row_group_sizes(root: Path, work: Path, big: tuple[str, int, int]) -> dict[str, Any]:
    """ADR 004: one dataset's lake re-written at several row-group sizes; bytes and page latency."""
    import pyarrow.parquet as pq

    from crawlstream.index import IndexBuilder, IndexReader
    from crawlstream.lake import LAKE_SCHEMA, LAKE_ZSTD_LEVEL, parquet_options
    from crawlstream.settings import IndexSettings

    src = sorted((root / "urls" / f"dataset_id={big[1]}").rglob("part-*.parquet"))
    out = {}
    for rg_rows in (4096, 16384, 65536, 262144):
        sub = work / f"rg{rg_rows}"
        for p in src:
            dst = sub / p.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            table = pq.read_table(p, schema=LAKE_SCHEMA)
            pq.write_table(table, dst, row_group_size=rg_rows, store_schema=False,
                           **parquet_options(LAKE_ZSTD_LEVEL))
        IndexBuilder(sub, index=IndexSettings(postings_shards=16)).build()
        lake_bytes = _dir_bytes(sub / "urls")
        reader = IndexReader(sub, row_groups_cached=1)  # no row-group cache: every call decodes
        rnd = random.Random(1)
        first, deep = [], []
        with reader.pin() as idx:
            pairs = [(idx.domain_at(rnd.randrange(idx.domain_count())), big[1]) for _ in range(300)]
            for d, ds in pairs:
                t = time.perf_counter()
                idx.urls(d, ds, 0, 100)
                first.append(time.perf_counter() - t)
            for _ in range(100):
                off = rnd.randrange(0, max(1, big[2]))
                t = time.perf_counter()
                idx.urls(big[0], big[1], off, 100)
                deep.append(time.perf_counter() - t)
        reader.close()
        rows = sum(pq.read_metadata(p).num_rows for p in src)
        out[str(rg_rows)] = {"lake_bytes_per_url": round(lake_bytes / rows, 2),
                             "first_page_uncached": latency_ms(first), "deep_page_uncached": latency_ms(deep)}
        shutil.rmtree(sub)
    return out


def _real_lists(root: Path) -> list[dict[str, Any]]:
    from crawlstream.ingest import ingest_files
    from crawlstream.lake import LakeWriter

    data = shared_data() / "urls"
    out = []
    inputs = [(101 + i, p, "u") for i, p in enumerate(sorted((data / "reddit-webtext").glob("*.gz")))]
    inputs.append((110, data / "ada-url-various-datasets" / "kasztp.txt.gz", "url"))
    for ds, path, field in inputs:
        stats = ingest_files([path], ds, LakeWriter(root), url_field=field, keep_extras=False)
        out.append({"dataset_id": ds, "file": path.name, "rows": stats.rows, "valid": stats.valid,
                    "invalid_by_reason": dict(stats.invalid), "rows_per_s": round(stats.rows_per_s)})
    return out


def run(quick: bool) -> dict[str, Any]:
    full = not quick and (os.environ.get("CRAWLSTREAM_BENCH_INDEX_FULL") == "1" or "--full" in sys.argv)
    n_urls = 10_000_000 if full else 1_000_000
    big_rows = 1_200_000 if full else 150_000
    deep_offset = 1_000_000 if full else 100_000
    base = Path(os.environ.get("CRAWLSTREAM_BENCH_DIR", tempfile.gettempdir()))
    work = Path(tempfile.mkdtemp(prefix="bench-index-", dir=base))
    root = work / "data"
    result: dict[str, Any] = {"mode": "full" if full else "quick", "generated_urls": n_urls + big_rows,
                              "datasets": N_DATASETS}
    try:
        from crawlstream.index import IndexBuilder
        from crawlstream.ingest import ingest_files
        from crawlstream.lake import LakeWriter
        from crawlstream.settings import IndexSettings

        t = time.perf_counter()
        inputs, domains, weights = generate(work, n_urls, big_rows)
        result["generate_s"] = round(time.perf_counter() - t, 1)

        rows = valid = 0
        t = time.perf_counter()
        for ds, path in enumerate(inputs, 1):
            stats = ingest_files([path], ds, LakeWriter(root), keep_extras=False)
            rows += stats.rows
            valid += stats.valid
        ingest_s = time.perf_counter() - t
        result["ingest"] = {"rows": rows, "valid": valid, "seconds": round(ingest_s, 1),
                            "rows_per_s": round(rows / ingest_s)}
        result["real_lists"] = _real_lists(root)

        t = time.perf_counter()
        build = IndexBuilder(root, index=IndexSettings(postings_shards=64)).build(full=True)
        build_s = time.perf_counter() - t
        result["index_build"] = {**build.to_json(), "urls_per_s": round(build.rows_scanned / build_s)}
        _progress(result)

        lake_bytes = _dir_bytes(root / "urls")
        index_bytes = _dir_bytes(root / "index")
        text_bytes, text_rows = _sorted_text_zstd19(root)
        result["bytes"] = {
            "rows": text_rows,
            "lake_bytes": lake_bytes,
            "index_bytes": index_bytes,
            "lake_plus_index_bytes_per_url": round((lake_bytes + index_bytes) / text_rows, 2),
            "lake_bytes_per_url": round(lake_bytes / text_rows, 2),
            "index_bytes_per_url": round(index_bytes / text_rows, 2),
            "sorted_text_zstd19_bytes_per_url": round(text_bytes / text_rows, 2),
            "ratio_vs_sorted_text_zstd19": round((lake_bytes + index_bytes) / text_bytes, 3),
            "column_bytes_per_url": _column_bytes(root, text_rows),
        }
        deep = ("bigdomain.com", 1, deep_offset)
        result["latency_warm"] = _warm_latency(root, domains, weights, deep)
        _progress(result)
        from crawlstream.index import IndexReader

        reader = IndexReader(root)
        with reader.pin() as idx:
            cold_q = _queries(idx, domains, weights, 30, random.Random(9))
        reader.close()
        result["latency_cold"] = _cold_latency(root, cold_q, deep)
        _progress(result)
        result["domain_dictionary"] = _domain_dictionary(domains)
        _progress(result)
        if os.environ.get("CRAWLSTREAM_BENCH_INDEX_RG", "1") == "1":
            result["row_group_sizes"] = _row_group_sizes(root, work, ("bigdomain.com", 1, big_rows))
    finally:
        if os.environ.get("CRAWLSTREAM_BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
    return result


def _progress(result: dict[str, Any]) -> None:
    sys.stderr.write("bench index progress: " + json.dumps(result, default=str) + "\n")


def _column_bytes(root: Path, rows: int) -> dict[str, float]:
    """Compressed bytes per URL of each lake column (footers and page headers not included)."""
    import pyarrow.parquet as pq

    total: dict[str, int] = {}
    for p in (root / "urls").rglob("part-*.parquet"):
        meta = pq.read_metadata(p)
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            for i in range(group.num_columns):
                col = group.column(i)
                total[col.path_in_schema] = total.get(col.path_in_schema, 0) + col.total_compressed_size
    return {name: round(n / rows, 3) for name, n in total.items()}


if __name__ == "__main__":
    main(run)
