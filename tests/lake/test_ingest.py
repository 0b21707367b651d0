"""`crawlstream ingest`: every format, gzip/zstd, invalid URLs counted by reason."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from crawlstream.cli import main
from crawlstream.ingest import ingest_files, iter_batches
from crawlstream.lake import LakeWriter

URLS = ["http://www.example.com/a?b=2&a=1", "https://news.example.org/x#frag", "not a url", "", "mailto:x@y.z"]


def _lake_urls(root: Path) -> list[str]:
    import duckdb

    glob = (root / "urls" / "**" / "*.parquet").as_posix()
    return [r[0] for r in duckdb.sql(
        f"SELECT scheme || '://' || host_prefix || domain || path_query FROM read_parquet('{glob}') ORDER BY 1"
    ).fetchall()]


def _files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    text = "\ufeff" + "\n".join(URLS) + "\n"
    out["text"] = tmp_path / "list.txt"
    out["text"].write_text(text)
    out["text.gz"] = tmp_path / "list.txt.gz"
    out["text.gz"].write_bytes(gzip.compress(text.encode()))
    out["text.zst"] = tmp_path / "list.txt.zst"
    out["text.zst"].write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    jsonl = "".join(json.dumps({"url": u, "r": "sub", "ts": 1234}) + "\n" for u in URLS)
    out["jsonl.gz"] = tmp_path / "rows.jsonl.gz"
    out["jsonl.gz"].write_bytes(gzip.compress(jsonl.encode()))
    csv = "url,tag\n" + "".join(f'"{u}",t{i}\n' for i, u in enumerate(URLS))
    out["csv.zst"] = tmp_path / "rows.csv.zst"
    out["csv.zst"].write_bytes(zstandard.ZstdCompressor().compress(csv.encode()))
    out["parquet"] = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"url": URLS, "n": list(range(len(URLS)))}), out["parquet"])
    return out


@pytest.mark.parametrize("kind", ["text", "text.gz", "text.zst", "jsonl.gz", "csv.zst", "parquet"])
def test_each_format_imports_valid_urls_and_counts_invalid_ones_by_reason(tmp_path: Path, kind: str) -> None:
    path = _files(tmp_path)[kind]
    root = tmp_path / "data"
    stats = ingest_files([path], 3, LakeWriter(root), ts_field="ts", rejects_dir=root / "rejects")
    assert stats.rows == 5 and stats.valid == 2
    assert stats.invalid == {"scheme": 2, "blank": 1}
    assert _lake_urls(root) == ["http://www.example.com/a?a=1&b=2", "https://news.example.org/x"]
    rejects = [json.loads(line) for line in Path(stats.rejects_files[0]).read_text().splitlines()]
    assert [r["row"] for r in rejects] == [3, 4, 5]
    assert all(r["reason"] for r in rejects)


def test_jsonl_keeps_other_fields_as_extras_and_reads_the_timestamp(tmp_path: Path) -> None:
    path = _files(tmp_path)["jsonl.gz"]
    batch = next(iter_batches(path, ts_field="ts"))
    assert batch.ts_ms[0] == 1234 and json.loads(batch.extras[0] or "{}") == {"r": "sub"}


def test_a_missing_url_field_is_counted_not_dropped(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"u": "http://a.com/"}\n{"url": "http://b.com/"}\n')
    stats = ingest_files([path], 1, LakeWriter(tmp_path / "d"))
    assert stats.valid == 1 and stats.invalid == {"missing": 1}


def test_real_reddit_month_imports_with_a_configured_url_field(tmp_path: Path, shared_data: Path) -> None:
    src = shared_data / "urls" / "reddit-webtext" / "RS_v2_2008-03.urk.json-00.gz"
    head = tmp_path / "head.jsonl.gz"
    with gzip.open(src, "rt") as fh:
        lines = [next(fh) for _ in range(2000)]
    head.write_bytes(gzip.compress("".join(lines).encode()))
    stats = ingest_files([head], 200803, LakeWriter(tmp_path / "d"), url_field="u")
    assert stats.rows == 2000
    assert stats.valid + sum(stats.invalid.values()) == 2000
    assert stats.valid > 1900
    assert stats.valid == len(_lake_urls(tmp_path / "d")) + stats.duplicates_dropped


def test_cli_prints_a_json_summary_and_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _files(tmp_path)["text.gz"]
    rc = main(["ingest", str(path), "--dataset-id", "9", "--data-dir", str(tmp_path / "d")])
    out, err = capsys.readouterr()
    assert rc == 0
    summary = json.loads(out)
    assert summary["valid"] == 2 and summary["invalid"] == 3 and "blank" in summary["invalid_by_reason"]
    assert "rows/s" in err and "invalid 3" in err
    rc = main(["index", "build", "--data-dir", str(tmp_path / "d")])
    assert rc == 0 and json.loads(capsys.readouterr().out)["rows_scanned"] == 2


@pytest.mark.parametrize("compress", [False, True])
def test_a_csv_line_with_a_broken_quote_costs_that_row_only(tmp_path: Path, compress: bool) -> None:
    """Row 251 of 500 has an unterminated quote (pyarrow alone read it on into row 252 and lost
    it silently): every other row is ingested, the broken one and a line with too many fields
    are counted and written to the rejects file, and the counts add up to the input's rows."""
    lines = ["url,title,rank"]
    for i in range(1, 501):
        title = f'"title {i}' if i == 251 else f'"title, {i}"'
        extra = ",surplus" if i == 400 else ""
        lines.append(f"https://site{i}.example.com/p,{title},{i}{extra}")
    text = "\n".join(lines) + "\n"
    path = tmp_path / ("d.csv.gz" if compress else "d.csv")
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    writer = LakeWriter(tmp_path / "lake")
    stats = ingest_files([path], 3, writer, rejects_dir=tmp_path / "rejects")
    assert (stats.rows, stats.valid, dict(stats.invalid)) == (500, 498, {"csv_syntax": 1, "csv_columns": 1})
    assert stats.rows == len(lines) - 1
    rejects = [json.loads(line) for line in (tmp_path / "rejects" / f"{path.name}.jsonl").read_text().splitlines()]
    assert [(r["row"], r["reason"]) for r in rejects] == [(251, "csv_syntax"), (400, "csv_columns")]
    assert rejects[0]["url"] == 'https://site251.example.com/p,"title 251,251'
    expected = sorted(f"https://site{i}.example.com/p" for i in range(1, 501) if i not in (251, 400))
    assert _lake_urls(tmp_path / "lake") == expected
