"""LakeWriter: sorted, deduplicated, dictionary-encoded files that appear atomically."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlstream.lake import (
    LAKE_SCHEMA,
    LakeWriter,
    WrittenFile,
    as_store,
    compact_partition,
    join_url,
    list_lake_files,
    read_lake_table,
    split_url,
)
from crawlstream.objectstore import ObjectStore
from crawlstream.settings import LakeSettings
from crawlstream.urls import canonicalize


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """The lake's store: a local directory, or a prefix on the session's S3 server."""
    if request.param == "local":
        return as_store(tmp_path)
    from tests.index._s3 import s3_store

    return s3_store(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_prefix"))


def _meta(store: ObjectStore, rel: str) -> pq.FileMetaData:
    if store.is_local:
        return pq.ParquetFile(store.local_path(rel)).metadata
    with store.open_input(rel) as fh:
        return pq.ParquetFile(fh).metadata


@given(
    scheme=st.sampled_from(["http", "https", "ftp"]),
    authority=st.text(st.characters(blacklist_characters="/?#"), max_size=20),
    rest=st.text(max_size=30).map(lambda s: "/" + s),
)
def test_split_url_is_the_exact_inverse_of_join_url(scheme: str, authority: str, rest: str) -> None:
    url = f"{scheme}://{authority}{rest}"
    assert join_url(*split_url(url)) == url


def test_split_url_separates_a_non_default_port() -> None:
    assert split_url("https://a.b:8443/x?y=1") == ("https", "a.b", 8443, "/x?y=1")
    assert split_url("http://[::1]:8080/") == ("http", "[::1]", 8080, "/")
    assert split_url("http://[::1]/") == ("http", "[::1]", None, "/")


def _write(root: Path | ObjectStore, urls: list[str], ds: int = 1, **config: int) -> list[WrittenFile]:
    """The files one writer published for ``urls`` (collected by ``on_file``: a writer keeps totals only)."""
    files: list[WrittenFile] = []
    w = LakeWriter(root, config=LakeSettings(**config), on_file=files.append)
    for i, u in enumerate(urls):
        w.add_canonical(ds, canonicalize(u), ts_ms=1000 + i)
    w.close()
    assert w.totals.files == len(files) and w.totals.rows == sum(f.num_rows for f in files)
    return files


def test_files_are_sorted_by_domain_then_url_and_deduplicated(lake: ObjectStore) -> None:
    urls = [f"http://h{i % 7}.example{i % 3}.com/p{i % 40}" for i in range(300)]
    files = _write(lake, urls, row_group_rows=16)
    assert sum(f.duplicates_dropped for f in files) == 300 - len(set(urls))
    assert sorted(f.rel for f in files) == [lf.path for lf in list_lake_files(lake)]
    for f in files:
        t = read_lake_table(lake, f.rel)
        assert t.schema.equals(LAKE_SCHEMA)
        rows = [(d, join_url(s, h + d, p, q)) for d, s, h, p, q in zip(
            *(t.column(c).to_pylist() for c in ("domain", "scheme", "host_prefix", "port", "path_query")),
            strict=True)]
        assert rows == sorted(set(rows))
        meta = _meta(lake, f.rel)
        assert meta.row_group(0).column(0).compression == "ZSTD"
        assert "RLE_DICTIONARY" in meta.row_group(0).column(0).encodings  # domain is dictionary-encoded
        assert "DELTA_BYTE_ARRAY" in meta.row_group(0).column(4).encodings  # sorted paths: front coding
        assert meta.row_group(0).column(1).compression == "UNCOMPRESSED"  # scheme: a few bytes per page


def test_first_row_of_a_duplicate_url_is_kept(lake: ObjectStore) -> None:
    files = _write(lake, ["http://a.com/x", "http://A.com/x", "http://a.com/y"])
    t = read_lake_table(lake, files[0].rel)
    assert t.column("ts").cast("int64").to_pylist() == [1000, 1002]


def test_partition_layout_is_readable_by_duckdb_with_hive_partitioning(tmp_path: Path) -> None:
    _write(tmp_path, ["http://a.com/x", "https://b.org:8443/y?a=1", "http://c.net/"], ds=42)
    glob = (tmp_path / "urls" / "**" / "*.parquet").as_posix()
    rows = duckdb.sql(
        f"SELECT dataset_id, domain_prefix, domain, port FROM read_parquet('{glob}', hive_partitioning=true) "
        "ORDER BY domain"
    ).fetchall()
    from crawlstream.urls import domain_prefix

    assert rows == [(42, domain_prefix(d), d, p) for d, p in (("a.com", None), ("b.org", 8443), ("c.net", None))]


def test_an_unfinished_temp_file_is_never_listed(tmp_path: Path) -> None:
    (written,) = _write(tmp_path, ["http://a.com/x"])
    assert isinstance(written.path, Path)
    (written.path.parent / ".part-999-crashed.parquet.tmp").write_bytes(b"PAR1 half")
    assert [lf.path for lf in list_lake_files(tmp_path)] == [written.path.relative_to(tmp_path).as_posix()]


def test_a_full_buffer_publishes_its_largest_partition(lake: ObjectStore) -> None:
    files: list[WrittenFile] = []
    w = LakeWriter(lake, config=LakeSettings(buffer_max_rows=50), on_file=files.append)
    for i in range(120):
        w.add_canonical(1, canonicalize(f"http://big.com/{i}"))
    assert len(files) == 2 and w.buffered_rows == 20
    w.close()
    assert sum(f.num_rows for f in files) == 120 == w.totals.rows


def test_compaction_merges_a_partition_and_hides_the_files_it_replaces(lake: ObjectStore) -> None:
    from crawlstream.lake import read_replaces

    a = _write(lake, ["http://a.com/1", "http://a.com/2"])
    b = _write(lake, ["http://a.com/2", "http://a.com/3"])
    old = [f.rel for f in a + b]
    merged = compact_partition(lake, 1, a[0].hh, old, row_group_rows=8, zstd_level=3)
    assert merged.num_rows == 3 and merged.duplicates_dropped == 1
    assert read_replaces(lake, merged.rel) == sorted(old)
    t = read_lake_table(lake, merged.rel)
    assert t.column("path_query").to_pylist() == ["/1", "/2", "/3"]
    assert t.column("ts").cast("int64").to_pylist() == [1000, 1001, 1001]  # /2 from the earlier file


def test_duckdb_derives_host_url_and_url_key_like_the_readers(tmp_path: Path) -> None:
    """Dropped columns stay available: DERIVED_SQL + the url_key function give the canonical values."""
    from crawlstream.lake import DERIVED_SQL, register_duckdb
    from crawlstream.urls import url_key

    urls = ["http://www.a.com/x?b=1", "https://b.org:8443/y", "http://shop.c.co.uk/", "http://192.0.2.7/z"]
    _write(tmp_path, urls, ds=9)
    con = duckdb.connect()
    register_duckdb(con)
    glob = (tmp_path / "urls" / "**" / "*.parquet").as_posix()
    rows = con.execute(
        f"SELECT dataset_id, {DERIVED_SQL['host']}, url, url_key(domain, url) FROM ("
        f"SELECT *, {DERIVED_SQL['url']} AS url FROM read_parquet('{glob}', hive_partitioning=true)) ORDER BY url"
    ).fetchall()
    want = sorted((9, canonicalize(u).host, canonicalize(u).url, url_key(u)) for u in urls)
    assert rows == [tuple(w) for w in sorted(want, key=lambda w: w[2])]


def test_a_host_outside_its_domain_is_rejected() -> None:
    from crawlstream.lake import host_prefix

    assert host_prefix("www.a.com", "a.com") == "www."
    assert host_prefix("a.com", "a.com") == ""
    with pytest.raises(ValueError, match="end with its registered domain"):
        host_prefix("a.org", "a.com")
