"""``BloomFilter.check_and_add`` on a batch of ``VECTOR_MIN_ITEMS`` or more members takes the numpy
path (ADR 017): it must answer and set bits exactly as the per-member loop does, including
members repeated inside the batch and distinct members sharing bit positions."""

from __future__ import annotations

import random

import pytest

from crawlstream.dedupe import BloomFilter, ScalableBloomFilter, bloom_size
from crawlstream.dedupe._filter import VECTOR_MIN_ITEMS


def _one_by_one(bloom: BloomFilter, items: list[tuple[int, str]]) -> list[bool]:
    """The reference: the per-member loop (batches of one never take the array path)."""
    return [answer for item in items for answer in bloom.check_and_add([item])]


@pytest.mark.parametrize("expected_n, fpr", [(40, 0.2), (2_000, 0.01), (200_000, 0.001)])
def test_batches_answer_and_set_bits_as_the_loop_does(expected_n: int, fpr: float) -> None:
    rnd = random.Random(expected_n)
    size = bloom_size(expected_n, fpr)
    batched, looped = BloomFilter(size), BloomFilter(size)
    pool = [(rnd.getrandbits(63), f"http://h{rnd.randrange(50)}.example/{i}\ud800é") for i in range(4_000)]
    pool.append((2**64 - 1, "http://max.example/"))  # a key past int63 hashes as its low 64 bits
    for n in (VECTOR_MIN_ITEMS, 1_000, 5_000, 5_000):
        items = [rnd.choice(pool) for _ in range(n)]  # repeats inside and across batches
        assert batched.check_and_add(items) == _one_by_one(looped, items)
        assert batched.bits == looped.bits and batched.count == looped.count
    assert 0 < batched.count < len(pool)


def test_a_saturated_small_filter_still_agrees() -> None:
    """64 bits and thousands of members: almost every position is shared inside a batch."""
    rnd = random.Random(3)
    size = bloom_size(4, 0.3)
    batched, looped = BloomFilter(size), BloomFilter(size)
    items = [(rnd.getrandbits(63), f"u{i}") for i in range(2_000)]
    assert batched.check_and_add(items) == _one_by_one(looped, items)
    assert batched.bits == looped.bits and batched.count == looped.count


def test_the_scalable_filter_answers_the_same_with_either_path() -> None:
    rnd = random.Random(9)
    items = [(rnd.getrandbits(63), f"http://s.example/{rnd.randrange(30_000)}") for _ in range(40_000)]
    batched, looped = ScalableBloomFilter.new(10_000, 0.01), ScalableBloomFilter.new(10_000, 0.01)
    answers = [a for i in range(0, len(items), 5_000) for a in batched.check_and_add(items[i : i + 5_000])]
    reference = [a for i in range(0, len(items), 100) for a in looped.check_and_add(items[i : i + 100])]
    assert answers == reference and batched.bits == looped.bits and len(batched.slices) > 1
