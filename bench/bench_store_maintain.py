"""Store maintenance (ADR 018): MB/s and peak memory of a pass, bounded vs unbounded, and read p99 per tier.

Pages: a random sample of the real pages of ../shared/data/html (``--quick``: 150 pages,
~21 MB; full: all 957, ~123 MB, which takes ~10 min at level 22). Each measurement runs in
a forked child that builds its own store (hot puts) and then runs one maintenance pass with
every tier age at zero (everything to the archive tier, production levels and dictionary
sizes): ``bounded`` with the default budgets (``maintenance_budget_bytes`` 32 MiB,
``maintenance_memory_bytes`` 256 MiB: the goal is a peak within it, ADR 021), ``memory
unbounded`` with the same batches but a 1 TiB memory budget (every page a training sample,
compressor tables uncapped: what the memory bound costs in ratio), ``unbounded`` with both
at 1 TiB, which is one batch holding every body, like the pass before ADR 018. Memory: peak
RSS growth of the child during the pass (after the puts). ``stream_ratio``: one zstd-19
stream of the same pages, the ratio goal of issue 13. Reads (always on the 150-page sample): single-page reads in
random order (CPU time of the reading thread, warm) after putting (hot) and after moving the
same store to warm, then cold, then archive.

``--synthetic`` (ADR 026): the pages of the e2e maintenance test's synthetic web (8 domains of
15-60 KB pages of random words) through a store with and without bzip2 archive groups: the
ratio against one zstd-19 stream, the pass's CPU per MB, archive-tier read latency (each page
three times, in random order) and the CPU of reading
every page once in URL order, as WARC export does.

``--sharded`` (ADR 028): the real pages and the synthetic web in one store and in the 128-shard
store a crawl writes: ratio after a pass, put and maintenance CPU.

``--retrain`` (ADR 021 "Retraining"): one domain of real pages that drifts (a shop's product
pages, then articles of many sites) — the ratio with its first dictionary, then after one
pass with the default retraining rules (retrain, recompress, drop), its peak memory by kind
of step, and a store that had every page from the start.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench._harness import latency_ms, main

READS = 300
QUICK_PAGES = 150
_HUGE = 1 << 40


def _pages(quick: bool) -> list[tuple[str, bytes]]:
    from bench.bench_store import _load

    pages = [(url, body) for url, _, body in _load(False)]
    return random.Random(1).sample(pages, QUICK_PAGES) if quick else pages


def _in_child(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()

    def target() -> None:
        queue.put(fn())

    proc = ctx.Process(target=target)
    proc.start()
    result = queue.get(timeout=3600)
    proc.join()
    return dict(result)


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def _pass(pages: list[tuple[str, bytes]], budget: int, memory: int) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore, StoreConfig

        with tempfile.TemporaryDirectory() as tmp:
            config = StoreConfig(maintenance_budget_bytes=budget, maintenance_memory_bytes=memory)
            store = ContentStore(Path(tmp), config=config)
            for url, body in pages:
                store.put(url, body, fetched_at_ms=0)
            store.sync()
            rss_before = _rss_mb()
            max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            steps: list[float] = []
            t = time.perf_counter()
            report = store.maintain(ages_zero=True, progress=lambda r: steps.append(time.perf_counter()))
            elapsed = time.perf_counter() - t
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            st = store.stats()
            store.close()
        raw = sum(len(b) for _, b in pages)
        gaps = [b - a for a, b in zip([t, *steps], steps, strict=False)]
        return {
            "pages": len(pages),
            "raw_bytes": raw,
            "pass_s": round(elapsed, 1),
            "mb_per_s": round(raw / 1e6 / elapsed, 3),
            "steps": len(steps),
            "longest_step_s": round(max(gaps, default=0.0), 1),
            "dictionaries_trained": report.dictionaries_trained,
            "ratio": round(st.ratio, 3),
            "stored_bytes": st.stored_bytes,
            "rss_before_mb": round(rss_before, 1),
            "maxrss_before_mb": round(max_before, 1),
            "maxrss_after_mb": round(peak, 1),
            # growth over the RSS the pass started with; None: the pass never exceeded the puts' peak
            "peak_rss_growth_mb": round(peak - rss_before, 1) if peak > max_before else None,
        }

    return run


def _reads_per_tier(pages: list[tuple[str, bytes]]) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore

        rng = random.Random(2)
        sample = [rng.choice(pages)[0] for _ in range(READS)]
        out: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as tmp:
            store = ContentStore(Path(tmp))
            for url, body in pages:
                store.put(url, body, fetched_at_ms=0)

            def measure(tier: str) -> None:
                assert {store.entry(u).location.tier for u in sample} == {tier}  # type: ignore[union-attr]
                cpu: list[float] = []
                for url in sample:
                    t = time.thread_time()
                    store.get(url)
                    cpu.append(time.thread_time() - t)
                out[tier] = latency_ms(cpu)

            measure("hot")
            for tier in ("warm", "cold", "archive"):
                store.recompress(0, tier=tier, now_ms=1)
                measure(tier)
            store.close()
        return out

    return run


def _stream_ratio(pages: list[tuple[str, bytes]]) -> float:
    import zstandard as zstd

    raw = b"".join(b for _, b in pages)
    return round(len(raw) / len(zstd.ZstdCompressor(level=19).compress(raw)), 3)


def run(quick: bool) -> dict[str, Any]:
    pages = _pages(quick)
    # the same 150 pages as _pages(True), without loading the set twice: the parent must stay
    # small, every pass forks from it (freed pages would be reused memory in the children)
    sample = pages if quick else random.Random(1).sample(pages, QUICK_PAGES)
    return {
        "pages": len(pages),
        "raw_bytes": sum(len(b) for _, b in pages),
        # in a child too: the parent must not grow before the passes fork (their RSS baseline)
        "stream_ratio": _in_child(lambda: {"ratio": _stream_ratio(pages)})["ratio"],
        "pass_bounded_default_budgets": _in_child(_pass(pages, 32 * 1024 * 1024, 256 * 1024 * 1024)),
        "pass_bounded_memory_unbounded": _in_child(_pass(pages, 32 * 1024 * 1024, _HUGE)),
        "pass_unbounded_one_batch": _in_child(_pass(pages, _HUGE, _HUGE)),
        "read_cpu_per_tier_150_pages": _in_child(_reads_per_tier(sample)),
        "synthetic_web": run_synthetic(quick),  # last: the parent may grow now, no pass forks after it
    }


# ------------------------------------------------------------------ retraining (ADR 021 "Retraining")

SHOP = "www.shopdrift.com"
DRIFT_ARTICLES = 250


def _drifted_set() -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """(first, later) pages of one domain: a shop's 130 first product pages (real, booksamillion.com);
    later its other 130 products, then 250 real articles of many news and blog sites: the site drifts."""
    pages = _pages(False)
    products = [b for u, b in pages if "booksamillion.com" in u]
    articles = [b for u, b in pages if "booksamillion.com" not in u and len(b) < 400_000][:DRIFT_ARTICLES]
    books = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products)]
    news = [(f"https://{SHOP}/news/{i}", b) for i, b in enumerate(articles)]
    return books[:130], books[130:] + news


def _retrain_before(
    root: Path, first: list[tuple[str, bytes]], later: list[tuple[str, bytes]]
) -> Callable[[], dict[str, Any]]:
    """Build the drifted store with retraining off: the first dictionary serves every later page."""

    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore, StoreConfig

        with ContentStore(root, config=StoreConfig(dict_retrain_growth=0, dict_retrain_drift=0)) as store:
            for url, body in first:
                store.put(url, body, fetched_at_ms=0)
            store.maintain(ages_zero=True)
            for url, body in later:
                store.put(url, body, fetched_at_ms=0)
            store.maintain(ages_zero=True)
            st = store.stats()
            return {
                "ratio": round(st.ratio, 3),
                "stored_bytes": st.stored_bytes,
                "dict_bytes": st.dict_bytes,
                "dictionaries": st.dictionary_versions,
            }

    return run


def _retrain_after(root: Path, pages: dict[str, bytes]) -> Callable[[], dict[str, Any]]:
    """Reopen it with the default rules: one pass retrains, recompresses, drops; peak memory per step kind."""

    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore

        with ContentStore(root) as store:
            rss_before = _rss_mb()
            max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            steps: list[tuple[str, float, float]] = []
            t = time.perf_counter()

            def step(report: Any) -> None:
                steps.append(
                    (report.kind, time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
                )

            report = store.maintain(ages_zero=True, progress=step)
            elapsed = time.perf_counter() - t
            probes = {k: vars(v) for k, v in store._tiering.retrainer.last_probe.items()}
            st = store.stats()
            wrong = sum(1 for url, body in pages.items() if store.get(url) != body)
        peaks: dict[str, float] = {}
        starts = [t] + [s[1] for s in steps]
        for (kind, end, maxrss), start in zip(steps, starts, strict=False):
            peaks[kind] = max(peaks.get(kind, 0.0), round(maxrss - rss_before, 1))
            peaks[f"{kind}_s"] = max(peaks.get(f"{kind}_s", 0.0), round(end - start, 1))
        return {
            "pass_s": round(elapsed, 1),
            "steps": [s[0] for s in steps],
            "retrained": report.retrained,
            "dictionaries_dropped": report.dictionaries_dropped,
            "probes": probes,
            # peak RSS growth (MB) over the RSS the pass started with, by the kind of step that reached it
            # (ru_maxrss only grows: a later kind's figure includes the earlier kinds' peak)
            "peak_rss_growth_by_step_mb": peaks,
            "rss_before_mb": round(rss_before, 1),
            "maxrss_before_mb": round(max_before, 1),
            "ratio": round(st.ratio, 3),
            "stored_bytes": st.stored_bytes,
            "dict_bytes": st.dict_bytes,
            "dictionaries": st.dictionary_versions,
            "pages_not_identical": wrong,
        }

    return run


def _fresh(pages: list[tuple[str, bytes]]) -> Callable[[], dict[str, Any]]:
    """Reference: every page there from the start, one dictionary trained on all of them."""

    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore

        with tempfile.TemporaryDirectory() as tmp, ContentStore(Path(tmp)) as store:
            for url, body in pages:
                store.put(url, body, fetched_at_ms=0)
            store.maintain(ages_zero=True)
            st = store.stats()
            return {"ratio": round(st.ratio, 3), "stored_bytes": st.stored_bytes}

    return run


def run_retrain(quick: bool) -> dict[str, Any]:
    """The drifted set at production levels: ratio before and after retraining, and the pass's peak memory."""
    first, later = _drifted_set()
    pages = dict(first + later)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        before = _in_child(_retrain_before(root, first, later))
        after = _in_child(_retrain_after(root, pages))
    return {
        "pages": len(pages),
        "raw_bytes": sum(map(len, pages.values())),
        "first_pages": len(first),
        "before_retraining": before,
        "after_retraining": after,
        "all_pages_from_the_start": _in_child(_fresh(first + later)),
        "stream_ratio": _in_child(lambda: {"ratio": _stream_ratio(first + later)})["ratio"],
    }


