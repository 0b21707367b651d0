"""``crawlstream spark-ingest``: the batch import of ``crawlstream ingest`` as an Apache Spark job.

It writes exactly the lake ``crawlstream ingest`` writes (docs/decisions/030-spark-ingest.md):

1. The driver checks every input with the ingest readers' ``check_input`` before any task
   runs (a file that cannot be read as a whole stops the job; nothing is written), and names
   the job after what it reads: ``job_id`` hashes the dataset id, the read options and each
   input's (path, size, mtime).
2. Stage 1, one task per input file: the project's own ``iter_batches`` reads it (same
   parsing, same row numbers, same reject reasons), ``canonicalize_column`` judges each batch
   at once (no Python call per row through Spark's row path), the rejects go to
   ``rejects/dataset_id=N/<file>.jsonl`` and the valid rows leave the task as one Arrow IPC
   stream per domain prefix (``hh``), keyed by ``hh``.
3. Stage 2, the rows of each ``hh`` of every file, in input order: cut into chunks of
   ``lake.file_max_rows`` rows (as ``LakeWriter`` cuts a partition's buffer), each sorted and
   deduplicated by the lake's ``build_table`` and published by ``write_lake_file`` under the
   deterministic name ``part-s-<job_id>-<chunk>.parquet``. A rerun of the same job overwrites
   the same keys, so a killed run's files are replaced, never counted twice.

The job does not send the rows to ``urls.records``: a Spark-ingested dataset is rebuilt from
its inputs, not by ``crawlstream replay``. ``pyspark`` is imported only by ``run_job``'s caller
(the ``spark`` extra); the task functions here only need pyarrow, as executors run them.

``spark-submit libs/crawlstream/ingest/spark.py INPUT... --dataset-id N`` runs the job with
spark-submit's master (this module is the ``crawlstream spark-ingest`` command).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from crawlstream.errors import BadDataError
from crawlstream.ingest._readers import check_input, iter_batches
from crawlstream.ingest._run import (
    FileStats,
    IngestStats,
    canonicalize_batch,
    check_dataset_id,
    rejections,
)
from crawlstream.objectstore import Location, ObjectStore, open_objects
from crawlstream.settings import LakeSettings, S3Settings

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["InputFile", "SparkIngestJob", "SparkIngestStats", "plan_job", "read_input", "run_job", "write_partitions"]

logger = logging.getLogger(__name__)

_STATS_KEY = "#stats"  # stage 1's per-file counts travel through the shuffle under this key
_ROWS_SCHEMA = pa.schema([("file", pa.int32()), ("url", pa.string()), ("domain", pa.string()),
                          ("ts", pa.int64()), ("extras", pa.string())])


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input as the driver checked it: ``path`` as given (the summary's), ``resolved`` the
    absolute one tasks open; ``rejects_name`` is its rejects file's name."""

    index: int
    path: str
    resolved: str
    format: str
    size_bytes: int
    mtime_ns: int
    rejects_name: str


@dataclass(frozen=True, slots=True)
class SparkIngestJob:
    """Everything a task needs (pickled to executors): plain values, no open handles."""

    dataset_id: int
    job_id: str
    inputs: tuple[InputFile, ...]
    lake: Location
    s3: S3Settings
    config: LakeSettings
    url_field: str = "url"
    ts_field: str | None = None
    keep_extras: bool = True
    rejects: Location | None = None  # where rejects/dataset_id=N/ goes; None: not written


def plan_job(
    paths: Sequence[Path],
    dataset_id: int,
    *,
    lake: Location,
    s3: S3Settings,
    config: LakeSettings,
    fmt: str = "auto",
    url_field: str = "url",
    ts_field: str | None = None,
    keep_extras: bool = True,
    rejects: Location | None = None,
) -> SparkIngestJob:
    """Check every input as ``ingest_files`` does (``BadDataError`` before anything is written)
    and name the job after the inputs' identities, so the same command names the same files."""
    check_dataset_id(dataset_id)
    if not paths:
        raise BadDataError("no input files given")
    formats = [check_input(path, fmt=fmt, url_field=url_field) for path in paths]
    names = Counter(path.name for path in paths)
    inputs = []
    for i, (path, path_fmt) in enumerate(zip(paths, formats, strict=True)):
        st = path.stat()
        # Two inputs of the same name would write one rejects key from two tasks: number them.
        rejects_name = f"{path.name}.jsonl" if names[path.name] == 1 else f"{path.name}.{i}.jsonl"
        inputs.append(InputFile(i, str(path), str(path.resolve()), path_fmt, st.st_size, st.st_mtime_ns, rejects_name))
    identity = json.dumps([dataset_id, url_field, ts_field, keep_extras,
                           [(f.resolved, f.format, f.size_bytes, f.mtime_ns) for f in inputs]])
    job_id = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return SparkIngestJob(dataset_id, job_id, tuple(inputs), lake, s3, config, url_field, ts_field,
                          keep_extras, rejects)


