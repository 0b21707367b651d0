"""Bulk import: files -> canonical URLs -> lake files, counting every rejected row by reason.

No row is dropped silently: every row the readers produce is either valid (written to the lake)
or invalid, counted under a reason, so ``rows == valid + sum(invalid.values())`` for every run
and every file. Reasons: the readers' (``utf8``, ``json_syntax``, ``json_not_object``,
``url_not_string``, ``csv_syntax``, ``csv_columns``, ``parquet_value``, and the file damage
``truncated`` / ``parquet_row_group``; see ``_readers``), ``blank`` (an empty line or URL),
``missing`` (no URL value: an absent JSON field, a JSON or Parquet null) and
``InvalidUrl.reason`` for URLs that do not canonicalize. The first few per reason are kept as
examples, and all of them are appended, with their row number, reason and error, to
``rejects/dataset_id=<id>/<file name>.jsonl`` under the data dir.

Every input is checked as a whole (``check_input``) before any row is read: a file that cannot
be read at all stops the import before anything is written. A file damaged part-way keeps its
readable rows and is listed in ``IngestStats.damaged`` (the command then exits 3).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from crawlstream.errors import BadDataError
from crawlstream.ingest._readers import FILE_DAMAGE, Batch, check_input, iter_batches
from crawlstream.lake import LakeWriter
from crawlstream.urls import CanonicalColumn, canonicalize_column

__all__ = ["FileStats", "IngestStats", "canonicalize_batch", "check_dataset_id", "ingest_files", "rejections"]

logger = logging.getLogger(__name__)

EXAMPLES_PER_REASON = 3
EXAMPLE_CHARS = 200  # an example is cut to this (the rejects file keeps the whole row)


@dataclass
class FileStats:
    """One input file's counts: ``rows == valid + sum(invalid.values())``."""

    path: str
    format: str
    rows: int = 0
    valid: int = 0
    invalid: Counter[str] = field(default_factory=Counter)
    # The first damage found part-way (reason, row, error), when the file has any.
    damage: dict[str, Any] | None = None
    # The first few rejected rows per reason, cut to EXAMPLE_CHARS.
    examples: dict[str, list[str]] = field(default_factory=dict)

    def reject(self, dataset_id: int, row: int, raw: str | None, reason: str, error: str) -> str:
        """Count one rejected row, logging the file's first damage and keeping a few examples; its
        line of the rejects file. The one reject bookkeeping of ``ingest`` and ``spark-ingest``."""
        self.invalid[reason] += 1
        if reason in FILE_DAMAGE and self.damage is None:
            self.damage = {"reason": reason, "row": row, "error": error}
            logger.error("dataset %d: %s is damaged from row %d (%s): %s", dataset_id, self.path, row, reason, error)
        kept = self.examples.setdefault(reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append((raw or "")[:EXAMPLE_CHARS])
        return json.dumps({"row": row, "url": raw, "reason": reason, "error": error}) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "rows": self.rows,
            "valid": self.valid,
            "invalid": sum(self.invalid.values()),
            "invalid_by_reason": dict(self.invalid.most_common()),
            "damage": self.damage,
        }


@dataclass
class IngestStats:
    dataset_id: int
    rows: int = 0
    valid: int = 0
    invalid: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    bad_ts: int = 0
    duplicates_dropped: int = 0
    files_written: int = 0
    bytes_written: int = 0
    rejects_files: list[str] = field(default_factory=list)
    files: list[FileStats] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0

    @property
    def rows_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started if not self.seconds else self.seconds
        return self.rows / elapsed if elapsed > 0 else 0.0

    def keep_examples(self, examples: dict[str, list[str]]) -> None:
        """Add a file's examples to the run's: the first few per reason, in file order."""
        for reason, rows in examples.items():
            kept = self.examples.setdefault(reason, [])
            kept += rows[: EXAMPLES_PER_REASON - len(kept)]

    @property
    def damaged(self) -> list[FileStats]:
        """The input files damaged part-way (their readable rows were imported)."""
        return [f for f in self.files if f.damage is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset_id": self.dataset_id,
            "rows": self.rows,
            "valid": self.valid,
            "invalid": sum(self.invalid.values()),
            "invalid_by_reason": dict(self.invalid.most_common()),
            "invalid_examples": self.examples,
            "bad_ts": self.bad_ts,
            "duplicates_dropped": self.duplicates_dropped,
            "lake_files_written": self.files_written,
            "lake_bytes_written": self.bytes_written,
            "rejects_files": self.rejects_files,
            "files": [f.to_json() for f in self.files],
            "damaged_files": [f.path for f in self.damaged],
            "seconds": round(self.seconds, 3),
            "rows_per_s": round(self.rows_per_s),
        }


