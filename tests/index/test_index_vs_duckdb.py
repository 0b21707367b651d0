"""The reader's answers equal DuckDB's SQL over the Parquet files (same dedupe rule)."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb

from crawlstream.index import DatasetCount, IndexReader

# The lake stores host as host_prefix + domain (ADR 007): the URL is derived the documented way.
URL_SQL = "scheme || '://' || host_prefix || domain || coalesce(':' || CAST(port AS VARCHAR), '') || path_query"


def _duck(root: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    glob = (root / "urls" / "**" / "*.parquet").as_posix()
    con.execute(
        f"CREATE TABLE lake AS SELECT DISTINCT dataset_id, domain, {URL_SQL} AS url "
        f"FROM read_parquet('{glob}', hive_partitioning=true, union_by_name=true)"
    )
    return con


def test_datasets_counts_and_url_lists_equal_duckdb(lake_root: Path, index_reader: IndexReader) -> None:
    con = _duck(lake_root)
    domains = [r[0] for r in con.execute("SELECT DISTINCT domain FROM lake ORDER BY domain").fetchall()]
    sample = random.Random(1).sample(domains, min(300, len(domains)))
    reader = index_reader
    with reader.pin() as idx:
        assert idx.domain_count() == len(domains)
        for domain in sample:
            expected = con.execute(
                "SELECT dataset_id, count(*) FROM lake WHERE domain = ? GROUP BY 1 ORDER BY 1", [domain]
            ).fetchall()
            assert idx.datasets_for_domain(domain) == [DatasetCount(ds, n) for ds, n in expected]
            for ds, n in expected:
                want = [r[0] for r in con.execute(
                    "SELECT url FROM lake WHERE domain = ? AND dataset_id = ? ORDER BY url", [domain, ds]
                ).fetchall()]
                page = idx.urls(domain, ds, 0, n + 5)
                assert page is not None and page.total == n and page.next_offset is None
                assert [i.url for i in page.items] == want


def test_pages_concatenate_to_the_full_list(index_reader: IndexReader) -> None:
    """Walking next_offset with a small limit crosses row groups and files without gaps."""
    reader = index_reader
    with reader.pin() as idx:
        biggest = max(
            ((d.url_count, dom, d.dataset_id) for dom in ("google.com", "youtube.com", "facebook.com")
             for d in idx.datasets_for_domain(dom) or []),
        )
        _, domain, ds = biggest
        full = idx.urls(domain, ds, 0, 10**6)
        assert full is not None and full.total > 64
        got, offset = [], 0
        while offset is not None:
            page = idx.urls(domain, ds, offset, 7)
            assert page is not None
            got += page.items
            offset = page.next_offset
        assert got == full.items
        assert [i.url for i in got] == sorted(i.url for i in got)


def test_unknown_domain_and_dataset_are_none(index_reader: IndexReader) -> None:
    reader = index_reader
    with reader.pin() as idx:
        assert idx.datasets_for_domain("no-such-domain.invalid") is None
        assert idx.urls("no-such-domain.invalid", 1, 0, 10) is None
        assert idx.urls("google.com", 9999, 0, 10) is None
        assert idx.dataset_ids() == list(range(1, 21))


def test_lookup_url_finds_every_dataset_of_a_url(lake_root: Path, index_reader: IndexReader) -> None:
    con = _duck(lake_root)
    rows = con.execute(
        "SELECT url, list(dataset_id ORDER BY dataset_id) FROM lake GROUP BY url ORDER BY url LIMIT 2000"
    ).fetchall()
    reader = index_reader
    with reader.pin() as idx:
        for url, datasets in random.Random(3).sample(rows, 150):
            assert sorted(idx.lookup_url(url)) == datasets
        assert idx.lookup_url("https://www.google.com/definitely/not/there") == []
