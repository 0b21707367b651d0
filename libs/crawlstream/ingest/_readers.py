"""Read URL datasets from files as batches of rows: text, CSV, JSONL, Parquet; gzip/zstd transparently.

Every format is read row by row, and each row of the input comes out exactly once: as a row
for ``_run`` to judge, or as a row the reader rejected, with a reason (``Batch.bad``). So the
caller's counts add up to the input's rows: its lines for text and JSONL, its lines after the
header for CSV, its rows for Parquet. Readers only parse the container; they never judge URLs
(``_run`` does): an empty URL comes out as ``""`` and a Parquet null as ``None``, and both are
counted there.

Lines end at ``\\n`` (a ``\\r`` before it is dropped, as is a UTF-8 BOM at the start of the
file), so "line N" is what ``sed -n Np`` shows.

A file fails in one of two ways, with two outcomes:

* It cannot be read as a whole: missing, an unknown format, a gzip/zstd header that does not
  decode, not Parquet or a Parquet footer cut off, no URL column or one that does not hold
  strings, a CSV header line that is not CSV. ``check_input`` (and ``iter_batches``, before it
  returns) raises ``BadDataError`` naming the file and what to do; ``ingest_files`` checks
  every input this way before it reads any row, so nothing is written.
* It is damaged part-way: a gzip/zstd stream that ends early or breaks, a Parquet row group
  that does not decode. The rows before the damage come out as usual, the damage as rejected
  rows whose reason is in ``FILE_DAMAGE``: ``truncated`` is one row standing for the rest of
  the stream (how many lines it held cannot be known), ``parquet_row_group`` is every row of
  the row group that was not read (the footer says how many), and the next row group is read.

Reasons the readers give (``_run`` adds ``blank``, ``missing`` and the URL reasons):
``utf8`` (a line or value that is not UTF-8, or a JSON ``\\u`` escape of a lone surrogate),
``json_syntax``, ``json_not_object``, ``url_not_string``, ``missing`` (JSONL: no URL field or
null), ``csv_syntax``, ``csv_columns``, ``parquet_value`` (a value that does not convert, such
as a timestamp beyond year 9999), ``truncated``, ``parquet_row_group``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard

from crawlstream.errors import BadDataError

__all__ = ["FILE_DAMAGE", "FORMATS", "Batch", "check_input", "detect_format", "iter_batches", "open_decompressed"]

logger = logging.getLogger(__name__)

FORMATS = ("auto", "text", "csv", "jsonl", "parquet")
# Reasons that mean the file itself is damaged (not one bad row): the caller reports the file.
FILE_DAMAGE = frozenset({"truncated", "parquet_row_group"})
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_BOM = b"\xef\xbb\xbf"
_COMPRESSION_SUFFIXES = (".gz", ".gzip", ".zst", ".zstd")
# What a damaged stream raises part-way: gzip EOFError (ended early), BadGzipFile (an OSError:
# bad CRC, garbage after a member), zlib.error (bad deflate data); zstandard ZstdError.
_STREAM_ERRORS = (EOFError, OSError, zlib.error, zstandard.ZstdError)
# What converting a decoded Parquet value to Python raises: UnicodeDecodeError (a ValueError)
# for bytes that are not UTF-8, OverflowError/ValueError for a date beyond datetime's range.
_VALUE_ERRORS = (ValueError, OverflowError, pa.ArrowException)
_REPAIR = "the file was cut short or damaged in transfer: copy or download it again"
# Extras as compact JSON; built once (json.dumps with arguments builds an encoder per call).
_extras_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_extras_json_ascii = json.JSONEncoder(separators=(",", ":")).encode
_parquet_extras_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


@dataclass(slots=True)
class Batch:
    """Consecutive rows of one file, column by column.

    ``first_row`` is the 1-based number of the first row: its line for text and JSONL, its
    line after the header for CSV (data row 1 is line 2), its row for Parquet. ``bad`` maps the
    index of each row the reader rejected to ``(reason, message)``; that row's ``urls`` entry
    holds the raw line (or ``None`` when there is none), for the rejects file.
    """

    first_row: int
    urls: list[str | None] = field(default_factory=list)
    ts_ms: list[int | None] = field(default_factory=list)
    extras: list[str | None] = field(default_factory=list)
    bad_ts: int = 0
    bad: dict[int, tuple[str, str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.urls)

    def append(self, url: str | None, ts_ms: int | None = None, extras: str | None = None) -> None:
        self.urls.append(url)
        self.ts_ms.append(ts_ms)
        self.extras.append(extras)

    def reject(self, raw: str | None, reason: str, message: str) -> None:
        """Add a row the reader could not parse; ``raw`` is its text for the rejects file."""
        self.bad[len(self.urls)] = (reason, message)
        self.append(raw)


def open_decompressed(path: Path) -> BinaryIO:
    """A buffered binary stream of ``path``'s content, gunzipped or un-zstd'ed by magic number."""
    compression = _compression(path)
    if compression == "gzip":
        return cast(BinaryIO, gzip.open(path, "rb"))
    if compression == "zstd":
        return cast(BinaryIO, io.BufferedReader(_ZstdReader(open(path, "rb")), buffer_size=1 << 16))
    return open(path, "rb")


class _ZstdReader(io.RawIOBase):
    """The decompressed content of a file of zstd frames; ``EOFError`` when the file ends inside
    a frame. (``zstandard``'s own stream reader ends quietly there: a cut file would lose its
    tail, or all of it, uncounted.)"""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self._dctx = zstandard.ZstdDecompressor()
        self._frame: Any = None  # the decompressor of the frame being read, None between frames
        self._out = b""
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._at == len(self._out):
            data = self._fh.read(1 << 16)
            if not data:
                if self._frame is not None:
                    raise EOFError("the zstd stream ends inside a frame")
                return 0
            self._out, self._at = self._decompress(data), 0
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at : self._at + n]
        self._at += n
        return n

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._frame is None:
                self._frame = self._dctx.decompressobj()
            out.append(self._frame.decompress(data))
            data = b""
            if self._frame.eof:
                data, self._frame = self._frame.unused_data, None
        return b"".join(out)

    def close(self) -> None:
        self._fh.close()
        super().close()


def _compression(path: Path) -> str:
    """``"gzip"``, ``"zstd"`` or ``""``, by magic number."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise BadDataError(f"cannot read input file {path}: {exc}") from exc
    if magic.startswith(_GZIP):
        return "gzip"
    return "zstd" if magic == _ZSTD else ""


