"""`crawlstream demo` (what `make run` runs): crawl, store, lake, index and answers, end to end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from crawlstream.devtools.demoweb import WebModel
from crawlstream.lake._aliases import REDIRECTS_DATASET


def test_demo_crawls_indexes_and_answers_from_the_index(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawlstream",
            "demo",
            "--no-serve",
            "--domains",
            "4",
            "--pages-per-domain",
            "3",
            "--data-dir",
            str(tmp_path),
            "--scheduler-min-delay-s",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary, index, sample = (json.loads(line) for line in proc.stdout.splitlines())
    assert summary["reason"] == "drained" and summary["by_outcome"]["ok"] > 0
    noindex = WebModel(n_domains=4, pages_per_domain=3).noindex_pages()  # the demo's web: stored, not indexed
    # the crawl's dataset holds every page but the noindex ones; the index scanned it and the
    # alias rows (redirect hops, raw forms of links: ADR 024) in their reserved datasets
    rows = {
        d.name: sum(pq.ParquetFile(f).metadata.num_rows for f in d.rglob("*.parquet"))
        for d in (tmp_path / "urls").glob("dataset_id=*")
    }
    assert noindex and rows["dataset_id=1"] == summary["by_outcome"]["ok"] - len(noindex)
    assert index["index"]["rows_scanned"] == sum(rows.values())
    assert rows.get(f"dataset_id={REDIRECTS_DATASET}", 0) >= summary["by_outcome"].get("redirect", 0) > 0
    answers = [a for a in sample["sample"]["answers"] if a["datasets"]]
    assert answers, sample
    for answer in answers:
        (dataset,) = answer["datasets"]
        assert dataset["dataset_id"] == 1 and dataset["url_count"] == answer["total"] > 0
        assert all(url.startswith("http://") for url in answer["first_urls"])


def test_demo_stopped_by_max_pages_answers_for_the_domains_it_did_not_reach(tmp_path: Path) -> None:
    """One page of four domains: the sample names domains the index never saw, with no datasets."""
    env = {**os.environ, "CRAWLSTREAM_CRAWL_MAX_PAGES": "1", "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0.05"}
    cmd = [sys.executable, "-m", "crawlstream", "demo", "--no-serve", "--domains", "4", "--pages-per-domain", "3"]
    proc = subprocess.run(
        [*cmd, "--data-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary, _index, sample = (json.loads(line) for line in proc.stdout.splitlines())
    assert summary["reason"] == "max_pages"
    answers = sample["sample"]["answers"]
    assert len(answers) == 3 and sum(1 for a in answers if not a["datasets"]) >= 2, answers


def test_demo_refuses_a_taken_api_port_before_crawling(tmp_path: Path) -> None:
    """Not a traceback after a minute of crawling: a one-line error at once, naming the flag."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "crawlstream", "demo", "--data-dir", str(tmp_path), "--api-port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--api-port" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "store").exists(), "nothing was crawled"
