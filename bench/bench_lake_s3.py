"""The writers on S3 vs local disk (issue 26, ADR 029): ``crawlstream ingest``'s rows/s and a full
``index build``'s seconds with the lake (and index) on a local directory and on a real S3 server
(versitygw, posix backend, on loopback), in one run; and what the lake files' Parquet page
checksums cost in bytes/URL.

Workload: the Reddit URL lists of ../shared/data/urls/reddit-webtext (six months, 207k rows;
``--quick``: one month), one dataset per month, ingested through ``ingest_files`` (no extras, no
rejects file) into a ``LakeWriter`` of each store, then ``IndexBuilder(...).build(full=True)``.
Runs go local, S3, S3, local; the numbers are the means of each. The page-checksum cost is the
local lake's bytes with ``write_page_checksum`` on vs off (the same rows, the same files).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import crawlstream.lake._writer as writer_module
from bench._harness import main, shared_data
from crawlstream.index import IndexBuilder
from crawlstream.ingest import ingest_files
from crawlstream.lake import LakeWriter
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import IndexSettings, load


def _inputs(quick: bool) -> list[Path]:
    files = sorted((shared_data() / "urls" / "reddit-webtext").glob("RS_v2_*.gz"))
    return files[:1] if quick else files


def _run(store: ObjectStore, inputs: list[Path]) -> dict[str, Any]:
    rows = 0
    started = time.perf_counter()
    for ds, path in enumerate(inputs, 1):
        rows += ingest_files([path], ds, LakeWriter(store), url_field="u", keep_extras=False).rows
    ingest_s = time.perf_counter() - started
    build = IndexBuilder(store, index=IndexSettings(postings_shards=64)).build(full=True)
    lake_bytes = sum(o.size for o in store.list("urls"))
    return {"rows": rows, "ingest_s": round(ingest_s, 2), "ingest_rows_per_s": round(rows / ingest_s),
            "build_s": round(build.seconds, 2), "build_phases_s": build.phases_s, "urls": build.pairs,
            "lake_files": len(store.list("urls")), "lake_bytes": lake_bytes,
            "requests": dict(store.requests)}


def _page_checksum_cost(inputs: list[Path], work: Path) -> dict[str, Any]:
    out = {}
    real = writer_module.parquet_options
    for on in (False, True):
        writer_module.parquet_options = lambda level, on=on: {**real(level), "write_page_checksum": on}  # type: ignore[misc]
        try:
            store = open_objects(parse_location(work / f"crc-{on}"), load({}).s3)
            rows = sum(ingest_files([p], ds, LakeWriter(store), url_field="u", keep_extras=False).valid
                       for ds, p in enumerate(inputs, 1))
        finally:
            writer_module.parquet_options = real
        out["with" if on else "without"] = round(sum(o.size for o in store.list("urls")) / rows, 3)
    out["delta_bytes_per_url"] = round(out["with"] - out["without"], 3)
    out["delta_pct"] = round(100 * (out["with"] / out["without"] - 1), 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    from crawlstream.devtools.locals3 import LocalS3, find_versitygw

    try:
        find_versitygw()
    except Exception as exc:  # `make s3` builds it
        return {"skipped": f"no versitygw: {exc}"}
    inputs = _inputs(quick)
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="bench-lake-s3-") as tmp, LocalS3(buckets=("bench",)) as server:
        work = Path(tmp)
        for i, where in enumerate(("local", "s3", "s3", "local")):
            loc = parse_location(work / f"local-{i}" if where == "local" else f"s3://bench/run-{i}")
            runs[where].append(_run(open_objects(loc, load(server.env).s3), inputs))
        crc = _page_checksum_cost(inputs, work)

    def mean(where: str, key: str) -> float:
        return round(sum(r[key] for r in runs[where]) / len(runs[where]), 2)

    summary = {where: {k: mean(where, k) for k in ("ingest_rows_per_s", "ingest_s", "build_s")}
               for where in runs}
    return {"inputs": [p.name for p in inputs], "summary": summary, "runs": runs, "page_checksums_b_per_url": crc}


if __name__ == "__main__":
    main(run)
