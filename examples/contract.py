"""The published contract of crawlstream's topics, reimplemented from schemas/ alone.

Nothing here imports crawlstream: this is what an outside system writes, following
schemas/README.md (topics, keys, partitions, the Confluent wire format, schema ids) and
schemas/URL_KEYS.md (registered domain, domain checksum, url_key). Besides confluent-kafka
and fastavro it needs the two primitives URL_KEYS.md names: the Public Suffix List as
bundled in tldextract (no network) and XXH3-64 (xxhash).
"""

from __future__ import annotations

import io
import ipaddress
import json
import struct
import urllib.parse
from pathlib import Path
from typing import Any

import fastavro
import tldextract
import xxhash

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
_MAGIC = 0
_PSL = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)
_FNV_OFFSET, _FNV_PRIME, _MASK_56 = 0xCBF29CE484222325, 0x100000001B3, (1 << 56) - 1


class Schemas:
    """registry.json: writer ids by subject (``<topic>-value``), and every id's schema."""

    def __init__(self, root: Path = SCHEMAS) -> None:
        registry = json.loads((root / "registry.json").read_text())
        named: dict[str, Any] = {}
        self.by_id = {}
        for schema_id, file in sorted(registry["schemas"].items(), key=lambda kv: int(kv[0])):
            schema = json.loads((root / file).read_text())
            self.by_id[int(schema_id)] = fastavro.parse_schema(schema, named_schemas=named)
        self.subjects = {subject: int(i) for subject, i in registry["subjects"].items()}

    def encode(self, topic: str, record: dict[str, Any]) -> bytes:
        """Magic byte 0, the schema id (4 bytes big-endian), the Avro binary body."""
        schema_id = self.subjects[f"{topic}-value"]
        out = io.BytesIO()
        out.write(struct.pack(">bI", _MAGIC, schema_id))
        fastavro.schemaless_writer(out, self.by_id[schema_id], record)
        return out.getvalue()

    def decode(self, value: bytes) -> dict[str, Any]:
        magic, schema_id = struct.unpack(">bI", value[:5])
        if magic != _MAGIC or schema_id not in self.by_id:
            raise ValueError(f"not a crawlstream value (magic {magic}, schema id {schema_id})")
        return fastavro.schemaless_reader(io.BytesIO(value[5:]), self.by_id[schema_id], None)


def registered_domain(host: str) -> str:
    """eTLD+1 by the PSL (ICANN and private sections); an IP or localhost is its own domain,
    and a host that is a public suffix alone stands for itself (URL_KEYS.md §3)."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if host == "localhost":
        return host
    parts = _PSL(host)
    return parts.top_domain_under_public_suffix or host


def checksum(domain: str) -> int:
    """URL_KEYS.md §4: the low 7 bits of XXH3-64 of the domain's UTF-8."""
    return xxhash.xxh3_64_intdigest(domain.encode()) & 0x7F


def partition(domain: str, partitions: int) -> int:
    """URL_KEYS.md §6: every topic is partitioned by checksum(domain) mod P."""
    return checksum(domain) % partitions


def url_key(canonical_url: str, domain: str) -> int:
    """URL_KEYS.md §5: the checksum in bits 56-62, FNV-1a-64 of the URL in bits 0-55."""
    h = _FNV_OFFSET
    for byte in canonical_url.encode():
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return (checksum(domain) << 56) | (h & _MASK_56)


def simple_canonical(url: str) -> tuple[str, str]:
    """(URL, registered domain) for plain http(s) URLs with ASCII hosts: scheme and host
    lowercased, default port, fragment and credentials dropped, empty path = "/". Not the
    whole of URL_KEYS.md §1 (percent-encoding, query order, IDNA): the deduper re-derives
    the canonical URL and key of whatever it receives, so this only has to find the domain
    (the partition) right."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an absolute http(s) URL, found {url!r}")
    host = parts.hostname.lower().rstrip(".")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    scheme = parts.scheme.lower()
    port = parts.port
    netloc = host if port is None or port == {"http": 80, "https": 443}[scheme] else f"{host}:{port}"
    path = parts.path or "/"
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{netloc}{path}{query}", registered_domain(host)


def partition_count(admin_or_client: Any, topic: str) -> int:
    metadata = admin_or_client.list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise SystemExit(f"topic {topic!r} not found on the cluster (start the services first: they create it)")
    return len(found.partitions)