@dataclass
class SparkIngestStats(IngestStats):
    """``IngestStats`` plus where the tasks spent their time (summed over all tasks, seconds)."""

    task_seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["task_seconds"] = {k: round(v, 2) for k, v in self.task_seconds.items()}
        return out


# -- stage 1: read, canonicalize, reject (executors) ---------------------------------------------


class _FileRejects:
    """One file's invalid rows: counted in ``stats`` (``FileStats.reject``), each written to its
    rejects file (published whole when the file is done, so a rerun replaces it rather than
    appending a second copy as ``crawlstream ingest`` does)."""

    def __init__(self, job: SparkIngestJob, file: InputFile, store: ObjectStore | None) -> None:
        self.job, self.file, self.store = job, file, store
        self.stats = FileStats(file.path, file.format)
        self._stack = contextlib.ExitStack()
        self._out: IO[str] | None = None
        self.rel = f"rejects/dataset_id={job.dataset_id}/{file.rejects_name}"

    def add(self, row: int, raw: str | None, reason: str, error: str) -> None:
        line = self.stats.reject(self.job.dataset_id, row, raw, reason, error)
        if self.store is None:
            return
        if self._out is None:
            staging = self._stack.enter_context(self.store.writing(self.rel))
            self._out = self._stack.enter_context(open(staging, "w", encoding="utf-8"))  # noqa: SIM115 - closed by the stack
        self._out.write(line)

    def publish(self) -> str | None:
        """Close the rejects file (publishing it); its location, if any row was rejected."""
        written = self._out is not None and self.store is not None
        self._stack.close()
        return self.store.uri(self.rel) if written and self.store is not None else None

    def discard(self) -> None:
        self._stack.__exit__(RuntimeError, RuntimeError("task failed"), None)


def _judge_batch(batch: Any, file: InputFile, url_field: str, rejects: _FileRejects) -> pa.Table:
    """One reader batch -> its valid rows (``_ROWS_SCHEMA``); its invalid rows go to ``rejects``
    with the reason and message ``ingest_files`` gives them."""
    col = canonicalize_batch(batch)
    valid = col.valid
    for i, reason, error in rejections(batch, col, url_field):
        rejects.add(batch.first_row + i, batch.urls[i], reason, error)
    n_valid = col.reason.null_count
    return pa.table([
        pa.array([file.index] * n_valid, pa.int32()),
        col.url.filter(valid),
        col.domain.filter(valid),
        pa.array(batch.ts_ms, pa.int64()).filter(valid),
        pa.array(batch.extras, pa.string()).filter(valid),
    ], schema=_ROWS_SCHEMA)


