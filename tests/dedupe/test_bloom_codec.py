"""The Bloom bit arithmetic: sizing and index derivation, pinned by test vectors."""

from __future__ import annotations

import math

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from crawlstream.dedupe import BloomSize, bloom_digest, bloom_indexes, bloom_size, expected_fpr

# (url_key, url, xxh3_128 of the member, its 10 indexes in a 2^20-bit filter)
VECTORS = [
    (
        0,
        "https://example.com/",
        0x47C64ECE2C91280C1AA09E8222A2B1BB,
        [176571, 252360, 328149, 403938, 479727, 555516, 631305, 707094, 782883, 858672],
    ),
    (
        1234567890123456789,
        "https://example.com/a?b=c",
        0x2EC810ABAB5AAC13C141CE0D48DD750C,
        [881932, 532767, 183602, 883013, 533848, 184683, 884094, 534929, 185764, 885175],
    ),
    (
        (1 << 63) - 1,
        "http://xn--bcher-kva.example/",
        0x82BB64A13CA3E5282719721EBBD0A1D3,
        [41427, 296700, 551973, 807246, 13943, 269216, 524489, 779762, 1035035, 241732],
    ),
]


def test_sizing_for_160m_urls_at_0_1_percent_is_288_mb_not_2_gb() -> None:
    """DESIGN's correction of the seed: 14.4 bits/URL, k = 10."""
    size = bloom_size(160_000_000, 0.001)
    assert size.k == 10
    assert 287_000_000 < size.size_bytes < 288_500_000
    assert size.m_bits / 160_000_000 == pytest.approx(-math.log(0.001) / math.log(2) ** 2, rel=1e-6)


def test_sizing_rounds_bits_up_to_whole_64_bit_words() -> None:
    assert bloom_size(1000, 0.01) == BloomSize(m_bits=9600, k=7)
    assert bloom_size(1, 0.5).m_bits == 64


@pytest.mark.parametrize(("n", "fpr"), [(0, 0.01), (10, 0.0), (10, 1.0)])
def test_sizing_rejects_impossible_parameters(n: int, fpr: float) -> None:
    with pytest.raises(ValueError):
        bloom_size(n, fpr)


def test_expected_fpr_at_the_sized_count_is_the_target() -> None:
    size = bloom_size(100_000, 0.001)
    assert expected_fpr(size, 100_000) == pytest.approx(0.001, rel=0.05)


@pytest.mark.parametrize(("url_key", "url", "digest", "indexes"), VECTORS)
def test_digest_is_xxh3_128_of_big_endian_key_then_utf8_url(
    url_key: int, url: str, digest: int, indexes: list[int]
) -> None:
    assert bloom_digest(url_key, url) == digest
    assert xxhash.xxh3_128_intdigest(url_key.to_bytes(8, "big") + url.encode()) == digest


@pytest.mark.parametrize(("url_key", "url", "digest", "indexes"), VECTORS)
def test_indexes_follow_double_hashing_with_odd_h2(url_key: int, url: str, digest: int, indexes: list[int]) -> None:
    size = BloomSize(1 << 20, 10)
    assert bloom_indexes(url_key, url, size) == indexes
    h1, h2 = digest & ((1 << 64) - 1), (digest >> 64) | 1
    assert indexes == [(h1 + i * h2) % size.m_bits for i in range(10)]


def test_colliding_url_keys_with_different_urls_get_different_bits() -> None:
    size = BloomSize(1 << 20, 10)
    assert bloom_indexes(42, "https://a.example/x", size) != bloom_indexes(42, "https://a.example/y", size)


@given(st.integers(min_value=0, max_value=(1 << 63) - 1), st.text(max_size=200))
def test_any_str_member_hashes_to_k_indexes_in_range(url_key: int, url: str) -> None:
    size = BloomSize(9600, 7)
    indexes = bloom_indexes(url_key, url, size)
    assert len(indexes) == 7
    assert all(0 <= i < 9600 for i in indexes)
