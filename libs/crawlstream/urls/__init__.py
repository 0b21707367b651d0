"""The identity of a URL: canonical form, registered domain, url_key, partition, lake prefix.

Pure codecs (no I/O): external systems reproduce them from schemas/URL_KEYS.md and the
vectors in schemas/test-vectors/url_keys.json.
"""

from ._canonical import MAX_HOST_LENGTH, MAX_URL_LENGTH, CanonicalUrl, canonicalize
from ._column import CanonicalColumn, canonicalize_column
from ._domains import registered_domain, registered_domain_or_host
from ._hashing import (
    KEY_HASH_MASK,
    domain_checksum,
    domain_prefix,
    domain_prefix_number,
    fnv1a_64,
    fnv1a_64_pure,
    key_checksum,
    partition_for,
)
from ._keys import canonical_url_key, compose_key, url_key, url_keys

__all__ = [
    "KEY_HASH_MASK",
    "MAX_HOST_LENGTH",
    "MAX_URL_LENGTH",
    "CanonicalColumn",
    "CanonicalUrl",
    "canonical_url_key",
    "canonicalize",
    "canonicalize_column",
    "compose_key",
    "domain_checksum",
    "domain_prefix",
    "domain_prefix_number",
    "fnv1a_64",
    "fnv1a_64_pure",
    "key_checksum",
    "partition_for",
    "registered_domain",
    "registered_domain_or_host",
    "url_key",
    "url_keys",
]
