"""Pure codecs of an index version: DTDR layout, postings blocks with CRC, files registry."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from pyroaring import BitMap

from crawlstream.errors import ChecksumMismatch
from crawlstream.index import FileEntry, Runs, decode_block, encode_block
from crawlstream.index._formats import (
    decode_files,
    dtdr_entry,
    encode_dtdr,
    encode_dtdr_pairs,
    encode_files,
    encode_postings,
    postings_block,
    run_row_starts,
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


def test_dtdr_built_from_pairs_holds_pyroarings_bitmaps() -> None:
    sets = [[1, 5], [2], [1, 7, 300, 65535], list(range(1, 38)), [3, 70000]]
    pair_domain = np.array([d for d, members in enumerate(sets) for _ in members])
    pair_dataset = np.array([ds for members in sets for ds in members])
    data = encode_dtdr_pairs(pair_domain, pair_dataset, len(sets))
    for d, members in enumerate(sets):
        bm = BitMap.deserialize(data[slice(*_span(data, d))])
        assert list(bm) == members
        size = len(data[slice(*_span(data, d))])
        assert size == (9 + 2 * len(members) if len(members) <= 8 and max(members) < 65536
                        else len(BitMap(members).serialize()))


def test_dtdr_stores_each_distinct_set_once() -> None:
    """Domains with the same datasets share one bitmap; each entry still reads its own set."""
    sets = [[1], [2, 5], [1], list(range(1, 38)), [2, 5], list(range(1, 38)), [1]]
    pair_domain = np.array([d for d, members in enumerate(sets) for _ in members])
    pair_dataset = np.array([ds for members in sets for ds in members])
    data = encode_dtdr_pairs(pair_domain, pair_dataset, len(sets))
    assert [list(BitMap.deserialize(data[slice(*_span(data, d))])) for d in range(len(sets))] == sets
    assert len({dtdr_entry(data, d) for d in range(len(sets))}) == 3
    bitmaps = 9 + 2 + 9 + 4 + len(BitMap(range(1, 38)).serialize())
    assert len(data) == 24 + bitmaps + 12 * len(sets)
    assert encode_dtdr_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), 0) == encode_dtdr([])
    shared = encode_dtdr([BitMap(s).serialize() for s in sets])
    assert len({dtdr_entry(shared, d) for d in range(len(sets))}) == 3


def _runs(n: int) -> Runs:
    rnd = np.random.default_rng(1)
    did = np.sort(rnd.integers(0, 10 * n, n))
    return Runs(did, rnd.integers(1, 40, n), rnd.integers(0, 5000, n), rnd.integers(1, 2**31, n),
                np.array([0, n - 1]), np.array([3, 2**32 - 1]))


def test_postings_block_round_trips_and_a_flipped_bit_is_detected() -> None:
    runs = _runs(1000)
    data = encode_block(runs, level=3)
    got = decode_block(postings_block(encode_postings([encode_block(_runs(3), level=1), data]), 1))
    for name in ("domain_id", "dataset_id", "file_id", "rows", "multi_first", "multi_count"):
        assert getattr(got, name).tolist() == getattr(runs, name).tolist()
    broken = bytearray(data)
    broken[-1] ^= 1
    with pytest.raises(ChecksumMismatch):
        decode_block(bytes(broken))


def test_run_row_starts_follow_the_domain_order_inside_each_file() -> None:
    """File 5 holds domains 1, 3, 4 (10, 2 and 7 rows); file 6 holds domain 2."""
    starts = run_row_starts(np.array([1, 2, 3, 4]), np.array([5, 6, 5, 5]), np.array([10, 3, 2, 7]))
    assert starts.tolist() == [0, 0, 10, 12]


def test_files_registry_round_trips() -> None:
    entries = [FileEntry(0, 3, "af", "urls/dataset_id=3/domain_prefix=af/part-1.parquet", 123, (10, 5))]
    assert decode_files(encode_files(entries)) == entries
    assert entries[0].num_rows == 15