# ------------------------------------------------------------------ synthetic web (ADR 026)


def _synthetic_pages() -> list[tuple[str, bytes]]:
    """Every reachable page of tests/e2e/test_crawl_then_maintain.py's web, as served."""
    import urllib.request

    from crawlstream.devtools.demoweb import DemoWeb

    web = DemoWeb(8, pages_per_domain=12, seed=9, special_every=0, crawl_delay_s=0.05, page_bytes=(15_000, 60_000))
    pages = []
    with web:
        for url in sorted(web.reachable_pages()):
            host, _, path = url.split("://", 1)[1].partition("/")
            request = urllib.request.Request(f"http://127.0.0.1:{web.port}/{path}", headers={"Host": host})
            with urllib.request.urlopen(request, timeout=10) as response:
                pages.append((url, response.read()))
    return pages


def _synthetic_pass(pages: list[tuple[str, bytes]], bzip2: bool) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore, StoreConfig

        with tempfile.TemporaryDirectory() as tmp:
            config = StoreConfig(archive_bzip2=bzip2)
            with ContentStore(Path(tmp), config=config) as store:
                for url, body in pages:
                    store.put(url, body, content_type="text/html", fetched_at_ms=0)
                t = time.process_time()
                store.maintain(ages_zero=True)
                cpu_s = time.process_time() - t
                st = store.stats()
            with ContentStore(Path(tmp), config=config) as store:
                t = time.thread_time()
                for url, _body in pages:  # URL order: a group's pages one after another, as export reads
                    store.get(url)
                in_order_s = time.thread_time() - t
            with ContentStore(Path(tmp), config=config) as store:
                cpu: list[float] = []
                order = [url for url, _ in pages] * 3
                random.Random(3).shuffle(order)
                for url in order:
                    t = time.thread_time()
                    store.get(url)
                    cpu.append(time.thread_time() - t)
        return {
            "ratio": round(st.ratio, 3),
            "stored_bytes": st.stored_bytes,
            "dict_bytes": st.dict_bytes,
            "maintain_cpu_mb_per_s": round(st.raw_bytes / 1e6 / cpu_s, 2),
            "archive_read_cpu": latency_ms(cpu),
            "every_page_in_url_order_cpu_s": round(in_order_s, 3),
        }

    return run


