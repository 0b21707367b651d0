"""Issue 13's first must-show, end to end: crawl the synthetic web (pages of 15-60 KB), run
`crawlstream store maintain --now` (every tier age zero), then every stored page reads back
byte-identical to what the web served — from the store and from `crawlstream export-warc`
(checked with `warcio check`).

And the ratio half: the store keeps those pages in fewer bytes (every byte it keeps:
segments, dictionaries, index, logs) than one zstd-19 stream of them. The padded pages are
random words, which no LZ window split into groups matches a single stream on (ADR 026's
table); the archive tier writes such groups in bzip2, whose context sort does: 4.39x against
the stream's 4.30x (4.13x with zstd alone). On the 957 real pages the zstd layout wins by
itself (tests/store/test_ratio_whole_set.py, slow).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import zstandard as zstd
from e2e_support import crawl_env, crawl_settings
from warcio.archiveiterator import ArchiveIterator

from crawlstream.cli import main
from crawlstream.cli._run import run_crawl
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.runtime import open_host
from crawlstream.store import open_store

SERVICES = ("deduper", "scheduler", "fetcher", "link-extractor", "bucket-compressor")
BIN = Path(sys.executable).parent


def _served(web: DemoWeb, url: str) -> bytes:
    """The body the web serves for ``url`` now (the pages do not change: ``changing_every=0``)."""
    host, _, path = url.split("://", 1)[1].partition("/")
    request = urllib.request.Request(f"http://127.0.0.1:{web.port}/{path}", headers={"Host": host})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


@pytest.mark.timeout(300)
def test_after_a_crawl_and_a_pass_with_ages_zero_every_page_reads_back_from_the_store_and_from_warc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    settings = crawl_settings(data_dir)
    web = DemoWeb(8, pages_per_domain=12, seed=9, special_every=0, crawl_delay_s=0.05, page_bytes=(15_000, 60_000))
    with web:
        with open_host(settings) as host:
            summary = run_crawl(
                host, web.seed_urls(), services=SERVICES, exit_when_done=True, resolve_map=web.resolve_map
            )
        assert summary.reason == "drained"
        with open_store(settings) as store:
            html = sorted(e.url for e in store.search() if e.status == 200 and "/p/" in e.url)
            assert len(html) >= 80  # most of the web's 96 pages (robots keeps some out)
            served = {url: _served(web, url) for url in html}

    for name, value in crawl_env(data_dir).items():
        monkeypatch.setenv(name, value)
    assert main(["store", "maintain", "--now"]) == 0
    capsys.readouterr()

    with open_store(settings) as store:
        entries = {e.url: e for e in store.search()}
        assert {e.location.tier for e in entries.values()} == {"archive"}
        bodies = {url: store.get(url) for url in entries}
        assert store.verify().ok
        stats = store.stats()
    assert all(bodies[url] == body for url, body in served.items())
    on_disk = sum(p.stat().st_size for p in (data_dir / "store").rglob("*") if p.is_file())
    assert stats.stored_bytes == on_disk and stats.raw_bytes == sum(map(len, bodies.values()))
    stream = len(zstd.ZstdCompressor(level=19).compress(b"".join(bodies[url] for url in sorted(bodies))))
    stream_ratio = stats.raw_bytes / stream
    # every byte the store keeps (segments, dictionaries, index, logs) against the stream's
    assert stats.ratio >= stream_ratio, f"store {stats.ratio:.3f}x ({on_disk} B) vs stream {stream_ratio:.3f}x"

    out = tmp_path / "crawl.warc.gz"
    assert main(["export-warc", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out"] == str(out)  # one file: no --max-file-bytes
    files = [out]
    check = subprocess.run([str(BIN / "warcio"), "check", *map(str, files)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    exported: dict[str, bytes] = {}
    for part in files:
        with open(part, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type == "response":
                    exported[record.rec_headers.get_header("WARC-Target-URI")] = record.content_stream().read()
    assert exported == bodies
