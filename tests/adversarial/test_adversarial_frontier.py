"""The frontier file codec on hostile bytes: decoding stops at damage, never raises or misreads.

tests/frontier/test_records.py covers round trips, cuts and one flipped byte. Here: any
bytes, structured mutations of valid files, and *re-sealed* records whose CRC was
recomputed after the damage (a CRC collision, or a foreign writer), which must still decode
to whole entries or stop, and never to an exception.
"""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from adversarial_support import ADVERSARIAL, mutated
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlstream.errors import ChecksumMismatch
from crawlstream.frontier import (
    HEADER_SIZE,
    MAX_URL_BYTES,
    FrontierEntry,
    decode_header,
    decode_records,
    encode_header,
    encode_record,
)

pytestmark = pytest.mark.timeout(60)

DOMAIN = "example.com"
ENTRIES = st.builds(
    FrontierEntry,
    domain=st.just(DOMAIN),
    url=st.text(max_size=60),
    url_key=st.integers(min_value=0, max_value=(1 << 64) - 1),
    depth=st.integers(min_value=0, max_value=0xFFFF),
    discovered_at_ms=st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    attempt=st.integers(min_value=0, max_value=0xFFFF),
)
_PREFIX = struct.Struct("<II")


def _check_decoded(data: bytes, decoded: list[tuple[FrontierEntry, int]], end: int) -> None:
    """Offsets are increasing, inside the data, and the last one is where decoding stopped."""
    assert 0 <= end <= len(data)
    offsets = [offset for _, offset in decoded]
    assert offsets == sorted(offsets) and (not offsets or offsets[-1] == end)
    for entry, _ in decoded:
        assert entry.domain == DOMAIN and isinstance(entry.url, str)
        assert 0 <= entry.depth <= 0xFFFF and 0 <= entry.attempt <= 0xFFFF


def _reseal(blob: bytes) -> bytes:
    """Recompute the CRC of every record whose length field still frames it."""
    out = bytearray(blob)
    pos = 0
    while pos + _PREFIX.size <= len(out):
        length, _ = _PREFIX.unpack_from(out, pos)
        start = pos + _PREFIX.size
        if start + length > len(out):
            break
        out[pos + 4 : pos + 8] = struct.pack("<I", zlib.crc32(out[start : start + length]))
        pos = start + length
    return bytes(out)


@settings(ADVERSARIAL, max_examples=300)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_to_whole_entries_or_stop(data: bytes) -> None:
    decoded, end = decode_records(data, DOMAIN)
    _check_decoded(data, decoded, end)


@settings(ADVERSARIAL, max_examples=400)
@given(st.lists(ENTRIES, min_size=1, max_size=4), st.data())
def test_mutated_files_decode_an_unchanged_prefix_then_stop(batch: list[FrontierEntry], data: st.DataObject) -> None:
    blob = b"".join(encode_record(e) for e in batch)
    damaged = data.draw(mutated(blob))
    decoded, end = decode_records(damaged, DOMAIN)
    _check_decoded(damaged, decoded, end)
    # Every record before the first damaged byte is read back exactly.
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(blob, damaged, strict=False)) if a != b), min(len(blob), len(damaged))
    )
    intact, pos = 0, 0
    for entry in batch:
        pos += len(encode_record(entry))
        if pos > first_diff:
            break
        intact += 1
    assert [e for e, _ in decoded[:intact]] == batch[:intact]


@settings(ADVERSARIAL, max_examples=400)
@given(st.lists(ENTRIES, min_size=1, max_size=4), st.data())
def test_resealed_damage_decodes_or_stops_without_raising(batch: list[FrontierEntry], data: st.DataObject) -> None:
    blob = b"".join(encode_record(e) for e in batch)
    damaged = _reseal(data.draw(mutated(blob)))
    decoded, end = decode_records(damaged, DOMAIN)
    _check_decoded(damaged, decoded, end)


def test_a_resealed_payload_with_invalid_utf8_stops_decoding() -> None:
    """Regression: the CRC matched, the URL bytes were not UTF-8, UnicodeDecodeError escaped."""
    good = encode_record(FrontierEntry(DOMAIN, "https://example.com/", 1))
    payload = struct.pack("<QqHH", 2, 0, 0, 0) + b"https://example.com/\xff"
    bad = _PREFIX.pack(len(payload), zlib.crc32(payload)) + payload
    decoded, end = decode_records(good + bad + good, DOMAIN)
    assert [e.url_key for e, _ in decoded] == [1] and end == len(good)


def test_a_length_field_past_the_limit_is_never_allocated() -> None:
    blob = _PREFIX.pack(0xFFFFFFFF, 0) + b"\x00" * 64
    assert decode_records(blob, DOMAIN) == ([], 0)
    blob = _PREFIX.pack(MAX_URL_BYTES + 21, 0) + b"\x00" * 64
    assert decode_records(blob, DOMAIN) == ([], 0)


@settings(ADVERSARIAL, max_examples=200)
@given(st.integers(min_value=0, max_value=(1 << 64) - 1), st.data())
def test_file_headers_decode_to_their_generation_or_raise_checksum_mismatch(
    generation: int, data: st.DataObject
) -> None:
    header = encode_header(generation)
    assert decode_header(header) == generation
    damaged = data.draw(st.one_of(mutated(header), st.binary(max_size=HEADER_SIZE + 4)))
    with contextlib.suppress(ChecksumMismatch):
        assert 0 <= decode_header(damaged) < 1 << 64