def _stem(path: Path) -> str:
    name = path.name.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def _head(path: Path, size_bytes: int = 4096) -> bytes:
    """The first ``size_bytes`` of ``path``'s decompressed content."""
    compression = _compression(path)
    try:
        with open_decompressed(path) as fh:
            return fh.read(size_bytes)
    except _STREAM_ERRORS as exc:
        if not compression:
            raise BadDataError(f"cannot read input file {path}: {exc}") from exc
        raise BadDataError(f"{path}: its start does not decompress as {compression} ({exc}); {_REPAIR} "
                           f"(check a copy with `{compression} -t`)") from exc


def detect_format(path: Path) -> str:
    """``path``'s format by its name (compression suffixes aside), else by its first bytes."""
    name = _stem(path)
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".csv", ".tsv")):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    head = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"PAR1"):
        return "parquet"
    return "jsonl" if head.startswith(b"{") else "text"


def check_input(path: Path, *, fmt: str = "auto", url_field: str = "url") -> str:
    """The format ``path`` is read as (``fmt``, or detected), once the file as a whole proves readable.

    Raises ``BadDataError`` naming the file and what to do when it does not (see the module
    docstring). Reads the first 4 KiB, and the footer of a Parquet file: cheap enough to check
    every input before any row is read.
    """
    if fmt not in FORMATS:
        raise BadDataError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise BadDataError(f"input file {path} does not exist or is not a file")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "parquet":
        _open_parquet(path, url_field).close()
        return fmt
    _head(path)
    if fmt == "csv":
        _csv_header(path, url_field)
    return fmt