def _hh_column(domains: pa.ChunkedArray) -> pa.Array:
    """The lake's domain prefix of every row, computed once per distinct domain."""
    from crawlstream.urls import domain_prefix

    uniq = pc.unique(domains)
    prefixes = pa.array([domain_prefix(domain) for domain in uniq.to_pylist()], pa.string())
    return prefixes.take(pc.index_in(domains, value_set=uniq))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def read_input(job: SparkIngestJob, indexes: Iterable[int]) -> Iterator[tuple[str, Any]]:
    """Stage 1 over the inputs ``indexes``: ``(hh, (file index, Arrow IPC of its valid rows))``
    per domain prefix, rows in input order; then ``("#stats", counts)`` per file."""
    store = open_objects(job.rejects, job.s3) if job.rejects is not None else None
    for index in indexes:
        file = job.inputs[index]
        rejects = _FileRejects(job, file, store)
        tables, rows, bad_ts, judge_s = [], 0, 0, 0.0
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            for batch in iter_batches(Path(file.resolved), fmt=file.format, url_field=job.url_field,
                                      ts_field=job.ts_field, keep_extras=job.keep_extras):
                rows += len(batch)
                bad_ts += batch.bad_ts
                judged = time.perf_counter()
                tables.append(_judge_batch(batch, file, job.url_field, rejects))
                judge_s += time.perf_counter() - judged
        except BaseException:
            rejects.discard()
            raise
        rejects_uri = rejects.publish()
        valid = pa.concat_tables(tables) if tables else _ROWS_SCHEMA.empty_table()
        if valid.num_rows:
            valid = valid.append_column("hh", _hh_column(valid.column("domain")))
            # stable: each hh's rows keep their input order (build_table keeps the first of equal URLs)
            valid = valid.take(pc.sort_indices(valid, sort_keys=[("hh", "ascending")]))
            start = 0
            for entry in pc.value_counts(valid.column("hh")).to_pylist():
                part = valid.slice(start, entry["counts"]).drop_columns(["hh"])
                start += entry["counts"]
                yield entry["values"], (index, _ipc(part))
        yield _STATS_KEY, {"index": index, "rows": rows, "valid": valid.num_rows, "bad_ts": bad_ts,
                           "invalid": dict(rejects.stats.invalid), "examples": rejects.stats.examples,
                           "damage": rejects.stats.damage, "rejects_file": rejects_uri,
                           "task_s": {"read": time.perf_counter() - started - judge_s, "canonicalize": judge_s,
                                      "stage1_cpu": time.process_time() - cpu_started}}


# -- stage 2: sort, dedupe, publish (executors) ---------------------------------------------------


def lake_file_name(job_id: str, chunk: int) -> str:
    """A partition's ``chunk``-th file of the job: the same name on every run of the same job."""
    return f"part-s-{job_id}-{chunk:05d}.parquet"


_WRITE_THREADS = 4  # as LakeWriter.flush: zstd in write_table releases the GIL, so writes overlap sorting


def _publish(job: SparkIngestJob, store: ObjectStore, hh: str, name: str, lake_table: pa.Table, dropped: int,
             build_s: float) -> dict[str, Any]:
    from crawlstream.lake._files import partition_dir
    from crawlstream.lake._writer import write_lake_file

    started = time.perf_counter()
    rel, size = write_lake_file(lake_table, store, partition_dir(job.dataset_id, hh),
                                row_group_rows=job.config.row_group_rows, zstd_level=job.config.zstd_level,
                                name=name)
    return {"hh": hh, "rel": rel, "rows": lake_table.num_rows, "duplicates_dropped": dropped, "size_bytes": size,
            "task_s": {"build_table": build_s, "write": time.perf_counter() - started}}


def _write_hh(job: SparkIngestJob, store: ObjectStore, hh: str, table: pa.Table,
              pool: ThreadPoolExecutor) -> tuple[set[str], list[Future[dict[str, Any]]]]:
    """One partition's rows (input order) as files of at most ``file_max_rows`` input rows each,
    like ``LakeWriter``: each chunk sorted and deduplicated here, written by ``pool``. Returns
    the names and the pending writes."""
    from crawlstream.lake._writer import build_table

    names, pending = set(), []
    max_rows = job.config.file_max_rows
    for chunk, start in enumerate(range(0, table.num_rows, max_rows)):
        part = table.slice(start, max_rows)
        started = time.perf_counter()
        lake_table, dropped = build_table(part.column("url"), part.column("domain"), part.column("ts"),
                                          part.column("extras"))
        name = lake_file_name(job.job_id, chunk)
        names.add(name)
        pending.append(pool.submit(_publish, job, store, hh, name, lake_table, dropped,
                                   time.perf_counter() - started))
    return names, pending


def _drop_stale(job: SparkIngestJob, store: ObjectStore, hh: str, names: set[str]) -> None:
    """Delete this job's files of the partition not written this time (a rerun with a smaller
    ``file_max_rows`` makes fewer chunks); only after the new ones are published."""
    from crawlstream.lake._files import partition_dir

    mine = f"part-s-{job.job_id}-"
    for obj in store.list(partition_dir(job.dataset_id, hh)):
        name = obj.rel.rsplit("/", 1)[-1]
        if name.startswith(mine) and name not in names:
            store.delete(obj.rel)


