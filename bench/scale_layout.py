"""The lake's row-group size measured on a lake that exists (issue 27: "measure the layout there
before changing it"), and the lake re-laid out at another size.

``python -m bench.scale_layout measure LAKE_DIR [--files 32] [--sizes 4096,8192,16384,65536]``:
a seeded sample of LAKE_DIR's files rewritten at each row-group size with the lake writer's own
options (``parquet_options``: the codecs, encodings and level every writer uses), then per size
the bytes beside the size the files have now, and the uncached cost of a first page (100 URLs of a
random domain of the sample: the row groups covering them decoded, as the API's reader does, and
turned into URLs). Ratios are against the 16,384-row layout measured in the same run.

``python -m bench.scale_layout relayout LAKE_DIR --rows N``: every lake file rewritten in place
(same name, atomic per file) at N rows per row group through ``write_lake_file``, the function
``crawlstream ingest``, ``spark-ingest`` and compaction write with; then ``index build --full``
is due (the index records row-group sizes). What re-running the ingest at the new
``lake.row_group_rows`` writes, in a fraction of the time. A progress line on stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import latency_ms

BASELINE_ROWS = 16_384
PAGE = 100


def _lake_files(lake: Path) -> list[Path]:
    return sorted(p for p in (lake / "urls").rglob("*.parquet") if p.is_file())


def _first_pages(path: Path, n: int, rnd: random.Random) -> list[tuple[str, int, int]]:
    """(domain, first row, rows) of the first page of ``n`` random domains of one file."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    domains = pq.read_table(path, columns=["domain"]).column("domain").combine_chunks()
    codes = pc.dictionary_encode(domains).indices.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    picks = rnd.sample(range(len(starts)), min(n, len(starts)))
    return [(domains[int(starts[i])].as_py(), int(starts[i]), int(min(ends[i] - starts[i], PAGE))) for i in picks]


def _page_cost(path: Path, domain: str, start: int, rows: int) -> float:
    """Seconds to serve one uncached first page from ``path``: open the footer, decode the row
    groups covering ``[start, start + rows)`` (the reader's columns), build the URLs."""
    import itertools

    import pyarrow.parquet as pq

    from crawlstream.index._formats import inline_segments
    from crawlstream.index._reader import DICT_COLUMNS, ROW_COLUMNS
    from crawlstream.lake import segment_rows

    t = time.perf_counter()
    pf = pq.ParquetFile(str(path), read_dictionary=DICT_COLUMNS, page_checksum_verification=True)
    md = pf.metadata
    starts = list(itertools.accumulate((md.row_group(i).num_rows for i in range(md.num_row_groups)), initial=0))
    for s in inline_segments(0, start, rows, starts):  # the reader's own split at row-group starts
        table = pf.read_row_group(s.row_group, columns=ROW_COLUMNS, use_threads=False)
        segment_rows(table, s.row_start, s.row_count, domain)
    return time.perf_counter() - t


