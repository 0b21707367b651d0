"""The content-store byte layouts on hostile bytes (pure codec, in memory).

tests/store/test_store_codec.py pins the layouts and one damaged byte per case. Here every
decoder gets arbitrary, mutated, truncated and *re-sealed* bytes (checksums recomputed
after the damage, as a foreign writer or a checksum collision would leave them). The
properties: only the documented errors escape (TornRecord, UnsupportedFormat,
ChecksumMismatch: all BadDataError), a scan tiles the buffer, and a record the scan calls
good is byte for byte a record that was written.
"""

from __future__ import annotations

import contextlib
import json
import struct
import zlib
from typing import Any

import pytest
import xxhash
import zstandard as zstd
from adversarial_support import ADVERSARIAL, mutated, truncated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawlstream.errors import BadDataError, ChecksumMismatch
from crawlstream.store import (
    KIND_BODY,
    KIND_REF,
    GroupHeader,
    RecordHeader,
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
from crawlstream.urls import url_key

pytestmark = pytest.mark.timeout(60)

# The documented layouts (store/_codec.py docstring), restated so the test re-seals by the spec.
SKIP = struct.Struct("<II")
HEADER = struct.Struct("<BBIQQqQQ16sQI")
GROUP = struct.Struct("<BBIIQH")
MEMBER = struct.Struct("<BIIQ")
CRC = struct.Struct("<I")
SNAP_MAGIC = b"CSIX3\n"


def single(url: str, body: bytes, seq: int, kind: int = KIND_BODY) -> bytes:
    meta = encode_meta({"u": url, "t": "text/html"})
    frame = zstd.ZstdCompressor(level=1).compress(meta + (body if kind == KIND_BODY else b""))
    return encode_record(
        kind=kind,
        url_key=seq * 7,
        seq=seq,
        fetched_at_ms=seq,
        raw_size=len(body),
        chash=content_hash(body),
        meta_len=len(meta),
        frame=frame,
    )


def group(pages: list[tuple[str, bytes]]) -> bytes:
    contents = [encode_meta({"u": url, "q": i, "f": 0}) + body for i, (url, body) in enumerate(pages)]
    metas = [len(encode_meta({"u": url, "q": i, "f": 0})) for i, (url, _) in enumerate(pages)]
    frame = zstd.ZstdCompressor(level=1).compress(b"".join(contents))
    members = [
        (KIND_BODY, meta_len, len(content) - meta_len, member_checksum(content))
        for meta_len, content in zip(metas, contents, strict=True)
    ]
    return encode_group(dict_id=0, members=members, frame=frame)


BODIES = st.binary(max_size=120) | st.builds(lambda s, n: s * n, st.binary(min_size=1, max_size=8), st.integers(1, 60))


@st.composite
def segments(draw: st.DrawFn) -> list[bytes]:
    """A segment's records: single body and reference records and groups, in any order."""
    records = []
    for seq in range(draw(st.integers(min_value=1, max_value=4))):
        if draw(st.booleans()):
            pages = [(f"http://a.example/{seq}/{i}", draw(BODIES)) for i in range(draw(st.integers(1, 4)))]
            records.append(group(pages))
        else:
            records.append(
                single(f"http://a.example/{seq}", draw(BODIES), seq, draw(st.sampled_from([KIND_BODY, KIND_REF])))
            )
    return records


def header_size_of(record: bytes) -> int:
    return SKIP.size + SKIP.unpack_from(record)[1]


def _check_scan(data: bytes, start: int = 0) -> list[Any]:
    """A scan tiles data[start:] with good records and corrupt/torn regions, and never raises."""
    items = list(scan_records(data, start))
    pos = start
    for item in items:
        assert item.offset == pos and item.length > 0, (item, pos)
        assert item.problem in ("", "corrupt", "torn")
        assert (item.header is None) == bool(item.problem)
        if item.header is not None:
            assert item.length == item.header.record_size
        pos += item.length
    assert pos == len(data)
    assert all(i.problem != "torn" for i in items[:-1])
    return items


# Random bytes behind a valid skippable-frame magic and a plausible (or hostile) payload size,
# so most examples reach the header checks instead of stopping at the magic.
_HEADER_SHAPED = st.builds(
    lambda size, rest: SKIP.pack(0x184D2A5D, size) + rest,
    st.sampled_from([SKIP.size, HEADER.size + CRC.size, GROUP.size + CRC.size + MEMBER.size, 80, 0, 0xFFFFFFFF]),
    st.binary(max_size=200),
)


@settings(ADVERSARIAL, max_examples=300)
@given(st.binary(max_size=300) | _HEADER_SHAPED, st.integers(min_value=0, max_value=310))
def test_arbitrary_bytes_give_a_header_or_a_documented_error(data: bytes, offset: int) -> None:
    try:
        header = decode_record_header(data, offset)
    except BadDataError:  # TornRecord, UnsupportedFormat and ChecksumMismatch are all BadDataError
        return
    assert offset + header.record_size <= len(data)


@settings(ADVERSARIAL, max_examples=300)
@given(segments(), st.data())
def test_a_scan_of_a_mutated_segment_tiles_it_and_good_records_are_ones_written(
    records: list[bytes], data: st.DataObject
) -> None:
    """Checksums catch the damage: a record the scan calls good is one that was written,
    and a group whose frame fails its checksum still has an intact member table."""
    damaged = data.draw(mutated(b"".join(records)))
    written = set(records)
    headers = {r[: header_size_of(r)] for r in records}
    for item in _check_scan(damaged):
        if item.header is None:
            continue
        region = damaged[item.offset : item.offset + item.length]
        if item.frame_ok:
            assert region in written
        else:
            assert isinstance(item.header, GroupHeader) and region[: item.header.header_size] in headers


@settings(ADVERSARIAL, max_examples=200)
@given(segments(), st.data())
def test_a_cut_segment_scans_to_whole_records_then_one_torn_or_corrupt_tail(
    records: list[bytes], data: st.DataObject
) -> None:
    blob = b"".join(records)
    cut = data.draw(truncated(blob))
    items = _check_scan(cut)
    whole = [i for i in items if not i.problem]
    assert [cut[i.offset : i.offset + i.length] for i in whole] == records[: len(whole)]


@settings(ADVERSARIAL, max_examples=100)
@given(segments(), st.data())
def test_scanning_a_memoryview_slice_matches_scanning_the_bytes(records: list[bytes], data: st.DataObject) -> None:
    """``scan_records`` takes bytes or a memoryview: a slice must scan as the bytes it shows."""
    damaged = data.draw(mutated(b"".join(records)))
    junk = data.draw(st.binary(min_size=1, max_size=16))
    as_bytes = [(i.offset, i.length, i.problem) for i in scan_records(damaged)]
    as_view = [(i.offset, i.length, i.problem) for i in scan_records(memoryview(junk + damaged)[len(junk) :])]
    assert as_view == as_bytes


def _reseal_record(buf: bytearray, offset: int) -> None:
    """Recompute the crc32 (and frame checksum) of the record at ``offset`` from what its bytes now say."""
    if offset + SKIP.size > len(buf):
        return
    _, size = SKIP.unpack_from(buf, offset)
    start = offset + SKIP.size
    if start + size > len(buf) or size < CRC.size:
        return
    if size == HEADER.size + CRC.size:
        frame_size = HEADER.unpack_from(buf, start)[7]
        frame = buf[start + size : start + size + frame_size]
        struct.pack_into("<Q", buf, start + HEADER.size - 12, xxhash.xxh3_64_intdigest(bytes(frame)))
    elif size >= GROUP.size + CRC.size:
        frame_size = GROUP.unpack_from(buf, start)[3]
        frame = buf[start + size : start + size + frame_size]
        struct.pack_into("<Q", buf, start + 10, xxhash.xxh3_64_intdigest(bytes(frame)))
    struct.pack_into("<I", buf, start + size - CRC.size, zlib.crc32(buf[start : start + size - CRC.size]))


@settings(ADVERSARIAL, max_examples=300)
@given(segments(), st.data())
def test_resealed_headers_decode_to_sizes_the_data_can_back(records: list[bytes], data: st.DataObject) -> None:
    """Damage behind recomputed checksums: a header still only claims what zstd could expand
    its frame to, so no reader allocates from a length field the data cannot back."""
    index = data.draw(st.integers(min_value=0, max_value=len(records) - 1))
    offset = sum(len(r) for r in records[:index])
    damaged = bytearray(b"".join(records))
    end = offset + len(records[index])
    region = bytearray(data.draw(mutated(bytes(damaged[offset:end]))))
    damaged[offset:end] = region
    _reseal_record(damaged, offset)
    try:
        header = decode_record_header(bytes(damaged), offset)
    except BadDataError:
        return
    assert header.content_size <= header.frame_size * 32768
    _check_scan(bytes(damaged))


# ------------------------------------------------------------------------------ metadata


@settings(ADVERSARIAL, max_examples=200)
@given(st.binary(max_size=200) | st.builds(lambda n: b"[" * n, st.integers(0, 200_000)))
@example(b"[" * 100_000)  # nested past the recursion limit: RecursionError escaped
def test_metadata_lines_decode_to_a_dict_or_raise_checksum_mismatch(data: bytes) -> None:
    with contextlib.suppress(ChecksumMismatch):
        assert isinstance(decode_meta(data), dict)


# ------------------------------------------------------------------------------ logs


def _log_payloads() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=40),
        st.sampled_from([b"1", b"[]", b'"x"', b"null", b"[" * 50_000, b"\xff\xfe", b'{"a":1}', b"{}"]),
    )


