"""`crawlstream export-warc --max-file-bytes`: parts that third-party tools accept — `warcio check`
verifies every digest, the `cdxj-indexer` (PyPI) indexes every page at an offset where warcio
reads back its exact body; request and metadata records, `WARC-Truncated` on cut bodies."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlstream.cli import main
from crawlstream.store import ContentStore

BIN = Path(sys.executable).parent
LIMIT_BYTES = 24_000


def _body(i: int) -> bytes:
    rng = random.Random(i)
    words = " ".join(
        rng.choice(("crawl", "warc", "page", "store", "index")) + str(rng.randrange(999)) for _ in range(60)
    )
    return f"<html><title>page {i}</title><body>{words * (1 + i % 5)}</body></html>".encode()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with ContentStore(tmp_path / "store") as store:
        for i in range(40):
            store.put(
                f"http://d{i % 4}.example/p/{i}?q={i}",
                _body(i),
                content_type="text/html; charset=utf-8",
                title=f"page {i}",
                status=200 if i % 9 else 404,
                fetched_at_ms=1_700_000_000_000 + i * 1000,
                tags=["truncated"] if i % 6 == 0 else [],
            )
    return tmp_path


def test_split_export_passes_warcio_check_and_a_third_party_cdxj_indexer(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "crawl.warc.gz"
    args = ["export-warc", "--data-dir", str(data_dir), "--max-file-bytes", str(LIMIT_BYTES), str(out)]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    files = [Path(f) for f in report["out"]]
    assert report["records"] == 40 and len(files) > 2
    assert [f.name for f in files] == [f"crawl-{i:05d}.warc.gz" for i in range(len(files))]
    assert all(f.stat().st_size >= LIMIT_BYTES for f in files[:-1])

    check = subprocess.run([str(BIN / "warcio"), "check", *map(str, files)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    cdxj = subprocess.run(
        [str(BIN / "cdxj-indexer"), *map(str, files)], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    lines = [json.loads(line.split(" ", 2)[2]) for line in cdxj.stdout.splitlines()]
    with ContentStore(data_dir / "store") as store:
        stored = {e.url: (store.get(e.url), "truncated" in e.tags) for e in store.search()}
    assert sorted(line["url"] for line in lines) == sorted(stored)
    for line in lines:
        with open(tmp_path / line["filename"], "rb") as fh:
            fh.seek(int(line["offset"]))
            record = next(iter(ArchiveIterator(fh)))
            assert record.rec_type == "response" and record.rec_headers.get_header("WARC-Target-URI") == line["url"]
            body, truncated = stored[line["url"]]
            assert record.content_stream().read() == body
            assert (record.rec_headers.get_header("WARC-Truncated") == "length") == truncated

    for part in files:  # each page's three records stay together, linked to its response
        with open(part, "rb") as fh:
            records = [(r.rec_type, r.rec_headers) for r in ArchiveIterator(fh)]
        assert records[0][0] == "warcinfo"
        responses = {
            h.get_header("WARC-Record-ID"): h.get_header("WARC-Target-URI") for t, h in records if t == "response"
        }
        requests = {
            h.get_header("WARC-Concurrent-To"): h.get_header("WARC-Target-URI") for t, h in records if t == "request"
        }
        metadata = {
            h.get_header("WARC-Refers-To"): h.get_header("WARC-Target-URI") for t, h in records if t == "metadata"
        }
        assert responses == requests == metadata
