"""`crawlstream ingest` never loses a row silently: every format is read row by row, each bad row
is counted by reason and written to the rejects file, and rows == valid + invalid (issue 16)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawlstream.cli import main
from crawlstream.errors import BadDataError
from crawlstream.ingest import IngestStats, ingest_files, iter_batches
from crawlstream.lake import LakeWriter
from crawlstream.settings import LakeSettings


def _ingest(tmp_path: Path, *paths: Path, **kwargs: Any) -> IngestStats:
    stats = ingest_files(list(paths), 3, LakeWriter(tmp_path / "lake", config=LakeSettings(zstd_level=1)),
                         rejects_dir=tmp_path / "rejects", **kwargs)
    assert stats.rows == stats.valid + sum(stats.invalid.values())
    for file in stats.files:
        assert file.rows == file.valid + sum(file.invalid.values())
    return stats


def _rejects(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    path = tmp_path / "rejects" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _lake_rows(tmp_path: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in (tmp_path / "lake").rglob("*.parquet"))


@pytest.mark.parametrize("compress", [False, True])
def test_a_broken_json_line_costs_that_line_only(tmp_path: Path, compress: bool) -> None:
    """Line 251 of 500 lacks its closing brace: it is rejected as json_syntax, the 499 others go in."""
    lines = [json.dumps({"url": f"https://site{i}.example.com/p", "rank": i}) for i in range(1, 501)]
    lines[250] = lines[250][:-1]
    text = ("\n".join(lines) + "\n").encode()
    path = tmp_path / ("d.jsonl.gz" if compress else "d.jsonl")
    path.write_bytes(gzip.compress(text) if compress else text)
    stats = _ingest(tmp_path, path)
    assert (stats.rows, stats.valid, dict(stats.invalid)) == (500, 499, {"json_syntax": 1})
    rejects = _rejects(tmp_path, path.name)
    assert [(r["row"], r["reason"]) for r in rejects] == [(251, "json_syntax")]
    assert rejects[0]["url"] == lines[250]
    assert _lake_rows(tmp_path) == 499


def test_jsonl_rows_are_rejected_each_with_its_own_reason(tmp_path: Path) -> None:
    lines = [
        b'{"url": "https://a.example.com/"}',
        b"[1, 2]",
        b'"https://b.example.com/"',
        b'{"u": "https://c.example.com/"}',
        b'{"url": null}',
        b'{"url": 42}',
        b'{"url": "https://d.example.com/\xff"}',
        b"",
        b"   ",
        b'{"url": "https://e.example.com/\\ud800"}',
        b'{"url": "https://f.example.com/", "ts": "not a time"}',
        b'{"url": "https://g.example.com/"',
        b'{"url": ""}',
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    stats = _ingest(tmp_path, path, ts_field="ts")
    assert stats.rows == len(lines) and stats.valid == 2 and stats.bad_ts == 1
    assert [(r["row"], r["reason"]) for r in _rejects(tmp_path, path.name)] == [
        (2, "json_not_object"), (3, "json_not_object"), (4, "missing"), (5, "missing"), (6, "url_not_string"),
        (7, "utf8"), (8, "blank"), (9, "blank"), (10, "utf8"), (12, "json_syntax"), (13, "blank"),
    ]


def test_rejected_rows_keep_their_exact_reasons_and_messages(tmp_path: Path) -> None:
    """The batch canonicalization (ADR 032) keeps each rejects message as the per-row import wrote
    it: a null names the URL field, a reader rejection keeps the reader's reason, and an invalid
    URL has canonicalize's own message."""
    lines = [b'{"link": null}', b'{"link": ""}', b'{"link": "ftp://a.example.com/"}', b'"http://b.example.com/"',
             b'{"link": "HTTP://C.Example.COM:80/x/../y?b=2&a=1#f"}', b'{"link": "http://a..b/"}']
    path = tmp_path / "exact.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    stats = _ingest(tmp_path, path, url_field="link")
    assert stats.valid == 1
    assert [(r["row"], r["reason"], r["error"]) for r in _rejects(tmp_path, path.name)] == [
        (1, "missing", "no field 'link' (or it is null)"),  # the JSONL reader's
        (2, "blank", "empty line or value"),
        (3, "scheme", "expected an http or https URL, found scheme 'ftp'"),
        (4, "json_not_object", _rejects(tmp_path, path.name)[3]["error"]),
        (6, "host", "expected a host of letters, digits, '-', '_' and dots (at most 253), found 'a..b'"),
    ]
    assert _rejects(tmp_path, path.name)[3]["url"] == '"http://b.example.com/"'
    table = tmp_path / "exact.parquet"
    pq.write_table(pa.table({"link": pa.array([None, "http://d.example.com/", ""], pa.string())}), table)
    _ingest(tmp_path, table, url_field="link")
    assert [(r["row"], r["reason"], r["error"]) for r in _rejects(tmp_path, table.name)] == [
        (1, "missing", "no value in 'link' (null)"), (3, "blank", "empty line or value")]