class _Rejected:
    """One input file's invalid rows: counted (``FileStats.reject``, and in the run's counts as
    they come, for the progress line) and each appended to ``<rejects_dir>/<file name>.jsonl``
    (opened at the first one) when ``rejects_dir`` is given."""

    def __init__(self, stats: IngestStats, file: FileStats, path: Path, rejects_dir: Path | None) -> None:
        self._stats = stats
        self._file = file
        self._path = path
        self._rejects_dir = rejects_dir
        self._out: IO[str] | None = None

    def add(self, row: int, raw: str | None, reason: str, error: str) -> None:
        line = self._file.reject(self._stats.dataset_id, row, raw, reason, error)
        self._stats.invalid[reason] += 1
        if self._rejects_dir is not None:
            if self._out is None:
                self._rejects_dir.mkdir(parents=True, exist_ok=True)
                rpath = self._rejects_dir / f"{self._path.name}.jsonl"
                self._out = open(rpath, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
                self._stats.rejects_files.append(str(rpath))
            self._out.write(line)

    def close(self) -> None:
        self._stats.keep_examples(self._file.examples)
        if self._out is not None:
            self._out.close()


def canonicalize_batch(batch: Batch) -> CanonicalColumn:
    """``canonicalize_column`` of a batch's URLs (one call per batch: ADR 032); a row the reader
    rejected is passed as null, so it is never valid and keeps the reader's reason."""
    urls = batch.urls
    if batch.bad:
        urls = list(urls)
        for i in batch.bad:
            urls[i] = None
    return canonicalize_column(pa.array(urls, pa.string()))


def rejections(batch: Batch, column: CanonicalColumn, url_field: str) -> Iterator[tuple[int, str, str]]:
    """(index in the batch, reason, message) of each row of ``batch`` that is not valid in
    ``column`` (its ``canonicalize_batch``), in row order: the reader's reason for a row it
    rejected, a missing value named by its field, else the canonicalizer's."""
    if column.reason.null_count == len(column):
        return
    reasons, errors = column.reason.to_pylist(), column.error.to_pylist()
    for i in pc.indices_nonzero(pc.invert(column.valid)).to_pylist():
        unparsed = batch.bad.get(i)
        if unparsed is not None:
            yield i, *unparsed
        elif reasons[i] == "missing":
            yield i, "missing", f"no value in {url_field!r} (null)"
        else:
            yield i, reasons[i], errors[i]


def check_dataset_id(dataset_id: int) -> None:
    """A dataset id is an int32 (the lake's partition and the index's postings hold it as one)."""
    if dataset_id < 0 or dataset_id > 2**31 - 1:
        raise BadDataError(f"dataset id must be in 0..2147483647, got {dataset_id}")


def ingest_files(
    paths: Sequence[Path],
    dataset_id: int,
    writer: LakeWriter,
    *,
    fmt: str = "auto",
    url_field: str = "url",
    ts_field: str | None = None,
    keep_extras: bool = True,
    rejects_dir: Path | None = None,
    progress: Callable[[IngestStats], None] | None = None,
    publish: Callable[[int, str, str, int | None, str | None], None] | None = None,
    published: Callable[[], None] | None = None,
) -> IngestStats:
    """Import ``paths`` as dataset ``dataset_id`` through ``writer`` (flushed at the end).

    Every path is checked first (``check_input``): ``BadDataError`` for a file that cannot be
    read as a whole, before any row of any file is read, published or written.
    ``publish(dataset_id, url, domain, ts_ms, extras_json)`` is called for every valid row
    (``crawlstream ingest`` sends it to ``urls.records``, the replay source), and
    ``published()`` once before the lake files are written: if it raises (the bus did not
    take the rows), nothing is written to the lake either.
    """
    check_dataset_id(dataset_id)
    formats = [check_input(path, fmt=fmt, url_field=url_field) for path in paths]
    stats = IngestStats(dataset_id)
    add = writer.add
    for path, path_fmt in zip(paths, formats, strict=True):
        file = FileStats(str(path), path_fmt)
        stats.files.append(file)
        rows_before, valid_before = stats.rows, stats.valid
        rejected = _Rejected(stats, file, path, rejects_dir)
        try:
            for batch in iter_batches(path, fmt=path_fmt, url_field=url_field, ts_field=ts_field,
                                      keep_extras=keep_extras):
                stats.bad_ts += batch.bad_ts
                stats.rows += len(batch)
                column = canonicalize_batch(batch)
                for i, (url, domain) in enumerate(zip(column.url.to_pylist(), column.domain.to_pylist(),
                                                      strict=True)):
                    if url is not None:
                        add(dataset_id, url, domain, batch.ts_ms[i], batch.extras[i])
                        if publish is not None:
                            publish(dataset_id, url, domain, batch.ts_ms[i], batch.extras[i])
                        stats.valid += 1
                for i, reason, error in rejections(batch, column, url_field):
                    rejected.add(batch.first_row + i, batch.urls[i], reason, error)
                if progress is not None:
                    progress(stats)
        finally:
            rejected.close()
            file.rows, file.valid = stats.rows - rows_before, stats.valid - valid_before
    if published is not None:
        published()
    writer.flush()
    stats.files_written = writer.totals.files
    stats.bytes_written = writer.totals.bytes
    stats.duplicates_dropped = writer.totals.duplicates_dropped
    stats.seconds = time.perf_counter() - stats.started
    if stats.invalid:
        logger.warning("dataset %d: %d invalid rows by reason %s", dataset_id,
                       sum(stats.invalid.values()), dict(stats.invalid))
    return stats
