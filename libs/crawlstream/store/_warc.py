"""WARC export: stored pages as WARC/1.1 ``response`` records, one gzip member each, via warcio.

The store keeps decoded bodies, status and content type but not the original HTTP header
block, so each response record carries a synthesized ``HTTP/1.1`` header block (status
line, Content-Type, Content-Length): that is what replay tools and ``warcio index``
expect, and the payload stays byte-identical to what the store holds.
"""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime
from http import HTTPStatus
from typing import IO, TYPE_CHECKING

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawlstream.errors import ChecksumMismatch

if TYPE_CHECKING:
    from crawlstream.store._store import ContentStore

__all__ = ["export_warc"]

logger = logging.getLogger(__name__)


def _status_line(status: int | None) -> str:
    code = status or 200
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"{code} Unknown"


def export_warc(store: ContentStore, out: IO[bytes], *, domain: str | None = None) -> tuple[int, int]:
    """Write every live page (of ``domain``, or all) to ``out``; returns (written, skipped).

    Corrupt records are skipped with an error logged, never exported.
    """
    writer = WARCWriter(out, gzip=True, warc_version="1.1")
    info = writer.create_warcinfo_record(
        "crawlstream-export.warc.gz", {"software": "crawlstream", "format": "WARC File Format 1.1"}
    )
    writer.write_record(info)
    written = skipped = 0
    for entry in store.search(domain=domain):
        try:
            body = store.read_location(entry.location, expected_hash=entry.content_hash)
        except ChecksumMismatch as exc:
            logger.error("export-warc: %s skipped: %s", entry.url, exc)
            skipped += 1
            continue
        headers = [
            ("Content-Type", entry.content_type or "application/octet-stream"),
            ("Content-Length", str(len(body))),
        ]
        http_headers = StatusAndHeaders(_status_line(entry.status), headers, protocol="HTTP/1.1")
        date = datetime.fromtimestamp(entry.fetched_at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        record = writer.create_warc_record(
            entry.url,
            "response",
            payload=io.BytesIO(body),
            length=len(body),
            http_headers=http_headers,
            warc_headers_dict={"WARC-Date": date},
        )
        writer.write_record(record)
        written += 1
    return written, skipped
