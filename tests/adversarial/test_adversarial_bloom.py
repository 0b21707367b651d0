"""The Bloom snapshot codec on hostile bytes: ChecksumMismatch, or a filter that works.

A snapshot that decodes is loaded as the partition's filter and its offset decides where
replay starts, so "decodes" must mean "is what was written": any damage to the header or
the bits is detected, and even a file whose checksum was recomputed over nonsense (a
foreign writer) never yields a filter that divides by zero or loops for ever.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from adversarial_support import ADVERSARIAL, mutated, truncated
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlstream.dedupe import BloomFilter, BloomSize, decode_snapshot, encode_snapshot
from crawlstream.errors import ChecksumMismatch

pytestmark = pytest.mark.timeout(60)

_HEADER = struct.Struct("<8sIIQQqI")
MEMBERS = [(0, "https://example.com/"), (1 << 62, "http://a.example/x?y"), (7, "\ud800")]


@st.composite
def filters(draw: st.DrawFn) -> tuple[BloomFilter, int | None]:
    m_bits = 64 * draw(st.integers(min_value=1, max_value=16))
    bits = bytearray(draw(st.binary(min_size=m_bits // 8, max_size=m_bits // 8)))
    size = BloomSize(m_bits=m_bits, k=draw(st.integers(min_value=1, max_value=20)))
    count = draw(st.integers(min_value=0, max_value=m_bits))
    offset = draw(st.none() | st.integers(min_value=0, max_value=(1 << 63) - 1))
    return BloomFilter(size, bits, count), offset


def _reseal(blob: bytes) -> bytes:
    """Recompute a version-2 crc32 over whatever the header and bits now say."""
    if len(blob) < _HEADER.size:
        return blob
    crc = zlib.crc32(blob[_HEADER.size :], zlib.crc32(blob[: _HEADER.size - 4]))
    return blob[: _HEADER.size - 4] + struct.pack("<I", crc) + blob[_HEADER.size :]


def _decodes_to_a_usable_filter_or_raises(data: bytes) -> None:
    try:
        snap = decode_snapshot(data)
    except ChecksumMismatch:
        return
    bloom = snap.filter
    assert bloom.size.m_bits >= 64 and bloom.size.m_bits % 64 == 0 and len(bloom.bits) == bloom.size.size_bytes
    assert snap.offset is None or snap.offset >= 0
    bloom.check_and_add(MEMBERS)
    assert all(bloom.contains(key, url) for key, url in MEMBERS)  # never a false negative


@settings(ADVERSARIAL, max_examples=200)
@given(filters())
def test_snapshots_round_trip_bits_geometry_count_and_offset(case: tuple[BloomFilter, int | None]) -> None:
    bloom, offset = case
    snap = decode_snapshot(encode_snapshot(bloom, offset))
    assert (snap.filter.size, snap.filter.bits, snap.filter.count, snap.offset) == (
        bloom.size,
        bloom.bits,
        bloom.count,
        offset,
    )


@settings(ADVERSARIAL, max_examples=400)
@given(filters(), st.data())
def test_any_damage_to_a_snapshot_is_a_checksum_mismatch(
    case: tuple[BloomFilter, int | None], data: st.DataObject
) -> None:
    """Header fields included: a flipped offset bit would skip (or repeat) part of the replay."""
    blob = encode_snapshot(*case)
    damaged = data.draw(st.one_of(mutated(blob), truncated(blob)))
    if damaged == blob:
        return
    with pytest.raises(ChecksumMismatch):
        decode_snapshot(damaged)


@settings(ADVERSARIAL, max_examples=300)
@given(filters(), st.data())
def test_resealed_nonsense_decodes_to_a_usable_filter_or_raises(
    case: tuple[BloomFilter, int | None], data: st.DataObject
) -> None:
    _decodes_to_a_usable_filter_or_raises(_reseal(data.draw(mutated(encode_snapshot(*case)))))


@settings(ADVERSARIAL, max_examples=200)
@given(st.binary(max_size=120))
def test_arbitrary_bytes_decode_to_a_usable_filter_or_raise(data: bytes) -> None:
    _decodes_to_a_usable_filter_or_raises(data)


def _crafted(k: int, m_bits: int, offset: int = -1) -> bytes:
    head = _HEADER.pack(b"CSBLOOM\x00", 2, k, m_bits, 0, offset, 0)
    return _reseal(head + bytes(m_bits // 8))


def test_a_snapshot_of_zero_bits_is_rejected() -> None:
    """Regression: it decoded, and the first lookup raised ZeroDivisionError."""
    with pytest.raises(ChecksumMismatch, match="cannot be used"):
        decode_snapshot(_crafted(k=3, m_bits=0))


def test_a_snapshot_with_billions_of_hash_functions_is_rejected() -> None:
    """Regression: k=2**31 decoded, and every lookup then looped 2**31 times."""
    with pytest.raises(ChecksumMismatch, match="cannot be used"):
        decode_snapshot(_crafted(k=1 << 31, m_bits=64))


def test_a_flipped_offset_bit_is_detected() -> None:
    """Regression: version 1's crc32 covered only the bits, so this decoded to offset 2**40 + 5."""
    blob = bytearray(encode_snapshot(BloomFilter(BloomSize(64, 3)), 5))
    blob[_HEADER.size - 4 - 8 + 5] ^= 0x01  # bit 40 of the little-endian offset field
    with pytest.raises(ChecksumMismatch):
        decode_snapshot(bytes(blob))


def test_version_one_snapshots_still_decode() -> None:
    """Files written before the header was checksummed stay readable (no forced full replay)."""
    bits = bytes(range(8))
    blob = _HEADER.pack(b"CSBLOOM\x00", 1, 3, 64, 4, 99, zlib.crc32(bits)) + bits
    snap = decode_snapshot(blob)
    assert (snap.filter.size, bytes(snap.filter.bits), snap.filter.count, snap.offset) == (
        BloomSize(64, 3),
        bits,
        4,
        99,
    )
