"""Raw forms of links (ADR 024): what the deduper's raw-forms rows cost.

* ``crawl``: an embedded crawl (``run_crawl`` in this process, the default services, canonical
  seeds so the raw-forms dataset holds only the deduper's rows) of the demo web, whose pages
  write links in many forms (``HTTP://HOST.UPPER/...#section``, ``local#frag``, relative,
  protocol-relative): the bytes of the raw-forms dataset as the Parquet sink wrote it and as
  compaction would (its rows rewritten one file per ``hh`` at zstd 19, ``bench_aliases``'s
  ``_write``), per URL the deduper forwarded (``urls.frontier``) and per raw-forms row; the
  crawl dataset's bytes per page beside them.
* ``deduper``: ``DedupeHandler.handle`` + ``end_batch`` on the real embedded bus (its producer,
  its flushes), batches of 500 new link URLs (real canonical URLs), a fresh filter each round,
  process CPU per forwarded URL, interleaved best of rounds: ``canonical`` (no ``raw_url``: the
  path before raw forms were stored, plus one ``is None`` test) vs ``raw`` (each URL first seen
  as ``url#frag``: one more ``UrlRecord`` encoded and produced).

``python -m bench raw_forms [--quick]``
"""

from __future__ import annotations

import dataclasses
import io
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench._harness import main
from bench.bench_aliases import _write
from bench.bench_seed import real_urls
from crawlstream.bus import Message
from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.dedupe import Deduper
from crawlstream.dedupe.service import DedupeHandler
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.errors import InvalidUrl
from crawlstream.events import DiscoveredUrl
from crawlstream.lake import LAKE_SCHEMA, RAW_FORMS_DATASET, lake_urls
from crawlstream.runtime import Host, open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import URLS_DISCOVERED, URLS_FRONTIER
from crawlstream.urls import canonicalize, partition_for, url_key

BATCH = 500
DATASET_ID = 1


def _settings(data_dir: Path) -> Settings:
    return load(
        {
            "CRAWLSTREAM_DATA_DIR": str(data_dir),
            "CRAWLSTREAM_BUS_PARTITIONS": "4",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.05",
            "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0",
            "CRAWLSTREAM_SCHEDULER_RESPONSE_TIME_FACTOR": "0",
            "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": "1",
            "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.2",
            "CRAWLSTREAM_FETCH_TIMEOUT_S": "3",
            "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
            "CRAWLSTREAM_CRAWL_CHECK_INTERVAL_S": "0.2",
            "CRAWLSTREAM_CRAWL_DATASET_ID": str(DATASET_ID),
        }
    )


def _events_of(host: Host, topic: str) -> list[DiscoveredUrl]:
    consumer = host.bus.consumer(f"bench.raw-forms.{topic}")
    consumer.subscribe([topic])
    events: list[DiscoveredUrl] = []
    try:
        idle = 0
        while idle < 3:
            batch = consumer.consume(1000, 0.2)
            idle = 0 if batch else idle + 1
            events += [host.codec.decode(m.value) for m in batch]
    finally:
        consumer.close()
    return events


def _dataset(data_dir: Path, dataset_id: int) -> tuple[int, int, list[Any]]:
    """(file bytes, rows, [(canonical, extras)...]) of one dataset of the lake."""
    files = list((data_dir / "urls" / f"dataset_id={dataset_id}").rglob("*.parquet"))
    rows: list[Any] = []
    for f in files:
        table = pq.read_table(f, schema=LAKE_SCHEMA)
        urls, extras = lake_urls(table).to_pylist(), table["extras"].to_pylist()
        rows += [(canonicalize(u), e) for u, e in zip(urls, extras, strict=True)]
    return sum(f.stat().st_size for f in files), len(rows), rows


def _marginal_b_per_row(data_dir: Path, dataset_id: int, out: Path) -> float:
    """Bytes per row of one dataset's rows in one sorted zstd-19 file, less that file's fixed
    cost (the same file empty): what a row costs where files hold many rows (a large lake,
    compacted), which this crawl's few rows per ``hh`` file cannot show."""
    files = list((data_dir / "urls" / f"dataset_id={dataset_id}").rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f, schema=LAKE_SCHEMA) for f in files])
    table = table.sort_by([("domain", "ascending"), ("host_prefix", "ascending"), ("path_query", "ascending")])
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "all.parquet", compression="zstd", compression_level=19)
    pq.write_table(table.slice(0, 0), out / "empty.parquet", compression="zstd", compression_level=19)
    fixed = (out / "empty.parquet").stat().st_size
    return ((out / "all.parquet").stat().st_size - fixed) / max(1, table.num_rows)


