"""The segment and log byte layouts, on in-memory bytes."""

from __future__ import annotations

import pytest
import zstandard as zstd

from crawlstream.errors import ChecksumMismatch
from crawlstream.store import (
    KIND_BODY,
    KIND_REF,
    TornRecord,
    content_hash,
    decode_log_records,
    decode_record_header,
    encode_log_record,
    encode_record,
    scan_records,
)


def _record(url: str, body: bytes, seq: int = 1) -> bytes:
    frame = zstd.ZstdCompressor(level=3).compress(body)
    return encode_record(
        kind=KIND_BODY,
        url_key=seq * 7,
        seq=seq,
        fetched_at_ms=1000,
        raw_size=len(body),
        chash=content_hash(body),
        meta={"u": url},
        frame=frame,
    )


def test_record_header_round_trips_url_and_sizes() -> None:
    data = _record("http://a.example/x", b"hello" * 50, seq=3)
    header = decode_record_header(data)
    assert (header.kind, header.url, header.seq, header.raw_size, header.record_size) == (
        KIND_BODY,
        "http://a.example/x",
        3,
        250,
        len(data),
    )
    assert zstd.ZstdDecompressor().decompress(data[header.header_size :]) == b"hello" * 50


def test_segment_is_plain_zstd_stream_of_bodies() -> None:
    """Skippable header frames make `zstd -d` over a segment yield the concatenated bodies."""
    data = _record("http://a.example/1", b"one") + _record("http://a.example/2", b"two", 2)
    reader = zstd.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    assert reader.read() == b"onetwo"


def test_scan_reports_corrupt_record_and_keeps_the_next() -> None:
    first, second, third = (
        _record("http://a.example/1", b"a" * 300),
        _record("http://a.example/2", b"b" * 300, 2),
        _record("http://a.example/3", b"c" * 300, 3),
    )
    data = bytearray(first + second + third)
    data[len(first) + 40] ^= 0xFF  # inside the second header
    items = list(scan_records(bytes(data)))
    assert [i.problem for i in items] == ["", "corrupt", ""]
    assert items[1].offset == len(first) and items[1].length == len(second)
    assert items[2].header is not None and items[2].header.url == "http://a.example/3"


def test_scan_reports_flipped_frame_byte_as_corrupt() -> None:
    first, second = _record("http://a.example/1", b"a" * 300), _record("http://a.example/2", b"b" * 300, 2)
    data = bytearray(first + second)
    data[len(first) - 3] ^= 0x01  # inside the first zstd frame
    assert [i.problem for i in scan_records(bytes(data))] == ["corrupt", ""]


def test_scan_reports_cut_final_record_as_torn() -> None:
    first, second = _record("http://a.example/1", b"a"), _record("http://a.example/2", b"b", 2)
    items = list(scan_records(first + second[:-5]))
    assert [i.problem for i in items] == ["", "torn"]
    with pytest.raises(TornRecord):
        decode_record_header(second[:-5])


def test_header_with_bad_magic_is_a_checksum_mismatch() -> None:
    with pytest.raises(ChecksumMismatch):
        decode_record_header(b"\x00" * 200)


def test_reference_record_has_no_frame() -> None:
    data = encode_record(
        kind=KIND_REF, url_key=1, seq=1, fetched_at_ms=0, raw_size=5, chash=content_hash(b"hello"), meta={"u": "u"}
    )
    assert decode_record_header(data).frame_size == 0


def test_log_decoding_stops_at_a_torn_tail_and_skips_bad_crc() -> None:
    good = encode_log_record({"a": 1}) + encode_log_record({"b": 2})
    bad = bytearray(encode_log_record({"c": 3}))
    bad[-1] ^= 0xFF
    data = good + bytes(bad) + encode_log_record({"d": 4})[:-2]
    records, valid_end, skipped = decode_log_records(data)
    assert records == [{"a": 1}, {"b": 2}] and skipped == 1 and valid_end == len(good) + len(bad)
