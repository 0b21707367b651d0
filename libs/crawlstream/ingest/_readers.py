"""Read URL datasets from files as batches: text, CSV, JSONL, Parquet; gzip/zstd transparently.

Readers only parse the container; they never judge URLs (that is ``_run``'s job), so a row
whose URL field is missing still comes out (as ``None``) and gets counted, not dropped.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import zstandard

from crawlstream.errors import BadDataError

__all__ = ["FORMATS", "Batch", "detect_format", "iter_batches", "open_decompressed"]

logger = logging.getLogger(__name__)

FORMATS = ("auto", "text", "csv", "jsonl", "parquet")
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"


@dataclass(slots=True)
class Batch:
    first_row: int  # 1-based row (line) number of the first record, for reject reports
    urls: list[str | None]
    ts_ms: list[int | None]
    extras: list[str | None]
    bad_ts: int = 0
    # index in the batch -> (reason, message) of a row that could not be parsed at all; its
    # ``urls`` entry holds the raw line, for the rejects file
    bad: dict[int, tuple[str, str]] = field(default_factory=dict)


def open_decompressed(path: Path) -> BinaryIO:
    """A binary stream of ``path``'s content, gunzipped or un-zstd'ed by magic number."""
    fh = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    magic = fh.read(4)
    fh.seek(0)
    if magic.startswith(_GZIP):
        return cast(BinaryIO, gzip.GzipFile(fileobj=fh, mode="rb"))
    if magic == _ZSTD:
        return cast(BinaryIO, zstandard.ZstdDecompressor().stream_reader(fh, closefd=True))
    return fh


def detect_format(path: Path) -> str:
    name = path.name.lower()
    for suffix in (".gz", ".gzip", ".zst", ".zstd"):
        name = name.removesuffix(suffix)
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".csv", ".tsv")):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    with open_decompressed(path) as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"PAR1"):
        return "parquet"
    return "jsonl" if head.startswith(b"{") else "text"


def _ts_ms(value: Any) -> int | None:
    """Epoch milliseconds from an int/float (ms) or an ISO-8601 string; ValueError otherwise."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        if value.lstrip("-").isdigit():
            return int(value)
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return int(dt.timestamp() * 1000)
    raise ValueError(value)


def iter_batches(
    path: Path,
    *,
    fmt: str = "auto",
    url_field: str = "url",
    ts_field: str | None = None,
    keep_extras: bool = True,
    batch_rows: int = 65_536,
) -> Iterator[Batch]:
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "text":
        yield from _text(path, batch_rows)
    elif fmt == "jsonl":
        yield from _jsonl(path, url_field, ts_field, keep_extras, batch_rows)
    elif fmt == "csv":
        if _has_unbalanced_quote(path):
            # pyarrow would read an unterminated quote on into the following rows (and lose
            # them, silently): parse line by line instead, so a broken line costs one row.
            yield from _csv_by_line(path, url_field, ts_field, keep_extras, batch_rows)
        else:
            yield from _table_batches(path, "csv", url_field, ts_field, keep_extras)
    elif fmt == "parquet":
        yield from _table_batches(path, "parquet", url_field, ts_field, keep_extras)
    else:
        raise BadDataError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _has_unbalanced_quote(path: Path) -> bool:
    """Whether a line of the CSV has an odd number of double quotes: an unterminated quoted
    field (or a value spanning lines, which the line-by-line reader rejects row by row)."""
    with open_decompressed(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)
        return any(line.count('"') % 2 for line in text)


