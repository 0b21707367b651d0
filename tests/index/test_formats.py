"""Pure codecs of an index version: DTDR layout, postings payloads with CRC, files registry."""

from __future__ import annotations

import struct

import pytest
from pyroaring import BitMap

from crawlstream.errors import ChecksumMismatch
from crawlstream.index import FileEntry, Segment, decode_payload, encode_payload
from crawlstream.index._formats import (
    decode_files,
    decode_varints,
    dtdr_entry,
    encode_dtdr,
    encode_files,
    encode_varints,
)


def test_dtdr_file_has_the_seed_layout() -> None:
    bitmaps = [BitMap([1, 5]).serialize(), BitMap([2]).serialize(), BitMap(range(100)).serialize()]
    data = encode_dtdr(bitmaps)
    magic, ver, n, index_offset = struct.unpack_from("<4sIQQ", data, 0)
    assert (magic, ver, n) == (b"DTDR", 1, 3)
    assert index_offset == len(data) - 3 * 12  # N x {bitmap_start:u64, bitmap_len:u32} at the end
    for i, bm in enumerate(bitmaps):
        start, length = struct.unpack_from("<QI", data, index_offset + 12 * i)
        assert data[start : start + length] == bm
        assert dtdr_entry(data, i) == (start, length)
    assert BitMap.deserialize(data[slice(*_span(data, 2))]) == BitMap(range(100))


def _span(data: bytes, i: int) -> tuple[int, int]:
    start, length = dtdr_entry(data, i)
    return start, start + length


def test_payload_round_trips_and_a_flipped_bit_is_detected() -> None:
    segs = [Segment(0, 0, 5, 10), Segment(3, 2, 0, 70000)]
    data = encode_payload(segs, fragmented=True)
    assert decode_payload(data) == (True, segs)
    broken = bytearray(data)
    broken[-1] ^= 1
    with pytest.raises(ChecksumMismatch):
        decode_payload(bytes(broken))


def test_varints_round_trip_large_values() -> None:
    values = [0, 1, 127, 128, 2**32, 2**63 - 1]
    assert decode_varints(encode_varints(values)) == values


def test_files_registry_round_trips() -> None:
    entries = [FileEntry(0, 3, "af", "urls/dataset_id=3/domain_prefix=af/part-1.parquet", 123, (10, 5))]
    assert decode_files(encode_files(entries)) == entries
    assert entries[0].num_rows == 15