def _crawl(quick: bool, root: Path) -> dict[str, Any]:
    n_domains, pages = (30, 8) if quick else (150, 20)
    settings = _settings(root / "data")
    with DemoWeb(n_domains, pages_per_domain=pages, seed=11, crawl_delay_s=0.0, slow_s=0.2) as web:
        started = time.perf_counter()
        with open_host(settings) as host:
            summary = run_crawl(
                host,
                web.seed_urls(),
                services=DEFAULT_SERVICES,
                exit_when_done=True,
                resolve_map=web.resolve_map,
                progress_stream=io.StringIO(),
                is_tty=False,
            )
        elapsed = time.perf_counter() - started
    with open_host(settings) as host:
        forwarded = _events_of(host, URLS_FRONTIER)
        discovered = _events_of(host, URLS_DISCOVERED)
    raw_bytes, raw_rows, rows = _dataset(settings.data_dir, RAW_FORMS_DATASET)
    page_bytes, page_rows, _ = _dataset(settings.data_dir, DATASET_ID)
    compacted = _write(root / "compacted", RAW_FORMS_DATASET, rows, 19)
    raw_marginal = _marginal_b_per_row(settings.data_dir, RAW_FORMS_DATASET, root / "one-file-raw")
    page_marginal = _marginal_b_per_row(settings.data_dir, DATASET_ID, root / "one-file-pages")
    links = sum(e.source == "link" for e in forwarded)
    return {
        "web": f"{n_domains} domains x {pages} pages",
        "crawl_s": round(elapsed, 1),
        "stopped": summary.reason,
        "forwarded_urls": len(forwarded),
        "forwarded_links": links,
        "forwarded_with_raw_url": sum(e.raw_url is not None for e in forwarded),
        # what recording every sighting (in the link extractor) would have written instead
        "discovered_events": len(discovered),
        "discovered_with_raw_url": sum(e.raw_url is not None for e in discovered),
        "raw_form_rows": raw_rows,
        "raw_form_share_of_forwarded": round(raw_rows / max(1, len(forwarded)), 3),
        "raw_forms_sink_bytes": raw_bytes,
        "raw_forms_sink_b_per_forwarded_url": round(raw_bytes / max(1, len(forwarded)), 2),
        "raw_forms_compacted_bytes": compacted,
        "raw_forms_compacted_b_per_forwarded_url": round(compacted / max(1, len(forwarded)), 2),
        "raw_forms_compacted_b_per_row": round(compacted / max(1, raw_rows), 2),
        "raw_forms_one_file_b_per_row": round(raw_marginal, 2),
        "raw_forms_one_file_b_per_forwarded_url": round(raw_marginal * raw_rows / max(1, len(forwarded)), 2),
        "pages_one_file_b_per_page": round(page_marginal, 2),
        "pages_sink_bytes": page_bytes,
        "pages_sink_b_per_page": round(page_bytes / max(1, page_rows), 2),
    }


def _events(n: int) -> list[DiscoveredUrl]:
    out: list[DiscoveredUrl] = []
    seen: set[str] = set()
    for raw in real_urls():
        try:
            c = canonicalize(raw)
        except InvalidUrl:
            continue
        if c.url in seen:
            continue
        seen.add(c.url)
        out.append(DiscoveredUrl(c.url, c.domain, url_key(c), 1, 1_764_000_000_000, "link", "http://p.example/"))
        if len(out) == n:
            break
    return out


def _once(host: Host, root: Path, events: list[DiscoveredUrl], round_no: int) -> float:
    """Process CPU per forwarded URL of one handler over ``events`` (all new)."""
    deduper = Deduper(root / f"dedupe-{round_no}", len(events), 0.001)
    out = host.event_producer()
    handler = DedupeHandler(deduper, host.bus.consumer("bench"), out, 1e9)
    partitions = host.bus.partition_count(URLS_DISCOVERED)
    for p in range(partitions):
        deduper.load_partition(p)
    messages = [
        Message(URLS_DISCOVERED, partition_for(e.domain, partitions), i, b"", b"", (), 0) for i, e in enumerate(events)
    ]
    started = time.process_time()
    for i in range(0, len(events), BATCH):
        for event, message in zip(events[i : i + BATCH], messages[i : i + BATCH], strict=True):
            handler.handle(event, message)
        handler.end_batch()
        out.flush()
    cpu = time.process_time() - started
    assert handler.forwarded == len(events)
    return cpu / len(events)


def _deduper(quick: bool, root: Path) -> dict[str, Any]:
    n, rounds = (10_000, 3) if quick else (50_000, 5)
    plain = _events(n)
    variants = {
        "canonical": plain,
        "raw": [dataclasses.replace(e, raw_url=e.url + "#frag") for e in plain],
    }
    best: dict[str, float] = {}
    with open_host(_settings(root / "bus")) as host:
        k = 0
        for _ in range(rounds):
            for name, events in variants.items():
                k += 1
                per_url = _once(host, root, events, k)
                best[name] = min(best.get(name, per_url), per_url)
    return {
        "urls": n,
        "us_per_forwarded_url": {name: round(s * 1e6, 2) for name, s in best.items()},
        "raw_row_extra_us": round((best["raw"] - best["canonical"]) * 1e6, 2),
    }


def run(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-raw-forms-") as tmp:
        root = Path(tmp)
        crawl = _crawl(quick, root / "crawl")
        dedupe = _deduper(quick, root / "dedupe")
    share = crawl["forwarded_with_raw_url"] / max(1, crawl["forwarded_urls"])
    dedupe["at_the_crawl_share_us"] = round(
        dedupe["us_per_forwarded_url"]["canonical"] + share * dedupe["raw_row_extra_us"], 2
    )
    return {"crawl": crawl, "deduper": dedupe}


if __name__ == "__main__":
    main(run)
