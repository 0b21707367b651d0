"""Bloom filter bit arithmetic: sizing and bit-index derivation. Pure: no I/O, no clock.

External systems that want to probe or rebuild a snapshot must reproduce these functions
exactly, so they are fixed and test-vectored (tests/dedupe/test_bloom_codec.py):

* sizing: ``m = ceil(-n ln p / (ln 2)^2)`` rounded up to a multiple of 64 bits,
  ``k = max(1, round(m / n * ln 2))`` — the textbook optimum (~14.38 bits and k = 10 at 0.1%).
* hashing: ``h = xxh3_128(url_key as 8 bytes big-endian || UTF-8 of url)``; ``h1`` = low 64
  bits, ``h2`` = high 64 bits forced odd; index ``i`` is ``(h1 + i * h2) mod m``
  (Kirsch–Mitzenmacher double hashing). Hashing the key *and* the URL makes two URLs with a
  colliding 56-bit key distinct members.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import xxhash

__all__ = ["BloomSize", "bloom_digest", "bloom_digests", "bloom_indexes", "bloom_size", "expected_fpr"]

_MASK64 = (1 << 64) - 1
_xxh3_128 = xxhash.xxh3_128_intdigest
T = TypeVar("T")


@dataclass(frozen=True)
class BloomSize:
    """A filter's geometry: ``m_bits`` (a multiple of 64) and ``k`` hash functions."""

    m_bits: int
    k: int

    @property
    def size_bytes(self) -> int:
        return self.m_bits // 8


def bloom_size(expected_n: int, fpr: float) -> BloomSize:
    """The optimal geometry for ``expected_n`` members at false-positive rate ``fpr``."""
    if expected_n <= 0:
        raise ValueError(f"expected_n must be > 0, got {expected_n}")
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must be in (0, 1), got {fpr}")
    m = math.ceil(-expected_n * math.log(fpr) / (math.log(2) ** 2))
    m = max(64, (m + 63) // 64 * 64)
    k = max(1, round(m / expected_n * math.log(2)))
    return BloomSize(m_bits=m, k=k)


def expected_fpr(size: BloomSize, n: int) -> float:
    """The theoretical false-positive rate after ``n`` distinct insertions."""
    return (1.0 - math.exp(-size.k * n / size.m_bits)) ** size.k


def bloom_digest(url_key: int, url: str) -> int:
    """The 128-bit xxh3 of the member ``(url_key, url)``; any ``str`` (even lone surrogates) hashes."""
    return bloom_digests([(url_key, url)], _xxh3_128)[0]


def bloom_digests(items: Sequence[tuple[int, str]], digest: Callable[[bytes], T]) -> list[T]:
    """``digest`` of each member's bytes: ``xxhash.xxh3_128_intdigest`` gives ``bloom_digest``,
    ``xxhash.xxh3_128_digest`` the same 128 bits as 16 big-endian bytes.

    The one place a member's bytes are spelled: a batch at a time (the filters' loops hash a
    whole batch here, one call, rather than one call per member).
    """
    return [digest((key & _MASK64).to_bytes(8, "big") + url.encode("utf-8", "surrogatepass")) for key, url in items]


def bloom_indexes(url_key: int, url: str, size: BloomSize) -> list[int]:
    """The ``k`` bit positions of ``(url_key, url)`` in a filter of ``size``."""
    h = bloom_digest(url_key, url)
    h1 = h & _MASK64
    h2 = (h >> 64) | 1
    m = size.m_bits
    return [(h1 + i * h2) % m for i in range(size.k)]
