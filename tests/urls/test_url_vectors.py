"""The published vectors (schemas/test-vectors/url_keys.json) match the code, field by field."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import xxhash

from crawlstream.urls import canonicalize, fnv1a_64_pure

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
VECTORS = SCHEMAS / "test-vectors" / "url_keys.json"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_url_keys", VECTORS.with_name("generate_url_keys.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_vectors_equal_the_generator_output() -> None:
    assert VECTORS.read_text(encoding="utf-8") == _generator().render()


def test_vectors_recompute_from_their_definitions() -> None:
    """Recomputed from the documented formulas (pure FNV, raw xxh3), not through url_key itself."""
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert len(vectors) >= 60
    for vector in vectors:
        canon = canonicalize(vector["raw"], vector["base"])
        assert canon.url == vector["canonical"]
        assert canon.domain == vector["registered_domain"]
        digest = xxhash.xxh3_64_intdigest(vector["registered_domain"].encode("utf-8"))
        checksum = digest & 0x7F
        url_hash = fnv1a_64_pure(vector["canonical"].encode("utf-8"))
        key = (checksum << 56) | (url_hash & (2**56 - 1))
        assert vector["domain_checksum"] == checksum
        assert vector["partition_p128"] == checksum % 128
        assert vector["partition_p4"] == checksum % 4
        assert vector["fnv1a_64"] == url_hash
        assert vector["url_key"] == key
        assert int(vector["url_key_hex"], 16) == key
        assert vector["domain_prefix"] == f"{digest:016x}"[:2]
