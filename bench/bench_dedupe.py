"""The deduper's ``check_and_add``: fixed filter (before ADR 023) vs scalable filter, one core.

Members: canonical real URLs (../shared/data/urls, ~250k, via ``bench_seed.real_urls``) with
their url_keys, then generated ones up to 10x the expected count. Partition filters are sized
for ``expected`` = 100,000 URLs (20,000 quick) at 0.1%. Measured in one run, interleaved, best of 5 each:

* ``fixed``: ``BloomFilter`` sized as before (14.38 bits/URL), within its expected count;
* ``scalable_1_slice``: ``ScalableBloomFilter``, same count (one slice at 0.05%, 15.82 bits/URL);
* ``scalable_4_slices``: the batch after 7x the expected count was inserted (4 slices: every
  lookup of a new URL tests 3 older slices first);
* observed false-positive rate on 200,000 disjoint probes after 10x the expected count, for the
  fixed filter (what happened before) and the scalable one.

Batches are of 500 members, which take the numpy path (``VECTOR_MIN_ITEMS``); ``*_batches_of_100``
measure the per-member loop that shorter batches take.

``python -m bench dedupe [--quick]``
"""

from __future__ import annotations

import random
import time
from typing import Any

from bench._harness import main
from bench.bench_seed import real_urls
from crawlstream.dedupe import BloomFilter, ScalableBloomFilter, bloom_size
from crawlstream.errors import InvalidUrl
from crawlstream.urls import canonicalize, url_key

FPR = 0.001
BATCH = 500
LOOP_BATCH = 100  # below VECTOR_MIN_ITEMS: the per-member loop


def _members(n: int) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    seen: set[str] = set()
    for raw in real_urls():
        try:
            canon = canonicalize(raw)
        except InvalidUrl:
            continue
        if canon.url not in seen:
            seen.add(canon.url)
            out.append((url_key(canon), canon.url))
        if len(out) >= n:
            return out
    rnd = random.Random(5)
    while len(out) < n:
        out.append((rnd.getrandbits(63), f"https://gen{len(out) % 997}.example/p/{len(out)}?r={rnd.random()}"))
    return out


def _once(make: Any, prefill: list[tuple[int, str]], batch: list[tuple[int, str]], batch_size: int) -> float:
    """Seconds of ``check_and_add`` over ``batch`` (in batches of ``batch_size``) after ``prefill``."""
    bloom = make()
    for start in range(0, len(prefill), 10_000):
        bloom.check_and_add(prefill[start : start + 10_000])
    started = time.perf_counter()
    for start in range(0, len(batch), batch_size):
        bloom.check_and_add(batch[start : start + batch_size])
    return time.perf_counter() - started


Members = list[tuple[int, str]]


def _rates(variants: dict[str, tuple[Any, Members, Members, int]], rounds: int) -> dict[str, float]:
    """Members/s of each variant, best of ``rounds``, the variants interleaved within each round
    (the machine's load changes by the second: a variant measured after another is not comparable)."""
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, (make, prefill, batch, batch_size) in variants.items():
            best[name] = min(best[name], _once(make, prefill, batch, batch_size))
    return {name: len(variants[name][2]) / seconds for name, seconds in best.items()}


def run(quick: bool) -> dict[str, Any]:
    expected = 20_000 if quick else 100_000
    members = _members(10 * expected)
    probes = [(k ^ 0x5A5A5A5A, u + "#probe") for k, u in members[: min(200_000, len(members))]]
    probes = [(k, u.replace("#probe", "/probe")) for k, u in probes]
    within = members[: expected * 9 // 10]
    size = bloom_size(expected, FPR)
    late = members[7 * expected : 8 * expected]
    rates = _rates(
        {
            "fixed": (lambda: BloomFilter(size), [], within, BATCH),
            "one": (lambda: ScalableBloomFilter.new(expected, FPR), [], within, BATCH),
            "four": (lambda: ScalableBloomFilter.new(expected, FPR), members[: 7 * expected], late, BATCH),
            "fixed_loop": (lambda: BloomFilter(size), [], within, LOOP_BATCH),
            "four_loop": (lambda: ScalableBloomFilter.new(expected, FPR), members[: 7 * expected], late, LOOP_BATCH),
        },
        rounds=3 if quick else 5,
    )
    fixed_rate, one_rate, four_rate = rates["fixed"], rates["one"], rates["four"]

    fixed, scalable = BloomFilter(size), ScalableBloomFilter.new(expected, FPR)
    fixed.check_and_add(members)
    scalable.check_and_add(members)
    fixed_fp = sum(fixed.contains(k, u) for k, u in probes)
    scalable_fp = sum(scalable.contains(k, u) for k, u in probes)
    return {
        "expected_per_partition": expected,
        "configured_fpr": FPR,
        "members_inserted": len(members),
        "check_and_add_urls_per_s": {
            "fixed_within_expected": round(fixed_rate),
            "scalable_1_slice_within_expected": round(one_rate),
            "scalable_4_slices_after_7x": round(four_rate),
            "fixed_within_expected_batches_of_100": round(rates["fixed_loop"]),
            "scalable_4_slices_after_7x_batches_of_100": round(rates["four_loop"]),
        },
        "scalable_1_slice_vs_fixed": round(one_rate / fixed_rate, 3),
        "scalable_4_slices_vs_fixed": round(four_rate / fixed_rate, 3),
        "after_10x_expected": {
            "probes": len(probes),
            "fixed_observed_fpr": round(fixed_fp / len(probes), 5),
            "scalable_observed_fpr": round(scalable_fp / len(probes), 5),
            "scalable_slices": len(scalable.slices),
            "scalable_bits_per_url": round(scalable.size_bytes * 8 / scalable.count, 2),
            "fixed_bits_per_url": round(size.m_bits / len(members), 2),
        },
        "note": "2 shared cores under other engineers' load: compare the ratios",
    }


if __name__ == "__main__":
    main(run)