def write_partitions(job: SparkIngestJob, items: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Stage 2 over one shuffle partition: ``("file", written)`` per lake file; the stats pass through."""
    by_hh: dict[str, list[tuple[int, bytes]]] = {}
    for key, value in items:
        if key == _STATS_KEY:
            yield "stats", value
        else:
            by_hh.setdefault(key, []).append(value)
    if not by_hh:
        return
    store = open_objects(job.lake, job.s3)
    cpu_started = time.process_time()  # this worker process's CPU, its write threads' included
    written: dict[str, set[str]] = {}
    with ThreadPoolExecutor(max_workers=_WRITE_THREADS) as pool:
        pending: list[Future[dict[str, Any]]] = []
        for hh in sorted(by_hh):
            parts = sorted(by_hh.pop(hh), key=lambda p: p[0])  # input order: file by file
            table = pa.concat_tables([pa.ipc.open_stream(blob).read_all() for _, blob in parts])
            written[hh], futures = _write_hh(job, store, hh, table, pool)
            pending += futures
        for future in pending:  # a failed write raises here: the task fails, Spark retries it
            yield "file", future.result()
    for hh, names in written.items():
        _drop_stale(job, store, hh, names)
    yield "cpu", {"task_s": {"stage2_cpu": time.process_time() - cpu_started}}


def _partition_of(key: str, partitions: int) -> int:
    return 0 if key == _STATS_KEY else int(key, 16) % partitions


# -- the driver -----------------------------------------------------------------------------------


def run_job(sc: SparkContext, job: SparkIngestJob, *, partitions: int = 0) -> SparkIngestStats:
    """Run ``job`` on ``sc``; the same summary ``ingest_files`` returns. ``partitions``: stage 2's
    tasks (each writes whole domain prefixes; 0: 4 per core, at most the 256 prefixes)."""
    stats = SparkIngestStats(job.dataset_id)
    shuffle = partitions or min(256, max(1, 4 * sc.defaultParallelism))
    indexes = sc.parallelize(range(len(job.inputs)), len(job.inputs))
    results = (
        indexes.mapPartitions(lambda it: read_input(job, it))
        .partitionBy(shuffle, lambda key: _partition_of(key, shuffle))
        .mapPartitions(lambda it: write_partitions(job, it))
        .collect()
    )
    per_file = sorted((value for kind, value in results if kind == "stats"), key=lambda s: s["index"])
    for counts in per_file:
        file = job.inputs[counts["index"]]
        fs = FileStats(file.path, file.format, counts["rows"], counts["valid"], Counter(counts["invalid"]),
                       counts["damage"], counts["examples"])
        stats.files.append(fs)
        stats.rows += fs.rows
        stats.valid += fs.valid
        stats.invalid.update(fs.invalid)
        stats.bad_ts += counts["bad_ts"]
        stats.keep_examples(fs.examples)
        if counts["rejects_file"]:
            stats.rejects_files.append(counts["rejects_file"])
    written = sorted((value for kind, value in results if kind == "file"), key=lambda w: w["rel"])
    task_s: Counter[str] = Counter()
    for item in [*per_file, *written, *(value for kind, value in results if kind == "cpu")]:
        task_s.update(item["task_s"])
    stats.files_written = len(written)
    stats.bytes_written = sum(w["size_bytes"] for w in written)
    stats.duplicates_dropped = sum(w["duplicates_dropped"] for w in written)
    stats.seconds = time.perf_counter() - stats.started
    logger.info("dataset %d: %d rows in %.1f s; task seconds (all tasks) %s", job.dataset_id, stats.rows,
                stats.seconds, {k: round(v, 1) for k, v in task_s.items()})
    stats.task_seconds = dict(task_s)
    if stats.invalid:
        logger.warning("dataset %d: %d invalid rows by reason %s", job.dataset_id, sum(stats.invalid.values()),
                       dict(stats.invalid))
    return stats


if __name__ == "__main__":  # spark-submit libs/crawlstream/ingest/spark.py INPUT... --dataset-id N
    import sys

    from crawlstream.cli import main

    sys.exit(main(["spark-ingest", *sys.argv[1:]]))
