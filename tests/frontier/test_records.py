"""The frontier record codec: any URL round-trips, a torn tail is never misread."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import (
    HEADER_SIZE,
    FrontierEntry,
    decode_header,
    decode_records,
    encode_header,
    encode_record,
)

entries = st.builds(
    FrontierEntry,
    domain=st.just("example.com"),
    url=st.text(max_size=300),
    url_key=st.integers(min_value=0, max_value=(1 << 64) - 1),
    depth=st.integers(min_value=0, max_value=0xFFFF),
    discovered_at_ms=st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    attempt=st.integers(min_value=0, max_value=0xFFFF),
)


@given(entries)
def test_any_str_url_and_its_metadata_round_trip(entry: FrontierEntry) -> None:
    """Separators, newlines, NULs and lone surrogates included."""
    data = encode_record(entry)
    decoded, end = decode_records(data, "example.com")
    assert decoded == [(entry, len(data))]
    assert end == len(data)


@given(st.lists(entries, min_size=1, max_size=5), st.data())
def test_a_cut_anywhere_yields_only_whole_records_before_it(batch: list[FrontierEntry], data: st.DataObject) -> None:
    blob = b"".join(encode_record(e) for e in batch)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob)))
    decoded, end = decode_records(blob[:cut], "example.com")
    assert [e for e, _ in decoded] == batch[: len(decoded)]
    assert end <= cut
    assert end == (decoded[-1][1] if decoded else 0)


def test_hostile_urls_with_separators_and_newlines_round_trip() -> None:
    nasty = ["https://a.example/x|1|2\n3", "https://a.example/\r\n\t\x00", "https://a.example/\ud800"]
    blob = b"".join(encode_record(FrontierEntry("a.example", u, 1)) for u in nasty)
    assert [e.url for e, _ in decode_records(blob, "a.example")[0]] == nasty


def test_a_flipped_byte_stops_decoding_at_that_record() -> None:
    records = [encode_record(FrontierEntry("a.example", f"https://a.example/{i}", i)) for i in range(3)]
    blob = bytearray(b"".join(records))
    blob[len(records[0]) + 12] ^= 0x01  # inside the second record's payload
    decoded, end = decode_records(bytes(blob), "a.example")
    assert [e.url_key for e, _ in decoded] == [0]
    assert end == len(records[0])


def test_offsets_are_reported_from_the_base_offset() -> None:
    blob = encode_record(FrontierEntry("a.example", "https://a.example/", 5))
    decoded, end = decode_records(blob, "a.example", base_offset=HEADER_SIZE)
    assert decoded[0][1] == end == HEADER_SIZE + len(blob)


def test_decode_honours_the_record_limit() -> None:
    blob = b"".join(encode_record(FrontierEntry("a.example", f"https://a.example/{i}", i)) for i in range(5))
    decoded, end = decode_records(blob, "a.example", limit=2)
    assert [e.url_key for e, _ in decoded] == [0, 1]
    assert end == decoded[-1][1]


def test_header_carries_the_generation() -> None:
    assert len(encode_header(7)) == HEADER_SIZE
    assert decode_header(encode_header(7)) == 7


@pytest.mark.parametrize("data", [b"", b"CSFRONT", b"NOTFRONT" + bytes(12)])
def test_a_foreign_or_torn_header_is_rejected(data: bytes) -> None:
    with pytest.raises(ChecksumMismatch):
        decode_header(data)
