"""The segment and log byte layouts, on in-memory bytes."""

from __future__ import annotations

import pytest
import zstandard as zstd

from crawlstream.errors import ChecksumMismatch
from crawlstream.store import (
    KIND_BODY,
    KIND_REF,
    GroupHeader,
    TornRecord,
    UnsupportedFormat,
    content_hash,
    decode_log_records,
    decode_meta,
    decode_record_header,
    encode_group,
    encode_log_record,
    encode_meta,
    encode_record,
    member_checksum,
    scan_records,
)
from crawlstream.store._index_legacy import decode_index_snapshot, encode_index_snapshot


def _record(url: str, body: bytes, seq: int = 1, kind: int = KIND_BODY) -> bytes:
    meta = encode_meta({"u": url, "t": "text/html", "n": None})
    frame = zstd.ZstdCompressor(level=3).compress(meta + (body if kind == KIND_BODY else b""))
    return encode_record(
        kind=kind,
        url_key=seq * 7,
        seq=seq,
        fetched_at_ms=1000,
        raw_size=len(body),
        chash=content_hash(body),
        meta_len=len(meta),
        frame=frame,
    )


def test_record_header_round_trips_sizes_and_metadata_lives_in_the_frame() -> None:
    data = _record("http://a.example/x", b"hello" * 50, seq=3)
    header = decode_record_header(data)
    assert (header.kind, header.seq, header.raw_size, header.record_size) == (KIND_BODY, 3, 250, len(data))
    assert b"a.example" not in data[: header.header_size]  # the fixed header carries no URL
    content = zstd.ZstdDecompressor().decompress(data[header.header_size :])
    assert len(content) == header.content_size
    assert decode_meta(content[: header.meta_len]) == {"u": "http://a.example/x", "t": "text/html"}
    assert content[header.meta_len :] == b"hello" * 50


def test_fixed_record_header_is_86_bytes() -> None:
    data = _record("http://a.example/x", b"hello")
    assert decode_record_header(data).header_size == 86


def test_segment_is_plain_zstd_stream_of_metadata_lines_and_bodies() -> None:
    """Skippable header frames make `zstd -d` over a segment yield each metadata line, then its body."""
    data = _record("http://a.example/1", b"one") + _record("http://a.example/2", b"two", 2)
    reader = zstd.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    assert reader.read() == (
        b'{"u":"http://a.example/1","t":"text/html"}\none{"u":"http://a.example/2","t":"text/html"}\ntwo'
    )


def test_version_one_record_is_refused_as_unsupported_format_not_misread() -> None:
    import struct
    import zlib

    v1_body = struct.pack("<BBHIQQqQQ16sQI", 1, KIND_BODY, 0, 0, 1, 1, 0, 3, 12, b"\0" * 16, 0, 2) + b"{}"
    payload = v1_body + struct.pack("<I", zlib.crc32(v1_body))
    data = struct.pack("<II", 0x184D2A5D, len(payload)) + payload + b"\0" * 12
    with pytest.raises(UnsupportedFormat, match="format version 1"):
        decode_record_header(data)


def test_index_snapshot_round_trips_entries_and_segment_ends() -> None:
    def key_of(url: str) -> int:
        return len(url)

    records = [
        {
            "u": "https://b.example/x",
            "k": 19,
            "q": 4,
            "l": ["cold/0000000002.seg", 10, 500, 32768, "cold"],
            "h": "ab" * 16,
            "z": 900,
            "f": 123,
            "t": "text/html",
            "n": "B",
            "s": 200,
        },
        {
            "u": "https://a.example/y",
            "k": 12345,  # not what key_of gives: a forced collision key, kept explicitly
            "q": 5,
            "l": ["cold/0000000002.seg", 510, 300, 0, "cold"],
            "h": "cd" * 16,
            "z": 10,
            "f": 124,
            "t": None,
            "n": None,
            "s": None,
            "r": ["hot/0000000003.seg", 0, 0],
        },
    ]
    blob = encode_index_snapshot(7, records, {"cold/0000000002.seg": 810}, key_of)
    gen, decoded, ends = decode_index_snapshot(blob, key_of)
    assert gen == 7 and ends == {"cold/0000000002.seg": 810}
    assert sorted(decoded, key=lambda r: r["q"]) == records


