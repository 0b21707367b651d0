"""canonicalize + registered_domain + url_key over real URL lists, on one core.

Data: ../shared/data/urls/reddit-webtext/*.gz (JSON lines, field "u") and
urls/ada-url-various-datasets/kasztp.txt.gz. Reports URLs/s (best of N passes, caches warm
as in a long-running service, plus the first cold pass), invalid URLs by reason, and the
top of a cProfile of one pass. Target: >= 150,000 URLs/s per core.

``column``: the same URLs through ``canonicalize_column`` in Arrow batches of 65,536 against
the per-row loop it replaces (same batches, warm caches, best of N), and the share of rows its
vectorised fast path took (ADR 032).
"""

from __future__ import annotations

import cProfile
import gzip
import io
import json
import pstats
import time
from collections import Counter
from typing import Any

import pyarrow as pa

from bench._harness import main, shared_data
from crawlstream.errors import InvalidUrl
from crawlstream.urls import (
    CanonicalUrl,
    _canonical,
    _column,
    _domains,
    _hashing,
    canonicalize,
    canonicalize_column,
    url_key,
)

TARGET_URLS_PER_S = 150_000


def load_urls(quick: bool) -> list[str]:
    """Real URLs: reddit-webtext (field "u") then kasztp.txt."""
    root = shared_data() / "urls"
    urls: list[str] = []
    files = sorted((root / "reddit-webtext").glob("*.gz"))
    for path in files[:1] if quick else files:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            urls.extend(json.loads(line)["u"] for line in handle if line.strip())
    with gzip.open(root / "ada-url-various-datasets" / "kasztp.txt.gz", "rt", encoding="utf-8") as handle:
        urls.extend(line.rstrip("\n") for line in handle if line.strip())
    return urls


def _clear_caches() -> None:
    _canonical._host_and_domain.cache_clear()
    _domains.registered_domain.cache_clear()
    _domains.registered_domain_or_host.cache_clear()
    _hashing.domain_checksum.cache_clear()


def _try_canonicalize(raw: str) -> CanonicalUrl | None:
    try:
        return canonicalize(raw)
    except InvalidUrl:
        return None


def one_pass(urls: list[str]) -> Counter[str]:
    """The measured work: canonicalize, registered domain, url_key; count rejections by reason."""
    invalid: Counter[str] = Counter()
    for raw in urls:
        try:
            url_key(canonicalize(raw))  # canonicalize computes the registered domain (cached per host)
        except InvalidUrl as exc:
            invalid[exc.reason] += 1
    return invalid


def column_vs_row_loop(urls: list[str], passes: int, batch_rows: int = 65_536) -> dict[str, Any]:
    """CPU us/URL of ``canonicalize_column`` and of the per-row loop it replaced, over the same
    Arrow batches, plus a bare ``canonicalize`` loop over the Python strings. CPU time (best of
    ``passes``), not wall time: the bench machine is shared and wall time swings 2x under load."""
    column = pa.array(urls, pa.string())
    batches = [column.slice(i, batch_rows) for i in range(0, len(column), batch_rows)]
    best = {"bare": float("inf"), "row_loop": float("inf"), "column": float("inf")}
    fast = 0
    for _ in range(passes):
        started = time.process_time()
        for raw in urls:
            _try_canonicalize(raw)
        best["bare"] = min(best["bare"], time.process_time() - started)
        started = time.process_time()
        for batch in batches:
            _column._slow_rows(batch)
        best["row_loop"] = min(best["row_loop"], time.process_time() - started)
        started = time.process_time()
        fast = sum(canonicalize_column(batch).fast_rows for batch in batches)
        best["column"] = min(best["column"], time.process_time() - started)
    return {
        "bare_canonicalize_cpu_us_per_url": round(best["bare"] / len(urls) * 1e6, 3),
        "row_loop_cpu_us_per_url": round(best["row_loop"] / len(urls) * 1e6, 3),
        "column_cpu_us_per_url": round(best["column"] / len(urls) * 1e6, 3),
        "speedup_over_row_loop": round(best["row_loop"] / best["column"], 2),
        "speedup_over_bare_canonicalize": round(best["bare"] / best["column"], 2),
        "fast_path_fraction": round(fast / len(urls), 4),
    }


def run(quick: bool) -> dict[str, Any]:
    urls = load_urls(quick)
    hosts = {u.partition("://")[2].partition("/")[0] for u in urls}
    _clear_caches()
    started = time.perf_counter()
    invalid = one_pass(urls)
    cold_s = time.perf_counter() - started
    best_s = cold_s
    for _ in range(1 if quick else 3):
        started = time.perf_counter()
        one_pass(urls)
        best_s = min(best_s, time.perf_counter() - started)

    profiler = cProfile.Profile()
    profiler.enable()
    one_pass(urls)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    profile_lines = [line for line in out.getvalue().splitlines() if line.strip()][-14:]

    # Baseline in the same run: the key step with the pure-Python FNV-1a loop instead of fnv-c.
    canons = [c for c in (_try_canonicalize(u) for u in urls[:50_000]) if c is not None]
    started = time.perf_counter()
    for canon in canons:
        url_key(canon)
    fast_key_s = time.perf_counter() - started
    started = time.perf_counter()
    for canon in canons:
        _hashing.fnv1a_64_pure(canon.url.encode("utf-8"))
    pure_fnv_s = time.perf_counter() - started

    rate = len(urls) / best_s
    return {
        "urls": len(urls),
        "distinct_hosts_approx": len(hosts),
        "invalid_by_reason": dict(invalid.most_common()),
        "cold_pass_urls_per_s": round(len(urls) / cold_s),
        "warm_best_urls_per_s": round(rate),
        "us_per_url": round(best_s / len(urls) * 1e6, 3),
        "target_urls_per_s": TARGET_URLS_PER_S,
        "meets_target": rate >= TARGET_URLS_PER_S,
        "url_key_only_urls_per_s": round(len(canons) / fast_key_s),
        "pure_python_fnv_only_urls_per_s": round(len(canons) / pure_fnv_s),
        "fnv_c_speedup_over_pure_key_step": round(pure_fnv_s / fast_key_s, 1),
        "profile_tottime_top": profile_lines,
        "column": column_vs_row_loop(urls, 2 if quick else 3),
    }


if __name__ == "__main__":
    main(run)
