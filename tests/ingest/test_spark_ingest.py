"""`crawlstream spark-ingest` writes the lake `crawlstream ingest` writes: same rows, counts, rejects, index.

One local[2] Spark session serves the module; the kill-and-rerun test runs the command as a
process of its own (its Spark session with it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from crawlstream.cli import main
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.ingest import IngestStats, ingest_files
from crawlstream.ingest.spark import plan_job, run_job
from crawlstream.lake import LakeWriter, lake_urls, list_lake_files
from crawlstream.objectstore import parse_location
from crawlstream.settings import LakeSettings, S3Settings

SHARED_URLS = Path(__file__).resolve().parents[3] / "shared" / "data" / "urls"
REDDIT = sorted((SHARED_URLS / "reddit-webtext").glob("*.json-00.gz"))
ADA = SHARED_URLS / "ada-url-various-datasets" / "kasztp.txt.gz"
PROTEGO = SHARED_URLS / "protego-top-10000-websites.txt"
# Fields of a run's summary that depend on the clock or on where the rejects go.
_UNCOMPARED = ("seconds", "rows_per_s", "rejects_files", "task_seconds")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from crawlstream.cli._spark_ingest import spark_session

    with spark_session("local[2]") as session:
        yield session.sparkContext


def _ingest(root: Path, dataset_id: int, paths: list[Path], **kw: Any) -> IngestStats:
    """The lake and rejects `crawlstream ingest --no-publish` writes into ``root``."""
    writer = LakeWriter(root)
    return ingest_files(paths, dataset_id, writer, rejects_dir=root / "rejects" / f"dataset_id={dataset_id}", **kw)


def _spark(sc: Any, root: Path, dataset_id: int, paths: list[Path], **kw: Any) -> IngestStats:
    lake = parse_location(root)
    job = plan_job(paths, dataset_id, lake=lake, s3=S3Settings(), config=LakeSettings(), rejects=lake, **kw)
    return run_job(sc, job)


def _summary(stats: IngestStats) -> dict[str, Any]:
    return {k: v for k, v in stats.to_json().items() if k not in _UNCOMPARED}


def _lake_rows(root: Path) -> pa.Table:
    """Every lake row as (dataset_id, url, domain, ts, extras), sorted: a multiset to compare."""
    tables = []
    for lf in list_lake_files(root):
        t = pq.read_table(root / lf.path)
        tables.append(pa.table({
            "dataset_id": pa.array([lf.dataset_id] * t.num_rows, pa.int32()),
            "url": lake_urls(t), "domain": t.column("domain").cast(pa.string()),
            "ts": t.column("ts"), "extras": t.column("extras"),
        }))
    rows = pa.concat_tables(tables)
    return rows.sort_by([("dataset_id", "ascending"), ("url", "ascending"), ("domain", "ascending")])


def _rejects(root: Path) -> dict[str, list[str]]:
    base = root / "rejects"
    return {str(p.relative_to(base)): sorted(p.read_text().splitlines()) for p in sorted(base.rglob("*.jsonl"))}


def _index_answers(root: Path, domains: set[str], paged_every: int) -> dict[str, Any]:
    """What the index answers for every domain: its datasets and counts, and the URL pages of
    every ``paged_every``-th domain in name order (1: every domain's)."""
    IndexBuilder(root).build()
    reader = IndexReader(root)
    out: dict[str, Any] = {}
    try:
        with reader.pin() as idx:
            for n, domain in enumerate(sorted(domains)):
                datasets = idx.datasets_for_domain(domain)
                pages = {}
                for dc in (datasets or []) if n % paged_every == 0 else []:
                    page = idx.urls(domain, dc.dataset_id, 0, dc.url_count + 1)
                    assert page is not None
                    pages[dc.dataset_id] = page.rows
                out[domain] = (datasets, pages)
    finally:
        reader.close()
    return out


def _assert_same_lakes(a: Path, b: Path, paged_every: int = 1) -> None:
    rows_a, rows_b = _lake_rows(a), _lake_rows(b)
    assert rows_a.num_rows == rows_b.num_rows
    assert rows_a.equals(rows_b)
    assert _rejects(a) == _rejects(b)
    domains = set(rows_a.column("domain").to_pylist())
    assert _index_answers(a, domains, paged_every) == _index_answers(b, domains, paged_every)


def _generated(tmp_path: Path, n_urls: int, files: int = 0) -> list[Path]:
    """bench_index's 30 zstd files of URLs; ``files``: joined into that many (zstd frames
    concatenate), fewer Spark tasks for a small test."""
    from bench.bench_index import generate

    work = tmp_path / "generated"
    work.mkdir()
    paths = generate(work, n_urls, big_rows=n_urls // 50)[0]
    if not files:
        return paths
    joined = []
    for i in range(files):
        path = work / f"joined-{i}.txt.zst"
        path.write_bytes(b"".join(p.read_bytes() for p in paths[i::files]))
        joined.append(path)
    return joined


def _check_same_as_ingest(
    sc: Any, tmp_path: Path, generated_urls: int, reddit: list[Path], paged_every: int, files: int = 0
) -> None:
    generated = _generated(tmp_path, generated_urls, files)
    cases: list[tuple[int, list[Path], dict[str, Any]]] = [
        (1, reddit, {"url_field": "u"}),  # JSONL with its other fields kept as extras
        (2, [ADA, PROTEGO], {}),
        (3, generated, {}),
    ]
    ingested, sparked = tmp_path / "ingest", tmp_path / "spark"
    for dataset_id, paths, kw in cases:
        expected = _ingest(ingested, dataset_id, paths, **kw)
        got = _spark(sc, sparked, dataset_id, paths, **kw)
        assert got.rows == got.valid + sum(got.invalid.values()) > 0
        assert all(f.rows == f.valid + sum(f.invalid.values()) for f in got.files)
        assert _summary(got) == _summary(expected)
    _assert_same_lakes(ingested, sparked, paged_every)


def test_spark_ingest_writes_the_lake_ingest_writes(spark: Any, tmp_path: Path) -> None:
    """Real URL lists and a generated one: same rows, counts, rejects and index answers (every
    domain's datasets and counts; every 20th domain's URL pages: the slow test walks them all)."""
    _check_same_as_ingest(spark, tmp_path, 40_000, REDDIT[:1], paged_every=20, files=4)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_spark_ingest_writes_the_lake_ingest_writes_at_a_million_urls(spark: Any, tmp_path: Path) -> None:
    _check_same_as_ingest(spark, tmp_path, 1_000_000, REDDIT, paged_every=1)


def test_a_common_crawl_url_index_parquet_is_read_by_its_url_column(spark: Any, tmp_path: Path) -> None:
    """The columnar URL index's shape: `url` among many columns, row groups, nulls and bad URLs."""
    n = 3000
    table = pa.table({
        "url_surtkey": [f"com,example{i % 97})/p/{i}" for i in range(n)],
        "url": [None if i == 7 else "not a url" if i == 11 else f"https://www.example{i % 97}.com/p/{i}?q={i % 5}"
                for i in range(n)],
        "url_host_name": [f"www.example{i % 97}.com" for i in range(n)],
        "fetch_time": pa.array([1_700_000_000_000 + i for i in range(n)], pa.timestamp("ms", tz="UTC")),
        "fetch_status": pa.array([200 if i % 10 else 404 for i in range(n)], pa.int16()),
        "content_mime_type": ["text/html"] * n,
        "content_languages": [["eng"] if i % 2 else None for i in range(n)],
        "warc_record_length": pa.array(range(n), pa.int32()),
    })
    path = tmp_path / "cc-index-part-00000.parquet"
    pq.write_table(table, path, row_group_size=1000)
    ingested, sparked = tmp_path / "ingest", tmp_path / "spark"
    expected = _ingest(ingested, 4, [path], ts_field="fetch_time")
    got = _spark(spark, sparked, 4, [path], ts_field="fetch_time")
    assert _summary(got) == _summary(expected)
    assert got.rows == n and dict(got.invalid) == {"missing": 1, "scheme": 1}
    _assert_same_lakes(ingested, sparked)


def test_an_input_that_cannot_be_read_stops_the_job_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.txt"
    good.write_text("https://example.com/\n")
    lake = tmp_path / "lake"
    code = main(["spark-ingest", str(good), str(tmp_path / "missing.txt"), "--dataset-id", "1", "--lake", str(lake)])
    assert code == 1
    assert "missing.txt does not exist" in capsys.readouterr().err
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    code = main(["spark-ingest", str(good), str(broken), "--dataset-id", "1", "--lake", str(lake)])
    assert code == 1
    assert "not a readable Parquet file" in capsys.readouterr().err
    assert not lake.exists()


def test_the_lake_can_be_on_s3(spark: Any, tmp_path: Path, s3_server: Any, s3_prefix: str) -> None:
    from crawlstream.objectstore import open_objects
    from crawlstream.settings import load

    settings = load(s3_server.env)
    path = tmp_path / "list.txt"
    path.write_text("https://www.example.com/a\nhttps://www.example.com/a\nnot a url\nhttp://other.org/\n")
    lake = parse_location(s3_prefix)
    job = plan_job([path], 5, lake=lake, s3=settings.s3, config=LakeSettings(), rejects=lake)
    stats = run_job(spark, job)
    assert (stats.rows, stats.valid, stats.duplicates_dropped, stats.files_written) == (4, 3, 1, 2)
    store = open_objects(lake, settings.s3)
    files = list(list_lake_files(store))
    assert len(files) == 2 and all(f"part-s-{job.job_id}-00000.parquet" in f.path for f in files)
    rejected = [json.loads(line) for line in store.read("rejects/dataset_id=5/list.txt.jsonl").decode().splitlines()]
    assert rejected == [{"row": 3, "url": "not a url", "reason": "scheme",
                         "error": rejected[0]["error"]}]


def _lake_url_rows(root: Path) -> list[tuple[int, str]]:
    return [(r["dataset_id"], r["url"]) for r in _lake_rows(root).select(["dataset_id", "url"]).to_pylist()]


@pytest.mark.timeout(600)
def test_a_killed_run_rerun_leaves_every_row_exactly_once(tmp_path: Path) -> None:
    """SIGKILL once lake files exist, run the same command again: no row lost, none twice."""
    paths = _generated(tmp_path, 60_000)
    expected_lake = tmp_path / "expected"
    _ingest(expected_lake, 6, paths)
    expected = _lake_url_rows(expected_lake)
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "crawlstream", "spark-ingest", *map(str, paths), "--dataset-id", "6",
           "--lake", str(lake), "--master", "local[2]", "--partitions", "64"]
    env = {**os.environ, "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list(list_lake_files(lake))) >= 5:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run was killed part-way"
    partial = _lake_url_rows(lake)
    assert 0 < len(partial) < len(expected)
    rerun = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    got = _lake_url_rows(lake)
    assert len(got) == len(set(got)) == len(expected)
    assert got == expected


def test_a_file_damaged_part_way_is_counted_as_ingest_counts_it(spark: Any, tmp_path: Path) -> None:
    """A gzip stream cut short: its readable rows are in, the rest is one `truncated` row."""
    import gzip

    text = "".join(f"https://www.example{i % 13}.org/page/{i}\n" for i in range(20_000)).encode()
    whole = gzip.compress(text)
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    ingested, sparked = tmp_path / "ingest", tmp_path / "spark"
    expected = _ingest(ingested, 11, [cut])
    got = _spark(spark, sparked, 11, [cut])
    assert _summary(got) == _summary(expected)
    assert [f.path for f in got.damaged] == [str(cut)] and got.invalid["truncated"] == 1
    _assert_same_lakes(ingested, sparked)