def iter_batches(
    path: Path,
    *,
    fmt: str = "auto",
    url_field: str = "url",
    ts_field: str | None = None,
    keep_extras: bool = True,
    batch_rows: int = 65_536,
) -> Iterator[Batch]:
    """``path``'s rows in batches of up to ``batch_rows``, every row exactly once (module docstring).

    ``BadDataError`` for a file that cannot be read as a whole is raised by this call, not
    by the first ``next()``. ``ts_field`` names an optional timestamp (epoch ms or ISO-8601; a
    value that does not parse counts in ``Batch.bad_ts`` and the row keeps no timestamp);
    ``keep_extras`` keeps the other fields as a JSON object per row.
    """
    fmt = check_input(path, fmt=fmt, url_field=url_field)
    if fmt == "text":
        return _line_batches(path, _parse_text, batch_rows)
    if fmt == "jsonl":
        return _line_batches(path, _jsonl_parser(url_field, ts_field, keep_extras), batch_rows)
    if fmt == "csv":
        header, delimiter = _csv_header(path, url_field)
        if ts_field is not None and ts_field not in header:
            logger.warning("%s: no column %r for timestamps (columns: %s)", path, ts_field, header)
        parse = _csv_parser(header, delimiter, url_field, ts_field, keep_extras)
        return _line_batches(path, parse, batch_rows, skip_header=True)
    return _parquet(path, url_field, ts_field, keep_extras, batch_rows)


def _ts_ms(value: Any) -> int | None:
    """Epoch milliseconds from an int/float (ms), an ISO-8601 string or a datetime (without an
    offset: UTC); ValueError for anything else, including a value beyond int64."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    try:
        if isinstance(value, int | float) or (isinstance(value, str) and value.lstrip("-").isdigit()):
            ms = int(value)
        elif isinstance(value, str | datetime):
            dt = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            ms = int(dt.timestamp() * 1000)
        else:
            raise ValueError(value)
    except (OverflowError, OSError) as exc:  # int(inf); timestamp() of a far date
        raise ValueError(value) from exc
    if not -(2**63) <= ms < 2**63:
        raise ValueError(value)
    return ms


# -- line formats: text, JSONL, CSV ---------------------------------------------------------


def _lines(stream: BinaryIO, skip_header: bool) -> Iterator[bytes | Exception]:
    """The stream's lines; the error of a stream that breaks ends them, as the last item."""
    try:
        if skip_header:
            stream.readline()
        yield from stream
    except _STREAM_ERRORS as exc:
        yield exc


def _line_batches(
    path: Path, parse: Callable[[str, Batch], None], batch_rows: int, *, skip_header: bool = False
) -> Iterator[Batch]:
    """``path``'s lines in batches: each decoded line goes to ``parse``, which adds exactly one
    row to the batch (``Batch.append`` or ``Batch.reject``). A line that is not UTF-8 is
    rejected here (``utf8``); a stream that breaks ends the file with one ``truncated`` row."""
    with open_decompressed(path) as stream:
        batch = Batch(1)
        for n, raw in enumerate(_lines(stream, skip_header), 1):  # n: row number (lines after the header)
            if isinstance(raw, Exception):
                batch.reject(None, "truncated", f"the stream breaks after row {n - 1} ({raw}): the rest of "
                                                f"{path.name} cannot be read; {_REPAIR}")
                break
            if n == 1 and not skip_header:
                raw = raw.removeprefix(_BOM)
            raw = raw.rstrip(b"\n").removesuffix(b"\r")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                batch.reject(raw.decode("utf-8", "backslashreplace"), "utf8",
                             f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
            else:
                parse(line, batch)
            if len(batch.urls) >= batch_rows:
                yield batch
                batch = Batch(n + 1)
        if len(batch):
            yield batch


def _parse_text(line: str, batch: Batch) -> None:
    batch.append(line.strip())


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}.get(type(value), "value")


