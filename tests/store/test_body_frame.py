"""A body stored as the fetcher compressed it (``put(body_frame=...)``): the record is the
metadata's frame followed by the fetcher's, and every read path sees one body (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard as zstd

from crawlstream.errors import ChecksumMismatch
from crawlstream.store import ContentStore

_transit = zstd.ZstdCompressor(level=3)


def _segments(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / "segments").rglob("*.seg")))


def test_the_fetchers_frame_is_kept_and_every_read_path_returns_the_body(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    pages = real_pages[:20]
    frames = {url: _transit.compress(body) for url, body in pages}
    root = tmp_path / "s"
    with ContentStore(root) as store:
        for url, body in pages:
            store.put(url, body, content_type="text/html", fetched_at_ms=1, body_frame=frames[url],
                      response_head=b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n")
        on_disk = _segments(root)
        assert all(frame in on_disk for frame in frames.values())  # stored as they came
        assert all(store.get(url) == body for url, body in pages)
        entry = store.entry(pages[0][0])
        assert entry is not None
        body, response = store.read_response(entry)
        assert body == pages[0][1] and response is not None and response.status_line == "HTTP/1.1 200 OK"
        assert store.verify().ok
    with ContentStore(root) as store:  # reopened: the index and the reads agree
        assert all(store.get(url) == body for url, body in pages)
        assert store.rebuild_index() == len(pages)  # a scan decodes the two-frame records too
        report = store.maintain(ages_zero=True)
        assert report.moved_urls == len(pages)
        assert all(store.get(url) == body for url, body in pages)
        assert {e.location.tier for e in store.search()} == {"archive"}


def test_a_reference_and_an_empty_body_ignore_the_frame(tmp_path: Path, real_pages: list[tuple[str, bytes]]) -> None:
    (url, body), (other, _) = real_pages[0], real_pages[1]
    with ContentStore(tmp_path / "s") as store:
        store.put(url, body, body_frame=_transit.compress(body))
        store.put(other, body, body_frame=_transit.compress(body))  # the same body: a reference
        store.put(url + "?empty", b"", body_frame=_transit.compress(b""))
        assert store.get(other) == body and store.get(url + "?empty") == b""
        assert store.verify().ok


def test_damage_inside_the_kept_frame_is_caught_and_quarantined(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    url, body = real_pages[0]
    frame = _transit.compress(body)
    root = tmp_path / "s"
    with ContentStore(root) as store:
        store.put(url, body, body_frame=frame)
        store.sync()
        [segment] = list((root / "segments").rglob("*.seg"))
        data = bytearray(segment.read_bytes())
        at = data.index(frame) + len(frame) // 2
        data[at] ^= 0xFF
        segment.write_bytes(bytes(data))
        with pytest.raises(ChecksumMismatch):
            store.get(url)
        assert store.quarantined_urls() == [store.entry(url).url]  # type: ignore[union-attr]