def _csv_by_line(
    path: Path, url_field: str, ts_field: str | None, keep_extras: bool, batch_rows: int
) -> Iterator[Batch]:
    """CSV parsed one physical line at a time (slower than pyarrow, used only when a line is
    broken): a line that is not valid CSV, or has the wrong number of fields, is a bad row."""
    with open_decompressed(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline=None)
        header_line = next(text, "")
        try:
            header = next(csv.reader([header_line], strict=True))
        except (csv.Error, StopIteration):
            raise BadDataError(f"{path}: the CSV header line is not valid CSV: {header_line[:200]!r}") from None
        if url_field not in header:
            raise BadDataError(f"{path}: expected a column {url_field!r}, found {header}; pass --url-field NAME")
        url_at = header.index(url_field)
        ts_at = header.index(ts_field) if ts_field is not None and ts_field in header else None
        others = [(i, name) for i, name in enumerate(header) if i not in (url_at, ts_at)]
        batch = Batch(1, [], [], [])
        for n, line in enumerate(text, 1):
            line = line.rstrip("\n")
            url: str | None = None
            ts: int | None = None
            extras: str | None = None
            try:
                row = next(csv.reader([line], strict=True)) if line else [""] * len(header)
            except csv.Error as exc:
                batch.bad[len(batch.urls)] = ("csv_syntax", f"not valid CSV ({exc})")
                row = None
            if row is not None and len(row) != len(header):
                batch.bad[len(batch.urls)] = ("csv_columns", f"{len(row)} fields, the header has {len(header)}")
                row = None
            if row is None:
                url = line
            else:
                url = row[url_at]
                if ts_at is not None:
                    try:
                        ts = _ts_ms(row[ts_at])
                    except ValueError:
                        batch.bad_ts += 1
                if keep_extras and others:
                    values = {name: row[i] for i, name in others if row[i] != ""}
                    extras = json.dumps(values, ensure_ascii=False, separators=(",", ":")) if values else None
            batch.urls.append(url)
            batch.ts_ms.append(ts)
            batch.extras.append(extras)
            if len(batch.urls) >= batch_rows:
                yield batch
                batch = Batch(n + 1, [], [], [])
        if batch.urls:
            yield batch


def _text(path: Path, batch_rows: int) -> Iterator[Batch]:
    with open_decompressed(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline=None)
        urls: list[str | None] = []
        first = 1
        for n, line in enumerate(text, 1):
            urls.append(line.strip())
            if len(urls) >= batch_rows:
                yield Batch(first, urls, [None] * len(urls), [None] * len(urls))
                urls, first = [], n + 1
        if urls:
            yield Batch(first, urls, [None] * len(urls), [None] * len(urls))


def _jsonl(path: Path, url_field: str, ts_field: str | None, keep_extras: bool, batch_rows: int) -> Iterator[Batch]:
    with open_decompressed(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline=None)
        batch = Batch(1, [], [], [])
        for n, line in enumerate(text, 1):
            url: str | None = None
            ts: int | None = None
            extras: str | None = None
            line = line.strip()
            if line:
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                if isinstance(obj, dict):
                    u = obj.pop(url_field, None)
                    url = u if isinstance(u, str) else None
                    if ts_field is not None:
                        try:
                            ts = _ts_ms(obj.pop(ts_field, None))
                        except ValueError:
                            batch.bad_ts += 1
                    if keep_extras and obj:
                        extras = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
            else:
                url = ""
            batch.urls.append(url)
            batch.ts_ms.append(ts)
            batch.extras.append(extras)
            if len(batch.urls) >= batch_rows:
                yield batch
                batch = Batch(n + 1, [], [], [])
        if batch.urls:
            yield batch


def _table_batches(
    path: Path, kind: str, url_field: str, ts_field: str | None, keep_extras: bool
) -> Iterator[Batch]:
    reader: Any
    if kind == "csv":
        stream = pa.PythonFile(open_decompressed(path), mode="r")
        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(block_size=4 << 20),
            convert_options=pacsv.ConvertOptions(column_types={url_field: pa.string()}, strings_can_be_null=False),
        )
        batches = iter(reader)
    else:
        pf = pq.ParquetFile(path)
        batches = pf.iter_batches(batch_size=65_536)
    first = 1
    for rb in batches:
        names = rb.schema.names
        if url_field not in names:
            raise BadDataError(
                f"{path}: expected a column {url_field!r}, found {names}; pass --url-field NAME"
            )
        urls = rb.column(url_field).cast(pa.string()).to_pylist()
        n = len(urls)
        batch = Batch(first, urls, [None] * n, [None] * n)
        if ts_field is not None and ts_field in names:
            col = rb.column(ts_field)
            if pa.types.is_timestamp(col.type):
                batch.ts_ms = col.cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
            else:
                out: list[int | None] = []
                for v in col.to_pylist():
                    try:
                        out.append(_ts_ms(v))
                    except ValueError:
                        out.append(None)
                        batch.bad_ts += 1
                batch.ts_ms = out
        others = [c for c in names if c not in (url_field, ts_field)]
        if keep_extras and others:
            cols = {c: rb.column(c).to_pylist() for c in others}
            batch.extras = [
                json.dumps({c: cols[c][i] for c in others if cols[c][i] is not None},
                           ensure_ascii=False, separators=(",", ":"), default=str)
                for i in range(n)
            ]
        first += n
        yield batch