def measure(lake: Path, n_files: int, sizes: list[int], seed: int = 11) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from crawlstream.lake._schema import LAKE_SCHEMA
    from crawlstream.lake._writer import parquet_options

    rnd = random.Random(seed)
    files = _lake_files(lake)
    sample = rnd.sample(files, min(n_files, len(files)))
    now_bytes = sum(p.stat().st_size for p in sample)
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in sample)
    pages = {p: _first_pages(p, 40, rnd) for p in sample}
    sizes = sorted(set(sizes) | {BASELINE_ROWS})
    out: dict[str, Any] = {"lake": str(lake), "files": len(sample), "rows": rows,
                           "bytes_now_per_url": round(now_bytes / rows, 3), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="layout-", dir=lake) as tmp:
        for size in sizes:
            written: dict[Path, Path] = {}
            started = time.perf_counter()
            for k, p in enumerate(sample):
                table = pq.read_table(p, schema=LAKE_SCHEMA)
                dst = Path(tmp) / f"{size}-{k}.parquet"
                pq.write_table(table, dst, row_group_size=size, store_schema=False, **parquet_options(19))
                written[p] = dst
            write_s = time.perf_counter() - started
            costs = [_page_cost(written[p], d, s, r) for p in sample for d, s, r in pages[p]]
            size_b = sum(w.stat().st_size for w in written.values())
            out["sizes"][str(size)] = {"bytes_per_url": round(size_b / rows, 3), "write_s": round(write_s, 1),
                                       "first_page_uncached": latency_ms(costs)}
            for w in written.values():
                w.unlink()
            sys.stderr.write(f"layout {size} rows/row group: {json.dumps(out['sizes'][str(size)])}\n")
    base = out["sizes"][str(BASELINE_ROWS)]
    for entry in out["sizes"].values():
        entry["bytes_vs_16384"] = round(entry["bytes_per_url"] / base["bytes_per_url"], 4)
        for q in ("p50_ms", "p99_ms"):
            entry[f"first_page_{q.split('_')[0]}_vs_16384"] = round(
                entry["first_page_uncached"][q] / base["first_page_uncached"][q], 3)
    return out


def relayout(lake: Path, rows: int, reverse: bool = False) -> dict[str, Any]:
    """Every lake file rewritten at ``rows`` rows per row group, under its own name; files already
    at that layout are skipped (a resumed run; a second process with ``reverse`` meets the first
    half-way: each file is replaced atomically, so both writing one is harmless)."""
    import pyarrow.parquet as pq

    from crawlstream.lake._schema import LAKE_SCHEMA
    from crawlstream.lake._writer import write_lake_file
    from crawlstream.settings import LakeSettings

    level = LakeSettings().zstd_level
    files = _lake_files(lake)[::-1] if reverse else _lake_files(lake)
    started = time.perf_counter()
    before = after = 0
    for k, p in enumerate(files, 1):
        pf = pq.ParquetFile(p)
        before += p.stat().st_size
        if pf.metadata.num_row_groups and all(pf.metadata.row_group(i).num_rows == rows
                                              for i in range(pf.metadata.num_row_groups - 1)) \
                and pf.metadata.row_group(pf.metadata.num_row_groups - 1).num_rows <= rows:
            after += p.stat().st_size  # already at this layout (a resumed run)
            continue
        table = pq.read_table(p, schema=LAKE_SCHEMA)
        rel = p.relative_to(lake).as_posix()
        _, size = write_lake_file(table, lake, rel.rsplit("/", 1)[0], row_group_rows=rows, zstd_level=level,
                                  name=p.name)
        after += size
        elapsed = time.perf_counter() - started
        sys.stderr.write(f"\rrelayout {k}/{len(files)} files, {elapsed:.0f} s, "
                         f"~{elapsed / k * (len(files) - k):.0f} s left ")
    sys.stderr.write("\n")
    return {"files": len(files), "rows_per_row_group": rows, "bytes_before": before, "bytes_after": after,
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_layout", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    m = sub.add_parser("measure", help="bytes and uncached first-page cost per row-group size")
    m.add_argument("lake", type=Path)
    m.add_argument("--files", type=int, default=32)
    m.add_argument("--sizes", default="4096,8192,16384,65536")
    r = sub.add_parser("relayout", help="rewrite every lake file at --rows rows per row group")
    r.add_argument("lake", type=Path)
    r.add_argument("--rows", type=int, required=True)
    r.add_argument("--reverse", action="store_true", help="last file first (a second process)")
    args = parser.parse_args(argv)
    if not (args.lake / "urls").is_dir():
        parser.error(f"{args.lake} has no urls/ directory: not a lake")
    if args.action == "measure":
        result = measure(args.lake, args.files, [int(s) for s in args.sizes.split(",")])
    else:
        if args.rows <= 0:
            parser.error("--rows must be positive")
        result = relayout(args.lake, args.rows, args.reverse)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
