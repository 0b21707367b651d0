"""url_key, FNV-1a 64, domain checksum, partition and domain prefix."""

from __future__ import annotations

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from crawlstream.urls import (
    canonicalize,
    compose_key,
    domain_checksum,
    domain_prefix,
    fnv1a_64,
    fnv1a_64_pure,
    key_checksum,
    partition_for,
    url_key,
    url_keys,
)

# Reference values from the FNV authors' test suite (isthe.com/chongo/tech/comp/fnv).
FNV1A_64_VECTORS = [
    (b"", 0xCBF29CE484222325),
    (b"a", 0xAF63DC4C8601EC8C),
    (b"foobar", 0x85944171F73967E8),
]


@pytest.mark.parametrize(("data", "expected"), FNV1A_64_VECTORS)
def test_fnv1a_64_matches_reference_values(data: bytes, expected: int) -> None:
    assert fnv1a_64(data) == expected
    assert fnv1a_64_pure(data) == expected


@given(st.binary(max_size=512))
def test_fast_fnv1a_64_is_bit_identical_to_the_pure_one(data: bytes) -> None:
    assert fnv1a_64(data) == fnv1a_64_pure(data)


def test_url_key_layout_follows_the_seed() -> None:
    canon = canonicalize("https://www.example.com/a?b=1")
    key = url_key(canon)
    assert key >> 63 == 0
    assert key_checksum(key) == domain_checksum("example.com")
    assert key & ((1 << 56) - 1) == fnv1a_64(b"https://www.example.com/a?b=1") & ((1 << 56) - 1)
    assert key == compose_key(domain_checksum("example.com"), fnv1a_64(canon.url.encode()))
    assert url_key("HTTPS://WWW.example.com:443/a?b=1#x") == key


def test_domain_checksum_is_the_low_7_bits_of_xxh3() -> None:
    for domain in ["example.com", "bbc.co.uk", "xn--bcher-kva.de", "127.0.0.1"]:
        assert domain_checksum(domain) == xxhash.xxh3_64_intdigest(domain.encode()) & 0x7F


def test_domain_prefix_is_the_first_two_hex_digits_of_xxh3() -> None:
    assert domain_prefix("example.com") == format(xxhash.xxh3_64_intdigest(b"example.com"), "016x")[:2]
    assert len(domain_prefix("a.b")) == 2


@pytest.mark.parametrize("partitions", [1, 2, 4, 8, 16, 32, 64, 128])
def test_partition_is_checksum_mod_p(partitions: int) -> None:
    assert partition_for("example.com", partitions) == domain_checksum("example.com") % partitions


@pytest.mark.parametrize("partitions", [0, -4, 3, 6, 100, 256])
def test_partition_count_must_divide_128(partitions: int) -> None:
    with pytest.raises(ValueError, match="divisor of 128"):
        partition_for("example.com", partitions)


def test_url_keys_batch_marks_invalid_urls_with_none() -> None:
    keys = url_keys(["http://example.com/", "ftp://example.com/", canonicalize("http://a.org/")])
    assert keys[0] == url_key("http://example.com/")
    assert keys[1] is None
    assert keys[2] == url_key("http://a.org/")