@pytest.mark.parametrize(("name", "header"), [("u.txt", b""), ("u.jsonl", b""), ("u.csv", b"url,n\n")])
def test_a_line_that_is_not_utf8_costs_that_line_only(tmp_path: Path, name: str, header: bytes) -> None:
    def line(i: int) -> bytes:
        url = f"https://site{i}.example.com/".encode() + (b"caf\xe9" if i == 2 else b"")
        if name.endswith(".jsonl"):
            return b'{"url": "' + url + b'"}'
        return url + (b",%d" % i if name.endswith(".csv") else b"")

    path = tmp_path / name
    path.write_bytes(header + b"\n".join(line(i) for i in range(1, 4)) + b"\n")
    stats = _ingest(tmp_path, path)
    assert (stats.rows, stats.valid, dict(stats.invalid)) == (3, 2, {"utf8": 1})
    (reject,) = _rejects(tmp_path, name)
    assert reject["row"] == 2 and "\\xe9" in reject["url"]


def test_a_csv_with_wrong_field_counts_and_blank_lines_counts_each_row(tmp_path: Path) -> None:
    """No quote anywhere (pyarrow used to read such a file: it skipped blank lines uncounted and
    failed the whole file on a row with a field too many)."""
    path = tmp_path / "d.csv"
    path.write_text("url,rank\nhttps://a.example.com/,1\n\nhttps://b.example.com/,2,3\nhttps://c.example.com/,x\n")
    stats = _ingest(tmp_path, path)
    assert (stats.rows, stats.valid, dict(stats.invalid)) == (4, 2, {"blank": 1, "csv_columns": 1})
    assert [(r["row"], r["reason"]) for r in _rejects(tmp_path, path.name)] == [(2, "blank"), (3, "csv_columns")]


def test_a_tsv_is_split_at_tabs(tmp_path: Path) -> None:
    path = tmp_path / "d.tsv"
    path.write_text("rank\turl\n1\thttps://a.example.com/x,y\n")
    batch = next(iter_batches(path))
    assert batch.urls == ["https://a.example.com/x,y"] and batch.extras == ['{"rank":"1"}']


def test_a_truncated_gzip_keeps_its_readable_rows_and_reports_the_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "".join(f"https://site{i}.example.com/page/{i * 7919}\n" for i in range(20_000)).encode()
    whole = gzip.compress(text)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    stats = _ingest(tmp_path, path)
    assert stats.invalid == {"truncated": 1} and 0 < stats.valid < 20_000
    (damaged,) = stats.damaged
    assert damaged.damage is not None and damaged.damage["row"] == stats.rows
    rc = main(["ingest", str(path), "--dataset-id", "4", "--data-dir", str(tmp_path / "d"), "--no-publish"])
    out, err = capsys.readouterr()
    assert rc == 3
    assert json.loads(out)["damaged_files"] == [str(path)] and "cut.txt.gz is damaged from row" in err


def _parquet(path: Path, urls: list[Any], **kwargs: Any) -> Path:
    pq.write_table(pa.table({"url": urls, "n": list(range(len(urls)))}), path, **kwargs)
    return path


def test_parquet_null_urls_are_counted_as_missing_with_their_row_numbers(tmp_path: Path) -> None:
    urls = [None if i % 100 == 7 else f"https://site{i}.example.com/" for i in range(1000)]
    path = _parquet(tmp_path / "n.parquet", urls, row_group_size=300)
    stats = _ingest(tmp_path, path)
    assert (stats.rows, stats.valid, dict(stats.invalid)) == (1000, 990, {"missing": 10})
    assert [r["row"] for r in _rejects(tmp_path, path.name)] == [i + 1 for i in range(1000) if i % 100 == 7]


def test_a_parquet_url_column_of_binary_rejects_the_values_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"url": pa.array([b"https://a.example.com/", b"https://b.example.com/\xff"])}), path)
    stats = _ingest(tmp_path, path)
    assert (stats.valid, dict(stats.invalid)) == (1, {"utf8": 1})