def _is_unicode(text: str) -> bool:
    """Whether ``text`` has no lone surrogate (which only a JSON ``\\u`` escape can put there)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _jsonl_parser(url_field: str, ts_field: str | None, keep_extras: bool) -> Callable[[str, Batch], None]:
    def parse(line: str, batch: Batch) -> None:
        text = line.strip()
        if not text:
            batch.append("")  # counted as blank
            return
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
            batch.reject(line, "json_syntax", f"not valid JSON ({exc})")
            return
        if not isinstance(obj, dict):
            batch.reject(line, "json_not_object",
                         f"a JSON {_json_kind(obj)}, expected an object with a field {url_field!r}")
            return
        url = obj.pop(url_field, None)
        if url is None:
            batch.reject(line, "missing", f"no field {url_field!r} (or it is null)")
            return
        if not isinstance(url, str):
            batch.reject(line, "url_not_string", f"field {url_field!r} is a JSON {_json_kind(url)}, expected a string")
            return
        escaped = "\\u" in text
        if escaped and not _is_unicode(url):
            batch.reject(line, "utf8",
                         f"field {url_field!r} has a \\u escape of a lone surrogate, which is not a character")
            return
        ts: int | None = None
        if ts_field is not None:
            try:
                ts = _ts_ms(obj.pop(ts_field, None))
            except ValueError:
                batch.bad_ts += 1
        extras: str | None = None
        if keep_extras and obj:
            extras = _extras_json(obj)
            if escaped and not _is_unicode(extras):
                extras = _extras_json_ascii(obj)  # lone surrogates stay escaped
        batch.append(url, ts, extras)

    return parse


def _csv_header(path: Path, url_field: str) -> tuple[list[str], str]:
    """The CSV's column names and delimiter (a tab for ``.tsv``); an empty file has just ``[url_field]``."""
    delimiter = "\t" if _stem(path).endswith(".tsv") else ","
    try:
        with open_decompressed(path) as stream:
            raw = stream.readline()
    except _STREAM_ERRORS as exc:
        raise BadDataError(f"{path}: the header line does not decompress ({exc}); {_REPAIR}") from exc
    if not raw:
        return [url_field], delimiter
    raw = raw.removeprefix(_BOM).rstrip(b"\n").removesuffix(b"\r")
    try:
        header = next(csv.reader([raw.decode("utf-8")], delimiter=delimiter, strict=True), [])
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BadDataError(f"{path}: the first line is not a CSV header ({exc}): {raw[:200]!r}; "
                           f"it must name the columns, one of them {url_field!r}") from exc
    if url_field not in header:
        raise BadDataError(f"{path}: expected a column {url_field!r}, found {header[:50]}; pass --url-field NAME")
    return header, delimiter


def _csv_parser(
    header: list[str], delimiter: str, url_field: str, ts_field: str | None, keep_extras: bool
) -> Callable[[str, Batch], None]:
    """One CSV line -> one row. A line without quotes is split at the delimiter (fast); one with
    quotes goes through the ``csv`` module, strict. A value spanning lines is not supported: each
    of its lines is rejected (``csv_syntax`` or ``csv_columns``), which keeps a broken quote from
    swallowing the lines after it."""
    width = len(header)
    url_at = header.index(url_field)
    ts_at = header.index(ts_field) if ts_field is not None and ts_field in header else None
    others = [(i, name) for i, name in enumerate(header) if i not in (url_at, ts_at)] if keep_extras else []

    def parse(line: str, batch: Batch) -> None:
        if not line:
            batch.append("")  # counted as blank
            return
        if '"' in line or "\r" in line or "\0" in line:
            try:
                row = next(csv.reader([line], delimiter=delimiter, strict=True), [])
            except csv.Error as exc:
                batch.reject(line, "csv_syntax", f"not valid CSV ({exc})")
                return
        else:
            row = line.split(delimiter)
        if len(row) != width:
            batch.reject(line, "csv_columns", f"{len(row)} fields, the header has {width}")
            return
        ts: int | None = None
        if ts_at is not None:
            try:
                ts = _ts_ms(row[ts_at])
            except ValueError:
                batch.bad_ts += 1
        extras: str | None = None
        if others:
            values = {name: row[i] for i, name in others if row[i] != ""}
            if values:
                extras = _extras_json(values)
        batch.append(row[url_at], ts, extras)

    return parse


