"""URL dedupe: per-partition Bloom filters (bits in the owning instance, snapshot + replay).

See ``Deduper`` for the service's contract and docs/decisions/005-bloom-placement.md for
why the bits live in process memory rather than Redis.
"""

from crawlstream.dedupe._bloom import BloomSize, bloom_digest, bloom_indexes, bloom_size, expected_fpr
from crawlstream.dedupe._deduper import Deduper
from crawlstream.dedupe._filter import BloomFilter, ScalableBloomFilter, Snapshot, decode_snapshot, encode_snapshot

__all__ = [
    "BloomFilter",
    "BloomSize",
    "Deduper",
    "ScalableBloomFilter",
    "Snapshot",
    "bloom_digest",
    "bloom_indexes",
    "bloom_size",
    "decode_snapshot",
    "encode_snapshot",
    "expected_fpr",
]
