"""Property tests (hypothesis) of the ingest readers: whatever the bytes, only ``BadDataError``
escapes (naming the file), and when the file is read every row is counted exactly once: rows ==
the input's lines (after a CSV header) == valid + invalid by reason == the rejects file's
entries plus the valid rows. Parquet files are built, then cut or have a byte flipped."""

from __future__ import annotations

import gzip
import io
import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawlstream.errors import BadDataError, CrawlstreamError
from crawlstream.ingest import IngestStats, check_input, ingest_files, iter_batches
from crawlstream.lake import LakeWriter
from crawlstream.settings import LakeSettings

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_TRICKY = [b"", b" ", b'"', b'""', b",", b",,", b"\r", b"\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"{", b"[]", b"null",
           b'{"url": 1}', b'{"url": null}', b'{"url": "\\ud800"}', b'{"url": "https://a.example.com/"}',
           b"https://a.example.com/", b'"https://a.example.com/,x', b"https://b.example.com/,1",
           b'"https://c.example.com/","t, 1"', b'x,"a"b', b"9" * 5000, b"[" * 3000]
_LINE = st.one_of(
    st.sampled_from(_TRICKY),
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.builds(lambda url, rest: json.dumps({"url": url, **rest}).encode(),
              st.one_of(st.text(max_size=30), st.integers(), st.none()),
              st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=2)),
    st.lists(st.sampled_from(["https://d.example.com/p", "", '"q,"', "7", '"']), min_size=1, max_size=4)
    .map(lambda fields: ",".join(fields).encode()),
)
_HEADERS = st.one_of(st.just(b"url,n"), st.just(b"n,url,t"), st.just(b"url"), _LINE)


def _line_count(data: bytes) -> int:
    """Lines as the readers count them: split at \\n, a last line without one counts too."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data)
    if compression == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


def _ingest(path: Path, fmt: str, tmp: Path) -> IngestStats | None:
    """ingest_files's stats with the invariants checked, or None when the file was refused."""
    try:
        writer = LakeWriter(tmp / "lake", config=LakeSettings(zstd_level=1))
        stats = ingest_files([path], 1, writer, fmt=fmt, ts_field="t", rejects_dir=tmp / "rejects")
    except CrawlstreamError as exc:
        assert isinstance(exc, BadDataError) and str(path) in str(exc)
        return None
    assert stats.rows == stats.valid + sum(stats.invalid.values())
    rejects_file = tmp / "rejects" / f"{path.name}.jsonl"
    rejects = [json.loads(line) for line in rejects_file.read_text().splitlines()] if rejects_file.exists() else []
    assert len(rejects) == sum(stats.invalid.values())
    rows = [r["row"] for r in rejects]
    assert rows == sorted(set(rows)) and all(1 <= r <= stats.rows for r in rows)
    # The same rows in small batches: numbered consecutively, none lost at a batch boundary.
    expected_row = 1
    for batch in iter_batches(path, fmt=fmt, ts_field="t", batch_rows=7):
        assert batch.first_row == expected_row and 0 < len(batch) <= 7
        assert len(batch.urls) == len(batch.ts_ms) == len(batch.extras)
        assert all(0 <= i < len(batch) for i in batch.bad)
        expected_row += len(batch)
    assert expected_row - 1 == stats.rows
    return stats


@PROPERTY
@given(fmt=st.sampled_from(["text", "jsonl", "csv"]), header=_HEADERS, lines=st.lists(_LINE, max_size=30),
       newline_at_end=st.booleans(), compression=st.sampled_from(["", "gzip", "zstd"]))
def test_any_lines_are_each_counted_once_or_the_file_is_refused(
    fmt: str, header: bytes, lines: list[bytes], newline_at_end: bool, compression: str
) -> None:
    data = b"\n".join([header, *lines] if fmt == "csv" else lines) + (b"\n" if newline_at_end and lines else b"")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.data"
        path.write_bytes(_compress(data, compression))
        stats = _ingest(path, fmt, Path(tmp))
    if stats is not None:
        assert stats.rows == max(_line_count(data) - (fmt == "csv"), 0)
        assert "truncated" not in stats.invalid and not stats.damaged