# -- Parquet --------------------------------------------------------------------------------


def _open_parquet(path: Path, url_field: str) -> pq.ParquetFile:
    """``path`` opened, its footer and URL column checked (``BadDataError`` otherwise)."""
    compression = _compression(path)
    if compression:
        raise BadDataError(f"{path}: a Parquet file {compression}-compressed as a whole cannot be read "
                           f"(Parquet compresses its pages itself); decompress it first")
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a flipped byte in a column's name
        raise BadDataError(f"{path}: not a readable Parquet file ({exc}); if it is Parquet, {_REPAIR} "
                           f"(the footer, at the end of the file, is missing or damaged)") from exc
    try:
        _check_parquet(path, pf, url_field)
    except BaseException:
        pf.close()
        raise
    return pf


def _check_parquet(path: Path, pf: pq.ParquetFile, url_field: str) -> None:
    try:
        schema = pf.schema_arrow
        md = pf.metadata
        group_rows = sum(md.row_group(g).num_rows for g in range(md.num_row_groups))
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BadDataError(f"{path}: the Parquet footer does not decode ({exc}); {_REPAIR}") from exc
    if group_rows != md.num_rows:
        raise BadDataError(f"{path}: the Parquet footer contradicts itself (its row groups hold {group_rows} "
                           f"rows, its total says {md.num_rows}); {_REPAIR}")
    found = schema.get_all_field_indices(url_field)
    if len(found) != 1:
        what = "found it twice" if found else f"found {schema.names[:50]}"
        raise BadDataError(f"{path}: expected one column {url_field!r}, {what}; pass --url-field NAME")
    url_type = schema.field(found[0]).type
    if pa.types.is_dictionary(url_type):
        url_type = url_type.value_type
    if not (pa.types.is_string(url_type) or pa.types.is_large_string(url_type) or pa.types.is_binary(url_type)
            or pa.types.is_large_binary(url_type) or pa.types.is_null(url_type)):
        raise BadDataError(f"{path}: column {url_field!r} holds {url_type}, expected strings; "
                           f"pass --url-field NAME of the column that holds the URLs")


def _parquet(path: Path, url_field: str, ts_field: str | None, keep_extras: bool, batch_rows: int) -> Iterator[Batch]:
    """Row group by row group, so a row group that does not decode costs its own rows only."""
    with _open_parquet(path, url_field) as pf:
        names = pf.schema_arrow.names
        ts = ts_field if ts_field is not None and ts_field != url_field and names.count(ts_field) == 1 else None
        if ts_field is not None and ts is None:
            logger.warning("%s: no column %r for timestamps (columns: %s)", path, ts_field, names[:50])
        columns = None if keep_extras else [url_field, *([ts] if ts else [])]
        row = 1
        for group in range(pf.metadata.num_row_groups):
            expected = pf.metadata.row_group(group).num_rows
            done = 0
            error: Exception | None = None
            for rb in _row_group(pf, group, batch_rows, columns):
                try:
                    if isinstance(rb, Exception):
                        raise rb
                    batch = _parquet_batch(rb, row, url_field, ts)
                except (pa.ArrowException, OSError) as exc:
                    error = exc
                    break
                row += len(batch)
                done += len(batch)
                yield batch
            if done < expected:
                why = f"does not decode ({error})" if error else "ended early"
                message = f"row group {group} {why} after {done} of its {expected} rows; {_REPAIR}"
                for start in range(0, expected - done, batch_rows):
                    lost = Batch(row + start)
                    for _ in range(min(batch_rows, expected - done - start)):
                        lost.reject(None, "parquet_row_group", message)
                    yield lost
                row += expected - done