def run_synthetic(quick: bool) -> dict[str, Any]:
    pages = _synthetic_pages()
    return {
        "pages": len(pages),
        "raw_bytes": sum(len(b) for _, b in pages),
        "stream_ratio": _stream_ratio(pages),
        "archive_zstd_only": _in_child(_synthetic_pass(pages, False)),
        "archive_bzip2_where_smaller": _in_child(_synthetic_pass(pages, True)),
    }


# ------------------------------------------------------------------ one store vs 128 shards (ADR 028)


def _layout_pass(pages: list[tuple[str, bytes]], sharded: bool) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from crawlstream.store import ContentStore, ShardedStore

        with tempfile.TemporaryDirectory() as tmp:
            store = ShardedStore(Path(tmp)) if sharded else ContentStore(Path(tmp))
            with store:
                t = time.process_time()
                for url, body in pages:
                    store.put(url, body, content_type="text/html", fetched_at_ms=0)
                store.sync()
                put_cpu_s = time.process_time() - t
                hot = store.stats()
                t = time.process_time()
                store.maintain(ages_zero=True)
                maintain_cpu_s = time.process_time() - t
                st = store.stats()
        return {
            "hot_ratio": round(hot.ratio, 3),
            "ratio": round(st.ratio, 3),
            "stored_bytes": st.stored_bytes,
            "dict_bytes": st.dict_bytes,
            "dictionaries": st.dictionaries,
            "put_cpu_ms_per_page": round(put_cpu_s * 1000 / len(pages), 3),
            "maintain_cpu_mb_per_s": round(st.raw_bytes / 1e6 / maintain_cpu_s, 2),
        }

    return run


def run_sharded(quick: bool) -> dict[str, Any]:
    """The same pages in one ContentStore and in a ShardedStore (128 shards by domain checksum):
    what sharding costs in ratio (per-shard global dictionaries and dedupe) and CPU."""
    from crawlstream.urls import canonicalize, domain_checksum

    out: dict[str, Any] = {}
    for name, pages in (("real_pages", _pages(quick)), ("synthetic_web", _synthetic_pages())):
        domains = {canonicalize(url).domain for url, _ in pages}
        out[name] = {
            "pages": len(pages),
            "domains": len(domains),
            "shards_used": len({domain_checksum(d) for d in domains}),
            "stream_ratio": _stream_ratio(pages),
            "one_store": _in_child(_layout_pass(pages, False)),
            "sharded": _in_child(_layout_pass(pages, True)),
        }
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    modes = {"--retrain": run_retrain, "--synthetic": run_synthetic, "--sharded": run_sharded}
    main(next((fn for flag, fn in modes.items() if flag in args), run))
