"""`crawlstream export-warc` and `crawlstream store ...` against a real store directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlstream.cli import main
from crawlstream.store import ContentStore

WARCIO = Path(sys.executable).with_name("warcio")


@pytest.fixture
def data_dir(tmp_path: Path, real_pages: list[tuple[str, bytes]]) -> Path:
    with ContentStore(tmp_path / "store") as store:
        for url, body in real_pages[:40] + [p for p in real_pages if "booksamillion" in p[0]][:10]:
            store.put(
                url,
                body,
                content_type="text/html; charset=utf-8",
                title="t",
                status=200,
                fetched_at_ms=1_600_000_000_123,
            )
        store.put("https://example.com/gone", b"<html>404</html>", content_type="text/html", status=404)
    return tmp_path


def test_export_warc_reads_back_byte_identical_with_warcio(
    data_dir: Path, real_pages: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    out = data_dir / "all.warc.gz"
    assert main(["export-warc", "--data-dir", str(data_dir), str(out)]) == 0
    expected = dict(real_pages[:40] + [p for p in real_pages if "booksamillion" in p[0]][:10])
    expected["https://example.com/gone"] = b"<html>404</html>"
    seen: dict[str, bytes] = {}
    with open(out, "rb") as fh:
        for record in ArchiveIterator(fh):
            if record.rec_type == "response":
                assert (
                    record.rec_headers.get_header("WARC-Date") == "2020-09-13T12:26:40.123000Z"
                    or record.http_headers.get_statuscode() == "404"
                )
                seen[record.rec_headers.get_header("WARC-Target-URI")] = record.content_stream().read()
    assert seen == expected
    check = subprocess.run([str(WARCIO), "check", "-v", str(out)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    index = subprocess.run(
        [str(WARCIO), "index", "-f", "warc-type,warc-target-uri,http:status", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert index.returncode == 0
    statuses = {json.loads(line).get("http:status") for line in index.stdout.splitlines() if '"response"' in line}
    assert statuses == {"200", "404"}


def test_export_warc_of_one_domain_holds_only_that_domain(data_dir: Path) -> None:
    out = data_dir / "bam.warc.gz"
    assert main(["export-warc", "--data-dir", str(data_dir), "--domain", "booksamillion.com", str(out)]) == 0
    with open(out, "rb") as fh:
        uris = [r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(fh) if r.rec_type == "response"]
    assert len(uris) == 10 and all("booksamillion.com" in u for u in uris)


def test_store_verify_reports_damage_and_exits_one(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "verify", "--data-dir", str(data_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    seg = next((data_dir / "store" / "segments" / "hot").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert main(["store", "verify", "--data-dir", str(data_dir)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert len(report["problems"]) == 1 and report["problems"][0]["kind"] == "corrupt"
    assert seg.with_name(seg.name + ".invalid").exists()


def test_store_rebuild_index_and_stats(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for index_file in (data_dir / "store").glob("index.sqlite*"):
        index_file.unlink()
    assert main(["store", "rebuild-index", "--data-dir", str(data_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["live_urls"] == 51
    assert main(["store", "stats", "--data-dir", str(data_dir)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["urls"] == 51 and stats["ratio"] > 2


def test_store_tag_adds_and_removes_tags_of_a_stored_page(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ContentStore(data_dir / "store") as store:
        url = sorted(e.url for e in store.search(domain="example.com"))[0]
    common = ["--data-dir", str(data_dir)]
    messy = url.replace("https://example.com", "HTTPS://EXAMPLE.COM:443")  # any spelling of it
    assert main(["store", "tag", messy, "gold", "🔖", *common]) == 0
    assert "gold" in json.loads(capsys.readouterr().out)["tags"]
    assert main(["store", "tag", url, "gold", "--remove", *common]) == 0
    assert "gold" not in json.loads(capsys.readouterr().out)["tags"]
    assert main(["store", "tag", "http://never.example.org/", "x", *common]) == 1
    assert main(["store", "tag", url, "bad\ttag", *common]) == 1
    with ContentStore(data_dir / "store") as store:
        entry = store.entry(url)
        assert entry is not None and "🔖" in entry.tags and "gold" not in entry.tags
        assert [e.url for e in store.search(tag="🔖")] == [url]