def test_damaged_index_snapshot_is_a_checksum_mismatch() -> None:
    blob = bytearray(encode_index_snapshot(1, [], {}, len))
    blob[len(blob) // 2] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        decode_index_snapshot(bytes(blob), len)


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
    assert items[2].header is not None and items[2].header.seq == 3


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


def test_reference_record_frame_holds_only_its_metadata() -> None:
    data = _record("http://a.example/r", b"hello", kind=KIND_REF)
    header = decode_record_header(data)
    assert header.kind == KIND_REF and header.raw_size == 5 and header.content_size == header.meta_len
    assert zstd.ZstdDecompressor().decompress(data[header.header_size :]).endswith(b"\n")


def test_log_decoding_stops_at_a_torn_tail_and_skips_bad_crc() -> None:
    good = encode_log_record({"a": 1}) + encode_log_record({"b": 2})
    bad = bytearray(encode_log_record({"c": 3}))
    bad[-1] ^= 0xFF
    data = good + bytes(bad) + encode_log_record({"d": 4})[:-2]
    records, valid_end, skipped = decode_log_records(data)
    assert records == [{"a": 1}, {"b": 2}] and skipped == 1 and valid_end == len(good) + len(bad)


def _group(*pages: tuple[str, bytes]) -> bytes:
    contents = [encode_meta({"u": url, "q": i, "f": 0}) + body for i, (url, body) in enumerate(pages)]
    metas = [len(encode_meta({"u": url, "q": i, "f": 0})) for i, (url, _) in enumerate(pages)]
    frame = zstd.ZstdCompressor(level=3).compress(b"".join(contents))
    members = [
        (KIND_BODY, meta_len, len(content) - meta_len, member_checksum(content))
        for meta_len, content in zip(metas, contents, strict=True)
    ]
    return encode_group(dict_id=0, members=members, frame=frame)


def test_group_header_holds_a_member_table_and_the_frame_yields_the_members_in_order() -> None:
    data = _group(("http://a.example/1", b"one" * 10), ("http://a.example/2", b"two" * 20))
    header = decode_record_header(data)
    assert isinstance(header, GroupHeader) and header.record_size == len(data)
    assert [(m.body_size, m.start) for m in header.members] == [(30, 0), (60, header.members[0].end)]
    assert header.header_size == 8 + 20 + 2 * 17 + 4  # fixed group header + 17 bytes per member + crc
    content = zstd.ZstdDecompressor().decompress(data[header.header_size :])
    second = header.members[1]
    assert decode_meta(content[second.start : second.start + second.meta_len])["u"] == "http://a.example/2"
    assert content[second.start + second.meta_len : second.end] == b"two" * 20
    assert member_checksum(content[second.start : second.end]) == second.checksum


def test_scan_yields_a_group_with_a_damaged_frame_with_its_header_so_members_can_be_salvaged() -> None:
    first, second = _group(("http://a.example/1", b"a" * 300)), _record("http://a.example/2", b"b" * 300, 2)
    data = bytearray(first + second)
    data[len(first) - 3] ^= 0x01  # inside the group's zstd frame
    items = list(scan_records(bytes(data)))
    assert [(i.problem, i.frame_ok) for i in items] == [("", False), ("", True)]
    assert isinstance(items[0].header, GroupHeader)


def test_scan_reports_a_cut_group_as_torn_and_a_damaged_member_table_as_corrupt() -> None:
    group = _group(("http://a.example/1", b"a" * 300), ("http://a.example/2", b"b" * 300))
    assert [i.problem for i in scan_records(group[:-4])] == ["torn"]
    damaged = bytearray(group + _record("http://a.example/3", b"c", 3))
    damaged[20] ^= 0x01
    assert [i.problem for i in scan_records(bytes(damaged))] == ["corrupt", ""]
