"""WARC export: stored pages as WARC/1.1 records, one gzip member each, via warcio.

Per page, three records: the ``response`` (HTTP header block + the stored body), a
``request`` (``WARC-Concurrent-To`` the response) and a ``metadata`` record
(``WARC-Refers-To`` the response: title and tags as ``application/warc-fields``). A body the
fetcher cut at its size cap carries ``WARC-Truncated: length``.

The response's header block is the one the server sent (kept with the page since FetchResult
schema id 11, ``crawlstream.store._response``): its status line (version, code, reason) and
every header in order. The stored payload is decoded, so headers that describe the transfer
rather than the payload are renamed as Common Crawl / StormCrawler do, and readers neither
decode twice nor misframe: ``Content-Encoding`` and ``Transfer-Encoding`` (unless
``identity``) become ``X-Crawler-Content-Encoding`` / ``X-Crawler-Transfer-Encoding``, a
``Content-Length`` that differs from the payload becomes ``X-Crawler-Content-Length``
followed by the real ``Content-Length`` (added at the end when the server sent none).
``WARC-IP-Address`` names the server's address on the response and request records when it
is known. Pages stored without a head (older records, ``crawlstream migrate``) get a
synthesized one (status, Content-Type, Content-Length). The request record holds the request
line and headers the fetcher sent (kept since FetchResult schema id 12); for older pages, the
GET as the fetcher sends it (method, path, Host). ``export_warc_files`` starts a new file (with its own
``warcinfo``) once one passes a size limit, as WARC writers conventionally do (1 GB by
default in Heritrix).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawlstream.durable import atomic_file
from crawlstream.errors import ChecksumMismatch

if TYPE_CHECKING:
    from crawlstream.store._model import Entry
    from crawlstream.store._response import StoredResponse
    from crawlstream.store._shards import ShardedStore
    from crawlstream.store._store import ContentStore

__all__ = ["export_warc", "export_warc_files", "response_headers", "split_name"]

logger = logging.getLogger(__name__)

TRUNCATED_TAG = "truncated"  # the bucket compressor's tag for a body cut at fetch.max_body_bytes


def _status_line(status: int | None) -> str:
    code = status or 200
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"{code} Unknown"


def _warcinfo(writer: WARCWriter, name: str) -> None:
    writer.write_record(
        writer.create_warcinfo_record(name, {"software": "crawlstream", "format": "WARC File Format 1.1"})
    )


# Headers describing the transfer, not the (decoded) payload we store: renamed on export.
_RENAMED = {"content-encoding": "X-Crawler-Content-Encoding", "transfer-encoding": "X-Crawler-Transfer-Encoding"}


def response_headers(entry: Entry, body: bytes, response: StoredResponse | None) -> StatusAndHeaders:
    """The HTTP header block of the response record: the original one, fixed for the decoded
    payload (see the module docstring), or a synthesized one when the page has none (or one
    whose status line is not ``HTTP/x.y NNN reason``: not written by our fetcher)."""
    length = str(len(body))
    protocol, _, rest = response.status_line.partition(" ") if response is not None else ("", "", "")
    code, _, reason = rest.partition(" ")
    if response is None or not protocol.startswith("HTTP/") or not (len(code) == 3 and code.isdecimal()):
        return StatusAndHeaders(
            _status_line(entry.status),
            [("Content-Type", entry.content_type or "application/octet-stream"), ("Content-Length", length)],
            protocol="HTTP/1.1",
        )
    headers: list[tuple[str, str]] = []
    has_length = False
    for name, value in response.header_lines():
        key = name.lower()
        if key in _RENAMED and value.strip().lower() != "identity":
            headers.append((_RENAMED[key], value))
        elif key == "content-length":
            if not has_length and value.strip() == length:
                headers.append((name, value))
            else:
                headers.append(("X-Crawler-Content-Length", value))
                if not has_length:
                    headers.append(("Content-Length", length))
            has_length = True
        else:
            headers.append((name, value))
    if not has_length:
        headers.append(("Content-Length", length))
    return StatusAndHeaders(f"{code} {reason}", headers, protocol=protocol)


def _write_page(writer: WARCWriter, entry: Entry, body: bytes, response: StoredResponse | None = None) -> None:
    """The response, request and metadata records of one stored page."""
    date = datetime.fromtimestamp(entry.fetched_at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    http_headers = response_headers(entry, body, response)
    warc_headers = {"WARC-Date": date}
    ip = response.ip_address if response is not None else None
    ip_header = {"WARC-IP-Address": ip} if ip else {}
    warc_headers.update(ip_header)
    if TRUNCATED_TAG in entry.tags:
        warc_headers["WARC-Truncated"] = "length"
    record = writer.create_warc_record(
        entry.url,
        "response",
        payload=io.BytesIO(body),
        length=len(body),
        http_headers=http_headers,
        warc_headers_dict=warc_headers,
    )
    response_id = record.rec_headers.get_header("WARC-Record-ID")
    writer.write_record(record)

    sent = response.request_lines() if response is not None else None
    if sent is not None:
        request_headers = StatusAndHeaders(sent[0], sent[1], is_http_request=True)
    else:  # kept before FetchResult id 12, or imported: the GET as the fetcher sends it
        parts = urlsplit(entry.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request_headers = StatusAndHeaders(f"GET {target} HTTP/1.1", [("Host", parts.netloc)], is_http_request=True)
    request = writer.create_warc_record(
        entry.url,
        "request",
        http_headers=request_headers,
        warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": response_id, **ip_header},
    )
    writer.write_record(request)

    fields = []
    if entry.title:
        fields.append(f"title: {' '.join(entry.title.split())}")
    if entry.tags:
        fields.append(f"tags: {','.join(sorted(entry.tags))}")
    if fields:
        block = ("\r\n".join(fields) + "\r\n").encode("utf-8")
        metadata = writer.create_warc_record(
            entry.url,
            "metadata",
            payload=io.BytesIO(block),
            length=len(block),
            warc_content_type="application/warc-fields",
            warc_headers_dict={"WARC-Date": date, "WARC-Refers-To": response_id},
        )
        writer.write_record(metadata)


class _Pages:
    """Each live page of ``domain`` (or all) with its body and stored response head; corrupt
    records are skipped, logged and counted (``skipped``), never exported.

    Pages whose body is stored once for several URLs keep their own head in a reference record
    the index does not locate: their segments are scanned once per batch of up to
    ``REF_BATCH`` such pages (bounding the heads held in memory, ~0.5 KB each).
    """

    REF_BATCH = 100_000

    def __init__(self, store: ContentStore | ShardedStore, domain: str | None) -> None:
        self._store = store
        self._domain = domain
        self.skipped = 0

    def __iter__(self) -> Iterator[tuple[Entry, bytes, StoredResponse | None]]:
        batch: list[Entry] = []
        refs = 0
        for entry in self._store.search(domain=self._domain):
            batch.append(entry)
            refs += bool(entry.record_segment)
            if refs >= self.REF_BATCH:
                yield from self._batch(batch)
                batch, refs = [], 0
        yield from self._batch(batch)

    def _batch(self, entries: list[Entry]) -> Iterator[tuple[Entry, bytes, StoredResponse | None]]:
        ref_heads = self._store.reference_heads(e for e in entries if e.record_segment)
        for entry in entries:
            try:
                body, response = self._store.read_response(entry)
            except ChecksumMismatch as exc:
                logger.error("export-warc: %s skipped: %s", entry.url, exc)
                self.skipped += 1
                continue
            yield entry, body, response or ref_heads.get(entry.url)


def export_warc(store: ContentStore | ShardedStore, out: IO[bytes], *, domain: str | None = None) -> tuple[int, int]:
    """Write every live page (of ``domain``, or all) to ``out``; returns (pages written, skipped).

    Corrupt records are skipped with an error logged, never exported.
    """
    writer = WARCWriter(out, gzip=True, warc_version="1.1")
    _warcinfo(writer, "crawlstream-export.warc.gz")
    pages = _Pages(store, domain)
    written = 0
    for entry, body, response in pages:
        _write_page(writer, entry, body, response)
        written += 1
    return written, pages.skipped


def split_name(out: Path, index: int) -> Path:
    """``crawl.warc.gz`` -> ``crawl-00000.warc.gz`` (the index before the WARC suffixes)."""
    name = out.name
    for suffix in (".warc.gz", ".warc"):
        if name.endswith(suffix):
            return out.with_name(f"{name[: -len(suffix)]}-{index:05d}{suffix}")
    return out.with_name(f"{name}-{index:05d}")


def export_warc_files(
    store: ContentStore | ShardedStore, out: Path, max_file_bytes: int, *, domain: str | None = None
) -> tuple[list[Path], int, int]:
    """Write the pages to ``split_name(out, 0)``, ``split_name(out, 1)`` ...: a new file begins
    once the current one has reached ``max_file_bytes`` (a page's records never straddle two
    files, so a file may pass the limit by one page). Each file is written to a temporary file
    and published when complete (``crawlstream.durable.atomic_file``: a failed export leaves no
    partial file under a final name). Returns (files, pages written, skipped)."""
    if max_file_bytes <= 0:
        raise ValueError(f"max_file_bytes must be positive, got {max_file_bytes}")
    files: list[Path] = []
    pages = _Pages(store, domain)
    todo = iter(pages)
    page = next(todo, None)
    written = 0
    while page is not None or not files:  # nothing to export: still one valid file, with its warcinfo
        files.append(split_name(out, len(files)))
        with atomic_file(files[-1]) as fh:
            writer = WARCWriter(fh, gzip=True, warc_version="1.1")
            _warcinfo(writer, files[-1].name)
            while page is not None:
                _write_page(writer, *page)
                written += 1
                page = next(todo, None)
                if fh.tell() >= max_file_bytes:
                    break
    return files, written, pages.skipped
