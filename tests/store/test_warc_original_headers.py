"""WARC export writes back each page's original HTTP head (ADR 022): the status line and headers a
real server sent, fetched by the real fetcher, kept in the real content store, read back with
warcio, checked by `warcio check` and indexed by the third-party `cdxj-indexer`."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.recordloader import ArcWarcRecord

from crawlstream.fetch import FetchOutcome
from crawlstream.store import ContentStore, export_warc
from tests.fetch.archive_server import ARCHIVE_BODY, archive_page, fetch_from_server

BIN = Path(sys.executable).parent


async def _afetch() -> FetchOutcome:
    return await fetch_from_server(archive_page, "/page?x=1")


def _responses(data: bytes) -> dict[str, tuple[ArcWarcRecord, bytes]]:
    out = {}
    for record in ArchiveIterator(io.BytesIO(data)):
        if record.rec_type == "response":
            out[record.rec_headers.get_header("WARC-Target-URI")] = (record, record.content_stream().read())
    return out


def _export(store: ContentStore) -> bytes:
    out = io.BytesIO()
    export_warc(store, out)
    return out.getvalue()


def _head(status_line: str, *headers: tuple[str, str]) -> bytes:
    return (status_line + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)).encode("latin-1")


def test_a_fetched_response_round_trips_with_transfer_headers_renamed(tmp_path: Path) -> None:
    fetched = asyncio.run(_afetch())
    assert fetched.outcome == "ok" and fetched.body == ARCHIVE_BODY
    with ContentStore(tmp_path / "store") as store:
        store.put(
            fetched.url,
            fetched.body,
            content_type=fetched.content_type,
            status=fetched.status,
            fetched_at_ms=fetched.fetched_at_ms,
            response_head=fetched.response_head,
            ip_address=fetched.ip_address,
        )
        data = _export(store)
    record, payload = _responses(data)[fetched.url]
    assert payload == ARCHIVE_BODY
    http = record.http_headers
    assert (http.protocol, http.statusline) == ("HTTP/1.1", "200 Fine By Me")
    names = [n for n, _ in http.headers]
    assert [v for n, v in http.headers if n == "Set-Cookie"] == ["a=1; Path=/", "b=2; Path=/"]
    assert http.get_header("X-Archive-Test") == "MiXeD Case value"
    assert http.get_header("X-Crawler-Content-Encoding") == "gzip"
    assert http.get_header("X-Crawler-Transfer-Encoding") == "chunked"
    assert "Content-Encoding" not in names and "Transfer-Encoding" not in names
    assert names.count("Content-Length") == 1 and http.get_header("Content-Length") == str(len(ARCHIVE_BODY))
    # the server's own headers keep their order (aiohttp adds Date and Server after ours)
    sent = [line.split(b": ", 1)[0].decode() for line in fetched.response_head.split(b"\r\n")[1:-1]]
    renamed = {"Content-Encoding": "X-Crawler-Content-Encoding", "Transfer-Encoding": "X-Crawler-Transfer-Encoding"}
    assert [n for n in names if n != "Content-Length"] == [renamed.get(n, n) for n in sent]
    assert record.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1"
    requests = [r for r in ArchiveIterator(io.BytesIO(data)) if r.rec_type == "request"]
    assert [r.rec_headers.get_header("WARC-IP-Address") for r in requests] == ["127.0.0.1"]

    out = tmp_path / "one.warc.gz"
    out.write_bytes(data)
    check = subprocess.run([str(BIN / "warcio"), "check", "-v", str(out)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    cdxj = subprocess.run(
        [str(BIN / "cdxj-indexer"), str(out)], capture_output=True, text=True, cwd=tmp_path, check=True, timeout=60
    )
    (line,) = [json.loads(row.split(" ", 2)[2]) for row in cdxj.stdout.splitlines()]
    assert (line["url"], line["status"], line["mime"]) == (fetched.url, "200", "text/html")


def test_a_content_length_of_the_encoded_body_moves_aside_and_a_matching_one_stays(tmp_path: Path) -> None:
    body = b"<html>" + b"x" * 500 + b"</html>"
    with ContentStore(tmp_path / "store") as store:
        store.put(
            "http://a.example/gz",
            body,
            status=200,
            response_head=_head(
                "HTTP/1.0 200 OK",
                ("Content-Length", "37"),
                ("Content-Encoding", "gzip"),
                ("Server", "Apache/2.4.1 (Unix)"),
            ),
            ip_address="2001:db8::7",
        )
        store.put(
            "http://a.example/plain",
            body + b" ",
            status=200,
            response_head=_head(
                "HTTP/1.1 200 OK",
                ("Content-Encoding", "identity"),
                ("Content-Length", str(len(body) + 1)),
            ),
        )
        pages = _responses(_export(store))
    gz, _ = pages["http://a.example/gz"]
    assert gz.http_headers.protocol == "HTTP/1.0"
    assert gz.http_headers.headers == [
        ("X-Crawler-Content-Length", "37"),
        ("Content-Length", str(len(body))),
        ("X-Crawler-Content-Encoding", "gzip"),
        ("Server", "Apache/2.4.1 (Unix)"),
    ]
    assert gz.rec_headers.get_header("WARC-IP-Address") == "2001:db8::7"
    plain, _ = pages["http://a.example/plain"]
    assert plain.http_headers.headers == [("Content-Encoding", "identity"), ("Content-Length", str(len(body) + 1))]
    assert plain.rec_headers.get_header("WARC-IP-Address") is None


def test_pages_stored_without_a_head_get_a_synthesized_one(tmp_path: Path) -> None:
    """Records written before heads were kept (and `crawlstream migrate` puts) still export."""
    with ContentStore(tmp_path / "store") as store:
        store.put("http://old.example/", b"<html>old</html>", content_type="text/html", status=404)
        store.put(
            "http://odd.example/",
            b"<html>odd</html>",
            content_type="text/html",
            status=200,
            response_head=b"garbage without a status line\r\n",
        )
        pages = _responses(_export(store))
    for url, status in (("http://old.example/", "404 Not Found"), ("http://odd.example/", "200 OK")):
        record, payload = pages[url]
        assert (record.http_headers.protocol, record.http_headers.statusline) == ("HTTP/1.1", status)
        assert record.http_headers.headers == [("Content-Type", "text/html"), ("Content-Length", str(len(payload)))]
        assert record.rec_headers.get_header("WARC-IP-Address") is None


@pytest.mark.parametrize("tier", [None, "warm", "archive"])
def test_a_body_stored_once_for_two_urls_exports_each_urls_own_head(tmp_path: Path, tier: str | None) -> None:
    """Each URL keeps its own head, not the body's first URL's, also once maintenance has
    rewritten the reference records (single in warm, grouped in archive)."""
    body = b"<html>the same soft 404 everywhere</html>"
    with ContentStore(tmp_path / "store") as store:
        for i in range(3):
            store.put(
                f"http://d{i}.example/missing",
                body,
                status=200,
                response_head=_head("HTTP/1.1 200 OK", ("Server", f"server-{i}")),
                ip_address=f"192.0.2.{i + 1}",
            )
        assert sum(bool(e.record_segment) for e in store.search()) == 2  # two reference records
        if tier is not None:
            store.recompress(0.0, tier=tier, now_ms=10**13)
            assert {e.location.tier for e in store.search()} == {tier}
        pages = _responses(_export(store))
    for i in range(3):
        record, payload = pages[f"http://d{i}.example/missing"]
        assert payload == body
        assert record.http_headers.get_header("Server") == f"server-{i}"
        assert record.rec_headers.get_header("WARC-IP-Address") == f"192.0.2.{i + 1}"


@pytest.mark.parametrize("tier", ["warm", "archive"])
def test_heads_survive_a_move_to_a_deeper_tier(tmp_path: Path, tier: str) -> None:
    """Maintenance rewrites records (single in warm, grouped in archive) with their heads."""
    with ContentStore(tmp_path / "store") as store:
        for i in range(30):
            store.put(
                f"http://d{i % 3}.example/p/{i}",
                f"<html><title>{i}</title>{'words ' * (50 + i)}</html>".encode(),
                status=200,
                response_head=_head(f"HTTP/1.1 200 Page {i}", ("Server", "demo"), ("X-N", str(i))),
                ip_address="198.51.100.9",
            )
        report = store.recompress(0.0, tier=tier, now_ms=10**13)
        assert report.moved_bodies == 30
        assert {e.location.tier for e in store.search()} == {tier}
        pages = _responses(_export(store))
    assert len(pages) == 30
    for url, (record, _) in pages.items():
        i = url.rsplit("/", 1)[1]
        assert record.http_headers.statusline == f"200 Page {i}"
        assert record.http_headers.get_header("X-N") == i
        assert record.rec_headers.get_header("WARC-IP-Address") == "198.51.100.9"