@pytest.mark.parametrize("damage", ["truncated", "not parquet", "empty", "gzipped"])
def test_a_parquet_file_that_cannot_be_read_stops_the_import_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"url": "https://a.example.com/"}\n')
    bad = _parquet(tmp_path / "bad.parquet", [f"https://s{i}.example.com/" for i in range(100)])
    data = bad.read_bytes()
    bad.write_bytes({"truncated": data[: len(data) - 20], "not parquet": b"url\nhttps://a.example.com/\n",
                     "empty": b"", "gzipped": gzip.compress(data)}[damage])
    with pytest.raises(BadDataError, match=r"bad\.parquet"):
        ingest_files([good, bad], 3, LakeWriter(tmp_path / "lake"))
    rc = main(["ingest", str(good), str(bad), "--dataset-id", "3", "--data-dir", str(tmp_path / "d"),
               "--no-publish"])
    assert rc == 1 and "bad.parquet" in capsys.readouterr().err
    assert not [*(tmp_path / "lake").rglob("*.parquet"), *(tmp_path / "d").rglob("*.parquet")]


def test_a_parquet_url_column_that_is_not_strings_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"url": [1, 2], "link": ["https://a.example.com/", None]}), path)
    with pytest.raises(BadDataError, match="holds int64, expected strings; pass --url-field"):
        iter_batches(path)
    assert next(iter_batches(path, url_field="link")).urls == ["https://a.example.com/", None]


def test_a_parquet_row_group_that_does_not_decode_costs_its_own_rows_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = pa.table({"url": [f"https://site{i}.example.com/" for i in range(1000)], "n": list(range(1000))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=250, compression="zstd", use_dictionary=False)
    data = bytearray(buf.getvalue())
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[middle : middle + 16] = b"\xff" * 16
    path = tmp_path / "rg.parquet"
    path.write_bytes(bytes(data))
    stats = _ingest(tmp_path, path)
    assert (stats.rows, stats.valid, dict(stats.invalid)) == (1000, 750, {"parquet_row_group": 250})
    rejects = _rejects(tmp_path, path.name)
    assert [r["row"] for r in rejects] == list(range(251, 501))
    assert "row group 1 does not decode" in rejects[0]["error"]
    assert [f.path for f in stats.damaged] == [str(path)]
    rc = main(["ingest", str(path), "--dataset-id", "3", "--data-dir", str(tmp_path / "d"), "--no-publish"])
    assert rc == 3 and json.loads(capsys.readouterr().out)["files"][0]["invalid_by_reason"] == {
        "parquet_row_group": 250
    }


def test_parquet_timestamps_in_nanoseconds_and_out_of_range_values(tmp_path: Path) -> None:
    """Sub-millisecond timestamps are truncated to ms (a safe cast refused them); a value Python
    cannot hold (year 10000) rejects its row as parquet_value instead of failing the file."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({
        "url": ["https://a.example.com/", "https://b.example.com/", "https://c.example.com/"],
        "ts": pa.array([1_500_000_001, 2_000_000_000, 0], pa.timestamp("ns")),
        "seen": pa.array([0, 0, 253_402_300_800_000_000], pa.timestamp("us")),
    }), path)
    batch = next(iter_batches(path, ts_field="ts"))
    assert batch.ts_ms[:2] == [1500, 2000]
    assert list(batch.bad) == [2] and batch.bad[2][0] == "parquet_value" and "'seen'" in batch.bad[2][1]


def test_the_json_summary_adds_up_for_the_run_and_for_each_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"url": "https://a.example.com/"}\n{"url": \n\n[]\n')
    csv = tmp_path / "b.csv"
    csv.write_text('url,t\nhttps://b.example.com/,"x\nnot a url,y\n')
    rc = main(["ingest", str(jsonl), str(csv), "--dataset-id", "5", "--data-dir", str(tmp_path / "d"),
               "--no-publish"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert summary["rows"] == summary["valid"] + summary["invalid"] == 6
    assert summary["invalid_by_reason"] == {"json_syntax": 1, "blank": 1, "json_not_object": 1, "csv_syntax": 1,
                                            "scheme": 1}
    assert [(f["rows"], f["valid"], f["invalid"]) for f in summary["files"]] == [(4, 1, 3), (2, 0, 2)]
    assert summary["damaged_files"] == []