@settings(ADVERSARIAL, max_examples=300)
@given(
    st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3), max_size=4),
    st.data(),
)
def test_logs_keep_every_record_before_the_damage_and_never_raise(
    objs: list[dict[str, Any]], data: st.DataObject
) -> None:
    parts = [encode_log_record(o) for o in objs]
    blob = b"".join(parts)
    damaged = data.draw(st.one_of(mutated(blob), truncated(blob), st.binary(max_size=64)))
    records, valid_end, skipped = decode_log_records(damaged)
    assert all(isinstance(r, dict) for r in records)
    assert 0 <= valid_end <= len(damaged) and skipped >= 0
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(blob, damaged, strict=False)) if a != b), min(len(blob), len(damaged))
    )
    intact, end = 0, 0
    for part in parts:
        end += len(part)
        if end > first_diff:
            break
        intact += 1
    assert records[:intact] == objs[:intact]


@settings(ADVERSARIAL, max_examples=200)
@given(st.lists(_log_payloads(), min_size=1, max_size=4))
@example([b"[" * 50_000])  # a valid crc over deep nesting: RecursionError escaped
@example([b"1"])  # a valid crc over a JSON number: returned as a "record", callers index it
def test_log_records_with_a_valid_crc_over_anything_are_objects_or_skipped(payloads: list[bytes]) -> None:
    blob = b"".join(struct.pack("<II", len(p), zlib.crc32(p)) + p for p in payloads)
    records, valid_end, skipped = decode_log_records(blob)
    assert all(isinstance(r, dict) for r in records)
    assert valid_end == len(blob) and len(records) + skipped == len(payloads)


