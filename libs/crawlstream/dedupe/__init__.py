"""URL dedupe: per-partition Bloom filters (bits in the owning instance, snapshot + replay).

See ``Deduper`` for the service's contract and docs/decisions/005-bloom-placement.md for
why the bits live in process memory rather than Redis; ``raw_form_record`` for the row a
URL forwarded for the first time adds to the alias map (docs/decisions/024-url-provenance.md).
"""

from crawlstream.dedupe._bloom import BloomSize, bloom_digest, bloom_indexes, bloom_size, expected_fpr
from crawlstream.dedupe._deduper import Deduper
from crawlstream.dedupe._filter import BloomFilter, ScalableBloomFilter, Snapshot, decode_snapshot, encode_snapshot
from crawlstream.dedupe._provenance import RECORDED_AT_INTAKE, raw_form_record

__all__ = [
    "RECORDED_AT_INTAKE",
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
    "raw_form_record",
]