@PROPERTY
@given(fmt=st.sampled_from(["auto", "text", "jsonl", "csv", "parquet"]), data=st.binary(max_size=300),
       prefix=st.sampled_from([b"", b"PAR1", b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"url\n"]))
def test_arbitrary_bytes_are_refused_or_counted_line_by_line(fmt: str, data: bytes, prefix: bytes) -> None:
    data = prefix + data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.bin"
        path.write_bytes(data)
        stats = _ingest(path, fmt, Path(tmp))
    if stats is not None and not data.startswith((b"\x1f\x8b", b"\x28\xb5\x2f\xfd")) and fmt != "parquet":
        assert stats.rows in (_line_count(data), _line_count(data) - 1)  # less a CSV header


@settings(PROPERTY, max_examples=20)
@given(lines=st.lists(_LINE, max_size=20), cut=st.floats(0.3, 0.95), compression=st.sampled_from(["gzip", "zstd"]),
       fmt=st.sampled_from(["text", "jsonl"]))
def test_a_compressed_stream_cut_short_keeps_its_readable_lines_and_counts_one_truncated_row(
    lines: list[bytes], cut: float, compression: str, fmt: str
) -> None:
    """Enough lines first that the cut falls after the first 4 KiB, which check_input reads (and,
    for zstd, after the first 128 KiB block: a block cut short yields nothing at all)."""
    urls = [f"https://example.com/{i * 7919}" for i in range(2000 if compression == "gzip" else 20_000)]
    head = [(json.dumps({"url": u}) if fmt == "jsonl" else u).encode() for u in urls]
    data = b"\n".join([*head, *lines]) + b"\n"
    compressed = _compress(data, compression)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cut.bin"
        path.write_bytes(compressed[: int(len(compressed) * cut)])
        stats = _ingest(path, fmt, Path(tmp))
    assert stats is not None
    assert stats.invalid["truncated"] == 1 and len(stats.damaged) == 1
    assert stats.rows <= _line_count(data) + 1 and stats.valid > 0


_URL_VALUES = st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["https://a.example.com/x", ""]))


@PROPERTY
@given(urls=st.lists(_URL_VALUES, max_size=60), row_group_rows=st.integers(1, 25),
       compression=st.sampled_from(["none", "zstd", "snappy"]), dictionary=st.booleans(),
       damage=st.one_of(st.none(), st.tuples(st.sampled_from(["cut", "flip"]), st.floats(0, 1), st.integers(0, 7))))
def test_a_parquet_file_is_refused_or_every_row_the_footer_lists_is_counted(
    urls: list[str | None], row_group_rows: int, compression: str, dictionary: bool,
    damage: tuple[str, float, int] | None,
) -> None:
    buf = io.BytesIO()
    table = pa.table({"url": pa.array(urls, pa.string()), "t": list(range(len(urls))),
                      "tag": [None if u is None else u[:3] for u in urls]})
    pq.write_table(table, buf, row_group_size=row_group_rows, compression=compression, use_dictionary=dictionary)
    data = bytearray(buf.getvalue())
    if damage is not None:
        kind, where, bit = damage
        at = min(int(len(data) * where), len(data) - 1)
        if kind == "cut":
            data = data[:at]
        else:
            data[at] ^= 1 << bit
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.parquet"
        path.write_bytes(bytes(data))
        stats = _ingest(path, "auto", Path(tmp))
    if damage is None:
        assert stats is not None and stats.rows == len(urls) and not stats.damaged
        assert stats.invalid["missing"] == urls.count(None)
    elif stats is not None:
        assert stats.rows == len(urls)


def test_a_parquet_footer_whose_column_name_is_not_utf8_is_refused_as_damaged(tmp_path: Path) -> None:
    """Found by the property above in session 21's `make test`: a flipped byte in a column's name in the
    footer made pyarrow raise UnicodeDecodeError, which escaped as a crash instead of a refusal."""
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"url": ["https://example.com/a"], "t": [1]}), path)
    data = path.read_bytes()
    at = data.index(b"url", len(data) - 8 - int.from_bytes(data[-8:-4], "little"))  # the footer's column path
    path.write_bytes(data[:at + 1] + b"\xf2" + data[at + 2:])
    with pytest.raises(BadDataError, match=r"not a readable Parquet file|footer does not decode"):
        check_input(path)