def _row_group(
    pf: pq.ParquetFile, group: int, batch_rows: int, columns: list[str] | None
) -> Iterator[pa.RecordBatch | Exception]:
    """The row group's record batches; the error that stops decoding ends them, as the last item."""
    try:
        yield from pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns)
    except (pa.ArrowException, OSError) as exc:
        yield exc


def _pylist(col: pa.Array) -> tuple[list[Any], dict[int, str]]:
    """``col`` as Python values, and index -> error for each value that does not convert (it comes out None)."""
    try:
        return col.to_pylist(), {}
    except _VALUE_ERRORS:
        pass
    values: list[Any] = []
    errors: dict[int, str] = {}
    for i in range(len(col)):
        try:
            values.append(col[i].as_py())
        except _VALUE_ERRORS as exc:
            values.append(None)
            errors[i] = str(exc) or type(exc).__name__
    return values, errors


def _url_values(col: pa.Array) -> tuple[list[str | None], dict[int, tuple[str, str]]]:
    """The URL column as str/None, and index -> (raw text, error) of each value that is not UTF-8."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_null(col.type):
        return [None] * len(col), {}
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        try:
            return col.to_pylist(), {}
        except UnicodeDecodeError:
            pass  # damaged data pages: find the values below
    values: list[str | None] = []
    bad: dict[int, tuple[str, str]] = {}
    for i, raw in enumerate(col.cast(pa.large_binary()).to_pylist()):
        if raw is None:
            values.append(None)
            continue
        try:
            values.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            values.append(None)
            bad[i] = (raw.decode("utf-8", "backslashreplace"), f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
    return values, bad


def _ts_values(col: pa.Array) -> tuple[list[int | None], int]:
    """The timestamp column as epoch ms, and how many values did not convert."""
    if pa.types.is_timestamp(col.type):
        unit = col.type.unit
        try:
            if unit == "s":
                ms = pc.multiply_checked(col.cast(pa.int64()), 1000)
            else:  # ms, us, ns: truncate to ms (safe=False: a cast that drops digits is refused otherwise)
                ms = col.cast(pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())
            return ms.to_pylist(), 0
        except pa.ArrowException:
            pass  # overflow: value by value below
    values, errors = _pylist(col)
    out: list[int | None] = []
    bad = len(errors)
    for v in values:
        try:
            out.append(_ts_ms(v))
        except ValueError:
            out.append(None)
            bad += 1
    return out, bad


def _parquet_batch(rb: pa.RecordBatch, first_row: int, url_field: str, ts_field: str | None) -> Batch:
    names = rb.schema.names
    url_at = names.index(url_field)
    ts_at = names.index(ts_field) if ts_field is not None else None
    urls, bad_urls = _url_values(rb.column(url_at))
    batch = Batch(first_row)
    ts: list[int | None] = [None] * rb.num_rows
    if ts_at is not None:
        ts, batch.bad_ts = _ts_values(rb.column(ts_at))
    others = [(name, *_pylist(rb.column(i))) for i, name in enumerate(names) if i not in (url_at, ts_at)]
    for i, url in enumerate(urls):
        if i in bad_urls:
            raw, error = bad_urls[i]
            batch.reject(raw, "utf8", f"the {url_field!r} value is {error}")
            continue
        failed = next(((name, errors[i]) for name, _, errors in others if i in errors), None)
        if failed is not None:
            batch.reject(url, "parquet_value", f"column {failed[0]!r} does not convert ({failed[1]})")
            continue
        extras: str | None = None
        if others:
            values = {name: column[i] for name, column, _ in others if column[i] is not None}
            if values:
                extras = _parquet_extras_json(values)
        batch.append(url, ts[i], extras)
    return batch
