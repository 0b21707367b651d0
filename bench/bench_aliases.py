"""Bytes and lookup time of the alias map (ADR 024): redirect hops and raw forms as lake rows.

``python -m bench aliases [--quick]``. Real hostnames (protego's top-10,000 websites list in
../shared/data; the full mode adds generated ones) with the redirects sites typically have:
``http://host/`` -> ``https://host/`` -> ``https://www.host/`` (a 2-hop chain), and moved pages
``https://www.host/old/i`` -> ``/new/i``; plus each home page's seed line written
non-canonically (``HTTP://HOST``), a raw form. Measured, in the same run:

* lake bytes per row of the pages (the chains' targets), of the redirect hops and of the raw
  forms, each at the sink's zstd level 9 and at 19 (ingest/compaction);
* index bytes without and with the alias datasets (the cost per alias row);
* warm ``/v1/url`` CPU per request (``api._urls.url_answer`` on a pinned index, no HTTP):
  a page without aliases (its domain has aliases), a 2-hop chain, a raw form.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import latency_ms, main, shared_data
from crawlstream.api._acl import Grant
from crawlstream.api._urls import url_answer
from crawlstream.errors import InvalidUrl
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.lake import (
    RAW_FORMS_DATASET,
    REDIRECTS_DATASET,
    LakeWriter,
    extras_json,
    raw_form_extras,
    redirect_extras,
)
from crawlstream.settings import LakeSettings
from crawlstream.urls import canonicalize, url_key

PAGES = 1
MOVES_PER_HOST = 8


def _hosts(full: bool) -> list[str]:
    real = (shared_data() / "urls" / "protego-top-10000-websites.txt").read_text().split()
    hosts = [h.lower().removeprefix("www.") for h in real]
    if full:
        tlds = ("com", "net", "org", "de", "co.uk")
        hosts += [f"gen{i:06d}-site.{tlds[i % len(tlds)]}" for i in range(90_000)]  # a registered domain each
    return list(dict.fromkeys(hosts))


def _rows(hosts: list[str]) -> tuple[list[Any], list[Any], list[Any]]:
    """(pages, hops, raw forms) as (canonical, extras) pairs."""
    pages, hops, raws = [], [], []
    for host in hosts:
        try:
            www = canonicalize(f"https://www.{host}/")
            chain = [canonicalize(f"http://{host}/"), canonicalize(f"https://{host}/"), www]
        except InvalidUrl:  # a listed name that is no valid host: skipped
            continue
        pages.append((www, None))
        for a, b in itertools.pairwise(chain):
            hops.append((a, extras_json(redirect_extras(b.url, 301))))
        for i in range(MOVES_PER_HOST):
            new = canonicalize(f"https://www.{host}/new/{i}")
            pages.append((new, None))
            moved = extras_json(redirect_extras(new.url, 301, f"/new/{i}"))
            hops.append((canonicalize(f"https://www.{host}/old/{i}"), moved))
        raw = f"HTTP://{host.upper()}"
        raws.append((canonicalize(raw), extras_json(raw_form_extras(raw, "seed"))))
    return pages, hops, raws


def _write(root: Path, dataset_id: int, rows: list[Any], level: int) -> int:
    config = LakeSettings(zstd_level=level, file_max_rows=10_000_000, buffer_max_rows=20_000_000)
    writer = LakeWriter(root, config=config)
    for canon, extras in rows:
        writer.add_canonical(dataset_id, canon, 1_700_000_000_000, extras)
    written = writer.flush()
    return sum(w.size_bytes for w in written)


def _index_bytes(root: Path) -> int:
    """Bytes of the one index version built over ``root``'s lake (its directory, index/<version>)."""
    version = IndexBuilder(root).build().version
    assert version is not None
    return sum(p.stat().st_size for p in (root / "index" / version).rglob("*") if p.is_file() and p.name != "PIN")


def _timed(idx: Any, grant: Grant, groups: dict[str, list[str]], rounds: int) -> dict[str, Any]:
    """CPU time (this thread's, less sensitive to a loaded machine than wall time) per answer,
    the groups interleaved URL by URL so load changes hit them alike."""
    samples: dict[str, list[float]] = {name: [] for name in groups}
    for _ in range(rounds):
        for i in range(min(len(urls) for urls in groups.values())):
            for name, urls in groups.items():
                canon = canonicalize(urls[i])
                started = time.thread_time()
                url_answer(idx, canon, url_key(canon), urls[i], grant)
                samples[name].append(time.thread_time() - started)
    return {name: latency_ms(xs) for name, xs in samples.items()}


def run(quick: bool) -> dict[str, Any]:
    full = not quick and "--full" in sys.argv
    hosts = _hosts(full)
    pages, hops, raws = _rows(hosts)
    out: dict[str, Any] = {"mode": "full" if full else "quick", "hosts": len(hosts), "pages": len(pages),
                           "redirect_hops": len(hops), "raw_forms": len(raws), "load_avg_1m": os.getloadavg()[0]}
    tmp = Path(tempfile.mkdtemp(prefix="bench-aliases-"))
    try:
        for level in (9, 19):
            root = tmp / f"z{level}"
            p = _write(root, PAGES, pages, level)
            h = _write(root, REDIRECTS_DATASET, hops, level)
            r = _write(root, RAW_FORMS_DATASET, raws, level)
            out[f"zstd{level}"] = {
                "page_lake_bytes_per_row": round(p / len(pages), 2),
                "hop_lake_bytes_per_row": round(h / len(hops), 2),
                "raw_form_lake_bytes_per_row": round(r / len(raws), 2),
            }
        # index bytes: the level-19 lake with the pages only, then with the alias datasets too
        only = tmp / "pages-only"
        _write(only, PAGES, pages, 19)
        without = _index_bytes(only)
        with_aliases = _index_bytes(tmp / "z19")
        out["index_bytes_pages_only"] = without
        out["index_bytes_with_aliases"] = with_aliases
        out["index_bytes_per_alias_row"] = round((with_aliases - without) / (len(hops) + len(raws)), 2)
        out["index_bytes_per_page"] = round(without / len(pages), 2)
        reader = IndexReader(tmp / "z19")
        grant = Grant(None, "bench")
        sample = hosts[: min(len(hosts), 500)]
        plain = [f"https://www.{h}/new/3" for h in sample]
        chains = [f"http://{h}/" for h in sample]
        raw_forms = [f"HTTP://{h.upper()}" for h in sample]
        groups = {"page_without_aliases": plain, "two_hop_chain": chains, "raw_form": raw_forms}
        with reader.pin() as idx:
            _timed(idx, grant, groups, 1)  # warm every row group the lookups read
            out["warm_v1_url_cpu"] = _timed(idx, grant, groups, 3)
            check = url_answer(idx, canonicalize(chains[0]), 0, chains[0], grant)
            assert len(check["redirects"]) == 2 and check["canonical_datasets"] == [PAGES], check
        reader.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    main(run)