# ------------------------------------------------------------------------------ index snapshots


def _key_of(url: str) -> int:
    """The store's key function: canonicalizes, so it raises InvalidUrl for a non-URL."""
    return url_key(url)


ENTRY_RECORDS = st.builds(
    lambda i, z, f, t, r: {
        "u": f"https://a.example/{i}",
        "k": 1000 + i,
        "q": i,
        "l": ["cold/0000000002.seg", 10 * i, 50, 0, "cold"],
        "h": f"{i:032x}",
        "z": z,
        "f": f,
        "t": t,
        "n": None,
        "s": 200,
        **({"r": ["hot/0000000003.seg", 0, 0]} if r else {}),
    },
    st.integers(0, 1000),
    st.integers(0, 1 << 40),
    st.integers(0, 1 << 50),
    st.none() | st.text(max_size=5),
    st.booleans(),
)


@settings(ADVERSARIAL, max_examples=100)
@given(st.lists(ENTRY_RECORDS, max_size=5, unique_by=lambda r: r["u"]), st.integers(0, 1 << 40))
def test_index_snapshots_round_trip(records: list[dict[str, Any]], gen: int) -> None:
    blob = encode_index_snapshot(gen, records, {"cold/0000000002.seg": 99}, _key_of)
    got_gen, got, ends = decode_index_snapshot(blob, _key_of)
    assert got_gen == gen and ends == {"cold/0000000002.seg": 99}
    assert sorted(got, key=lambda r: r["u"]) == sorted(records, key=lambda r: r["u"])


def _snapshot_decodes_or_raises(blob: bytes) -> None:
    try:
        gen, entries, ends = decode_index_snapshot(blob, _key_of)
    except (ChecksumMismatch, UnsupportedFormat):
        return
    assert isinstance(gen, int) and isinstance(entries, list) and isinstance(ends, dict)


@settings(ADVERSARIAL, max_examples=200)
@given(st.lists(ENTRY_RECORDS, max_size=3, unique_by=lambda r: r["u"]), st.data())
def test_damaged_index_snapshots_raise_checksum_mismatch(records: list[dict[str, Any]], data: st.DataObject) -> None:
    """Damage to the zstd frame, its header's content-size field included, is detected."""
    blob = encode_index_snapshot(1, records, {}, _key_of)
    damaged = data.draw(mutated(blob))
    if damaged != blob:
        with pytest.raises((ChecksumMismatch, UnsupportedFormat)):
            decode_index_snapshot(damaged, _key_of)


