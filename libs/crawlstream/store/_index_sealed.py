"""Sealed blocks: the url index's second kind of entry, for pages in the archive tier (ADR 036).

Why: a row per page with its indexes costs 300-400 B on disk, and issue 13's measure (raw bytes
over every byte the store keeps) leaves the whole index ~128 B a page on the real pages. The
archive tier is where pages stop moving, so their entries are folded, a segment at a time, into
zstd-compressed blocks of columns (format 3's snapshot did the same for the whole index, ~50 B a
page), stored as blobs in the same database: one transaction covers rows and blocks alike.

Tables (beside ``entries``)::

    sealed_blocks(block, segment, entries, live, data)   up to BLOCK_ENTRIES entries of one segment
    sealed_keys(slot, block)      where a sealed URL is (live iff its slot points there): the slot is
                                  the url_key's low 35 bits (a 5-byte varint, not 9)
    sealed_bodies(slot, block)    a block holding a body (dedupe), checked on use: 35 bits of its hash

Blocks never change: an entry that must change (a re-put, a relocation, a delete, a tag) first
goes back to a row (``UrlIndex.unseal``), its key row is deleted and the block's ``live``
count drops; a block whose count reaches 0 is deleted. Only plain entries are sealed: archive
tier, no reference record elsewhere, no tags, a key slot no other sealed URL has (two URLs in 2**35
share one: ~15 in a root of a million sealed pages; the second stays a row).
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Sequence
from typing import Any

import zstandard as zstd

from crawlstream.errors import ChecksumMismatch
from crawlstream.store._model import Entry, Location
from crawlstream.store._segments import ARCHIVE_TIER
from crawlstream.store._urls import path_of
from crawlstream.urls import canonical_url_key as _key

__all__ = [
    "BLOCK_ENTRIES", "SEALED_SCHEMA", "Block", "body_slot", "decode_block", "encode_block", "key_slot", "sealable",
]

BLOCK_ENTRIES = 1024  # entries per block at most: a lookup decodes one block (~1 ms)
_MAGIC = b"CSSB1\n"
_U32 = struct.Struct(">I")
_HASH = 16  # bytes of a content hash
_LEVEL = 19
_SLOT_MASK = (1 << 35) - 1  # a slot fits a 5-byte varint
_COLUMNS = ("u", "d", "q", "o", "l", "i", "m", "z", "f", "t", "n", "s", "b")  # url, domain, seq, location, ...

SEALED_SCHEMA = """
CREATE TABLE IF NOT EXISTS sealed_blocks (
    block INTEGER PRIMARY KEY AUTOINCREMENT, segment TEXT NOT NULL, entries INTEGER NOT NULL,
    live INTEGER NOT NULL, data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sealed_blocks_segment ON sealed_blocks(segment);
CREATE TABLE IF NOT EXISTS sealed_keys (slot INTEGER PRIMARY KEY, block INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sealed_bodies (slot INTEGER PRIMARY KEY, block INTEGER NOT NULL);
"""


def sealable(e: Entry) -> bool:
    return e.location.tier == ARCHIVE_TIER and not e.record_segment and not e.tags and len(e.content_hash) == _HASH


def key_slot(url_key: int) -> int:
    """The ``sealed_keys`` slot of a url_key: its low bits (the URL hash's; the high ones are the domain
    checksum, one value in a shard)."""
    return url_key & _SLOT_MASK


def body_slot(content_hash: bytes) -> int:
    """The ``sealed_bodies`` slot of a body: the first bits of its hash."""
    return int.from_bytes(content_hash[:8], "big") & _SLOT_MASK


def encode_block(entries: Sequence[Entry]) -> bytes:
    """One zstd frame of the entries' columns (one segment's, sorted by URL: neighbours share prefixes)."""
    cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
    entries = sorted(entries, key=lambda e: e.url)  # ``Block.find`` bisects
    for e in entries:
        loc = e.location
        for key, value in (
            ("u", e.url), ("d", e.domain), ("q", e.seq), ("o", loc.offset), ("l", loc.length), ("i", loc.dict_id),
            ("m", loc.member), ("z", e.raw_size), ("f", e.fetched_at_ms), ("t", e.content_type), ("n", e.title),
            ("s", e.status), ("b", e.record_bytes),
        ):
            cols[key].append(value)
    # a url_key is its URL's (8 random bytes a page saved), except where a store was given its own key function
    kx = {str(i): e.url_key for i, e in enumerate(entries) if _key(e.domain, e.url) != e.url_key}
    meta = json.dumps({**cols, "kx": kx}, separators=(",", ":"), ensure_ascii=False).encode()
    hashes = b"".join(e.content_hash for e in entries)
    content = _MAGIC + _U32.pack(len(meta)) + meta + hashes
    return zstd.ZstdCompressor(level=_LEVEL, write_checksum=True).compress(content)


class Block:
    """A decoded block: its columns, and entries built one at a time (a lookup needs one of 1,024)."""

    def __init__(self, segment: str, columns: dict[str, Any], hashes: bytes) -> None:
        self.segment = segment
        self._c = columns
        self._hashes = hashes
        self.urls: list[str] = columns["u"]
        self._kx: dict[str, int] = columns["kx"]

    def __len__(self) -> int:
        return len(self.urls)

    def find(self, url: str) -> Entry | None:
        """The entry of ``url`` (the URLs are sorted)."""
        i = bisect.bisect_left(self.urls, url)
        return self.entry(i) if i < len(self.urls) and self.urls[i] == url else None

    def entry(self, i: int) -> Entry:
        c = self._c
        url, domain = self.urls[i], c["d"][i]
        try:
            return Entry(
                url=url,
                url_key=self._kx[str(i)] if str(i) in self._kx else _key(domain, url),
                location=Location(self.segment, c["o"][i], c["l"][i], c["i"][i], ARCHIVE_TIER, c["m"][i]),
                content_hash=self._hashes[_HASH * i : _HASH * (i + 1)],
                raw_size=c["z"][i],
                seq=c["q"][i],
                fetched_at_ms=c["f"][i],
                domain=domain,
                path=path_of(url),
                content_type=c["t"][i],
                title=c["n"][i],
                status=c["s"][i],
                record_bytes=c["b"][i],
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ChecksumMismatch(f"sealed index block is malformed: {exc!r}") from exc

    def entries(self) -> list[Entry]:
        return [self.entry(i) for i in range(len(self.urls))]

    def with_body(self, content_hash: bytes) -> list[int]:
        """Positions of the entries whose body is ``content_hash``."""
        found, at = [], self._hashes.find(content_hash)
        while at >= 0:
            if at % _HASH == 0:
                found.append(at // _HASH)
            at = self._hashes.find(content_hash, at + 1)
        return found


def decode_block(data: bytes, segment: str) -> Block:
    """Inverse of ``encode_block`` for a block of ``segment``; ChecksumMismatch when it is damaged."""
    dobj = zstd.ZstdDecompressor().decompressobj()  # streamed: no allocation trusting the frame's size field
    try:
        content = dobj.decompress(data)
    except zstd.ZstdError as exc:
        raise ChecksumMismatch(f"sealed index block does not decompress: {exc}") from exc
    if not dobj.eof or dobj.unused_data or not zstd.get_frame_parameters(data).has_checksum:
        raise ChecksumMismatch("sealed index block is not exactly one checksummed zstd frame")
    if not content.startswith(_MAGIC) or len(content) < len(_MAGIC) + _U32.size:
        raise ChecksumMismatch("sealed index block does not start with its magic")
    pos = len(_MAGIC) + _U32.size
    (meta_len,) = _U32.unpack_from(content, len(_MAGIC))
    try:
        columns = json.loads(content[pos : pos + meta_len])
        n = len(columns["u"])
        if any(len(columns[k]) != n for k in _COLUMNS) or not isinstance(columns["kx"], dict):
            raise ChecksumMismatch("sealed index block has columns of different lengths")
    except (KeyError, TypeError, ValueError) as exc:
        raise ChecksumMismatch(f"sealed index block is malformed: {exc!r}") from exc
    hashes = content[pos + meta_len :]
    if len(hashes) != n * _HASH:
        raise ChecksumMismatch(f"sealed index block holds {len(hashes)} hash bytes for {n} entries")
    return Block(segment, columns, hashes)