def _snap(head: Any, hashes: bytes = b"", meta_len: int | None = None) -> bytes:
    meta = json.dumps(head).encode() if not isinstance(head, bytes) else head
    size = len(meta) if meta_len is None else meta_len
    return zstd.ZstdCompressor(write_checksum=True).compress(SNAP_MAGIC + struct.pack("<I", size) + meta + hashes)


_GOOD_HEAD = {
    "gen": 1,
    "segs": ["cold/0000000002.seg"],
    "ends": {"cold/0000000002.seg": 5},
    "kx": {},
    "r": {},
    "u": ["https://a.example/"],
    "q": [1],
    "ls": [0],
    "lo": [0],
    "ll": [1],
    "ld": [0],
    "lm": [0],
    "z": [1],
    "f": [1],
    "t": [None],
    "n": [None],
    "s": [200],
}
_JSON_VALUES = st.sampled_from(
    [None, True, 0, -1, 1e308, float("inf"), "", "x", [], [0], {}, {"0": 1}, [None], ["a/b"], ["not a url"]]
)


@settings(ADVERSARIAL, max_examples=300)
@given(st.dictionaries(st.sampled_from(sorted(_GOOD_HEAD)), _JSON_VALUES, max_size=3), st.binary(max_size=20))
@example({"gen": float("inf")}, b"\x00" * 16)  # OverflowError escaped
@example({"ends": []}, b"\x00" * 16)  # AttributeError escaped
@example({"segs": [5]}, b"\x00" * 16)  # AttributeError escaped
@example({"u": ["not a url"]}, b"\x00" * 16)  # key_of refuses it: InvalidUrl, a ValueError
def test_snapshot_contents_that_pass_the_zstd_checksum_still_decode_or_raise(
    changes: dict[str, Any], hashes: bytes
) -> None:
    """A well-formed frame around nonsense (a foreign or buggy writer): still only the documented errors."""
    _snapshot_decodes_or_raises(_snap({**_GOOD_HEAD, **changes}, hashes))


@pytest.mark.parametrize(
    "content",
    [
        SNAP_MAGIC,  # no length field: struct.error escaped
        SNAP_MAGIC + b"\x01\x00",
        SNAP_MAGIC + struct.pack("<I", 0xFFFFFFFF) + b"{}",
        SNAP_MAGIC + struct.pack("<I", 100_000) + b"[" * 100_000,  # RecursionError escaped
        SNAP_MAGIC + struct.pack("<I", 2) + b"[]",
        SNAP_MAGIC + struct.pack("<I", 4) + b"\xff\xfe\xfd\xfc",
        b"CSIX2\n",
    ],
)
def test_malformed_snapshot_layouts_raise_only_documented_errors(content: bytes) -> None:
    with pytest.raises((ChecksumMismatch, UnsupportedFormat)):
        decode_index_snapshot(zstd.ZstdCompressor(write_checksum=True).compress(content), _key_of)


def test_a_snapshot_frame_declaring_a_terabyte_is_a_checksum_mismatch() -> None:
    """Regression: the content-size field of the zstd frame header is not checksummed, and
    decompress() allocated what it declared (MemoryError) before any check ran."""
    content = SNAP_MAGIC + struct.pack("<I", 2) + b"{}"
    raw_block = struct.pack("<I", (len(content) << 3) | 1)[:3] + content
    frame = bytes.fromhex("28b52ffd") + bytes([0xE0]) + struct.pack("<Q", 1 << 40) + raw_block
    with pytest.raises(ChecksumMismatch):
        decode_index_snapshot(frame, _key_of)


@settings(ADVERSARIAL, max_examples=200)
@given(st.binary(max_size=100))
def test_arbitrary_bytes_are_not_an_index_snapshot(data: bytes) -> None:
    _snapshot_decodes_or_raises(data)


def test_headers_are_what_they_say_for_every_record_kind() -> None:
    """Sanity of the helpers above: the records they build decode as written."""
    body = single("http://a.example/x", b"hello", 1)
    header = decode_record_header(body)
    assert isinstance(header, RecordHeader) and header.record_size == len(body)
    grp = group([("http://a.example/1", b"a"), ("http://a.example/2", b"b")])
    assert isinstance(decode_record_header(grp), GroupHeader)
