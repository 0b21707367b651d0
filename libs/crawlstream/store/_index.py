"""The url index in memory, and the tombstones and tags of ``ops.log``.

``url_key -> [Entry]`` in shards (the stored URL resolves 56-bit key collisions), plus the
views searches and maintenance use: entries by domain, by tag, and where each distinct body
(content hash) is stored. The global sequence number lives here: it orders puts against
tombstones and tag operations, so both survive ``rebuild-index``. ``ops.log`` is not
rebuildable from the segments: a tombstone is appended before the entry leaves memory.
Callers hold the store lock.

Callers ask through methods (by domain, by body, the segments and dictionaries in use,
``relocate``), never through the views themselves: ADR 036 moves the index out of memory, and
each of these becomes a query there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from crawlstream.errors import BadDataError
from crawlstream.store._codec import encode_log_record
from crawlstream.store._config import StoreConfig
from crawlstream.store._files import AppendFile
from crawlstream.store._model import Entry, Location
from crawlstream.store._urls import describe_url

__all__ = ["UrlIndex"]


class UrlIndex:
    def __init__(self, root: Path, config: StoreConfig, *, shards: int, key_fn: Callable[[str], int] | None) -> None:
        self._key_fn = key_fn
        self._shards: list[dict[int, list[Entry]]] = [{} for _ in range(max(1, shards))]
        self._by_domain: dict[str, dict[str, Entry]] = defaultdict(dict)
        self._by_tag: dict[str, dict[str, Entry]] = defaultdict(dict)
        self._blobs: dict[bytes, Location] = {}  # content hash -> where that body is stored
        self._blob_urls: dict[bytes, int] = {}  # content hash -> live URLs with that body
        self.seq = 0
        self.ops_path = root / "ops.log"
        self._ops_log: AppendFile | None = None
        self._ops_fsync_each = config.fsync_each

    def open_ops_log(self) -> None:
        """Start appending to ops.log (after start-up has read it and truncated a torn tail)."""
        self._ops_log = AppendFile(self.ops_path, fsync_each=self._ops_fsync_each)

    # ------------------------------------------------------------------ lookups

    def lookup(self, url_key: int, url: str) -> Entry | None:
        for entry in self._shard(url_key).get(url_key, ()):
            if entry.url == url:  # the stored URL resolves 56-bit key collisions
                return entry
        return None

    def entries(self) -> Iterator[Entry]:
        for shard in self._shards:
            for bucket in shard.values():
                yield from bucket

    def __len__(self) -> int:
        return sum(len(b) for shard in self._shards for b in shard.values())

    def search_pool(self, domain: str | None, tag: str | None) -> list[Entry]:
        """The smallest set of entries a search with these filters must look at (unsorted)."""
        if domain is not None:
            return list(self._by_domain.get(domain, {}).values())
        if tag is not None:
            return list(self._by_tag.get(tag, {}).values())
        return list(self.entries())

    def domain_entries(self, domain: str) -> list[Entry]:
        """The live entries of ``domain`` (unsorted)."""
        return list(self._by_domain.get(domain, {}).values())

    def domain_counts(self) -> dict[str, int]:
        """Live URLs per domain (domains with none left out)."""
        return {d: len(entries) for d, entries in self._by_domain.items() if entries}

    def body_location(self, content_hash: bytes) -> Location | None:
        """Where the body with ``content_hash`` is stored, if a live URL has it."""
        return self._blobs.get(content_hash)

    def segments_in_use(self) -> set[str]:
        """Segments a live entry points into: its body's, and its own reference record's."""
        used: set[str] = set()
        for entry in self.entries():
            used.add(entry.location.segment)
            if entry.record_segment:
                used.add(entry.record_segment)
        return used

    def dict_ids_in_use(self) -> set[int]:
        """Dictionaries a live entry's body is compressed with."""
        return {e.location.dict_id for e in self.entries()}

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # ------------------------------------------------------------------ changes

    def insert(self, entry: Entry) -> None:
        """Add ``entry``, replacing the entry of the same URL (its tags carry over if it has none)."""
        bucket = self._shard(entry.url_key).setdefault(entry.url_key, [])
        self._blob_urls[entry.content_hash] = self._blob_urls.get(entry.content_hash, 0) + 1
        for i, old in enumerate(bucket):
            if old.url == entry.url:
                entry.tags = entry.tags or old.tags
                bucket[i] = entry
                self._unref_body(old.content_hash)
                break
        else:
            bucket.append(entry)
        self._by_domain[entry.domain][entry.url] = entry
        for tag in entry.tags:
            self._by_tag[tag][entry.url] = entry
        self._blobs[entry.content_hash] = entry.location

    def relocate(self, entry: Entry, location: Location, record_segment: str, record_bytes: int) -> None:
        """``entry``'s body (and its own reference record) moved by maintenance; the body is found there now."""
        entry.location = location
        entry.record_segment = record_segment
        entry.record_bytes = record_bytes
        self._blobs[entry.content_hash] = location

    def remove(self, entry: Entry) -> None:
        shard = self._shard(entry.url_key)
        bucket = shard.get(entry.url_key, [])
        removed = next((e for e in bucket if e.url == entry.url), None)
        if removed is None:
            return
        bucket.remove(removed)
        if not bucket:
            shard.pop(entry.url_key, None)
        self._by_domain.get(removed.domain, {}).pop(removed.url, None)
        for tag in removed.tags:
            self._by_tag.get(tag, {}).pop(removed.url, None)
        self._unref_body(removed.content_hash)

    def _unref_body(self, content_hash: bytes) -> None:
        """One live URL fewer has this body; with none left, it is no longer found by its hash."""
        left = self._blob_urls.get(content_hash, 0) - 1
        if left > 0:
            self._blob_urls[content_hash] = left
        else:
            self._blob_urls.pop(content_hash, None)
            self._blobs.pop(content_hash, None)

    def delete(self, entry: Entry) -> None:
        """Tombstone ``entry``: the ops.log record first, then memory."""
        self._append_op({"op": "del", "u": entry.url, "k": entry.url_key, "q": self.next_seq()})
        self.remove(entry)

    def tag(self, entry: Entry, tags: list[str], op: str) -> None:
        """Add (``op="tag"``) or remove (``"untag"``) ``tags``: the ops.log record first, then memory."""
        if not tags:
            return
        self._append_op({"op": op, "u": entry.url, "k": entry.url_key, "q": self.next_seq(), "tags": tags})
        for tag in tags:
            if op == "tag":
                entry.tags.add(tag)
                self._by_tag[tag][entry.url] = entry
            else:
                entry.tags.discard(tag)
                self._by_tag.get(tag, {}).pop(entry.url, None)

    def _append_op(self, rec: dict[str, Any]) -> None:
        assert self._ops_log is not None, "open_ops_log() first"
        self._ops_log.append(encode_log_record(rec))

    # ------------------------------------------------------------------ start-up

    def build(self, puts: list[dict[str, Any]], ops: list[dict[str, Any]]) -> None:
        """Fill memory from index put records and ops.log (after ``clear``, or empty).

        The highest seq wins per URL (a relocation, same seq later in the log, wins too); a
        tombstone drops every put of that URL with a lower seq, and its tags.
        """
        latest: dict[str, dict[str, Any]] = {}
        max_seq = 0
        for rec in puts:
            max_seq = max(max_seq, rec["q"])
            cur = latest.get(rec["u"])
            if cur is None or rec["q"] >= cur["q"]:
                latest[rec["u"]] = rec
        last_del: dict[str, int] = {}
        tags: dict[str, set[str]] = defaultdict(set)
        for op in sorted(ops, key=lambda o: o["q"]):
            max_seq = max(max_seq, op["q"])
            url = op["u"]
            if op["op"] == "del":
                last_del[url] = op["q"]
                tags.pop(url, None)
            elif op["op"] == "tag":
                tags[url].update(op["tags"])
            elif op["op"] == "untag":
                tags[url].difference_update(op["tags"])
        self.seq = max_seq
        for url, rec in latest.items():
            if rec["q"] <= last_del.get(url, -1):
                continue
            entry = self.entry_from_record(rec)
            entry.tags = set(tags.get(url, ()))
            self.insert(entry)

    def clear(self) -> None:
        for shard in self._shards:
            shard.clear()
        self._by_domain.clear()
        self._by_tag.clear()
        self._blobs.clear()
        self._blob_urls.clear()

    def entry_from_record(self, rec: dict[str, Any]) -> Entry:
        domain, path = self._domain_path(rec["u"])
        entry = Entry(
            url=rec["u"],
            url_key=rec["k"],
            location=Location.from_list(rec["l"]),
            content_hash=bytes.fromhex(rec["h"]),
            raw_size=rec["z"],
            seq=rec["q"],
            fetched_at_ms=rec["f"],
            domain=domain,
            path=path,
            content_type=rec.get("t"),
            title=rec.get("n"),
            status=rec.get("s"),
        )
        if "r" in rec:
            entry.record_segment = rec["r"][0]
            entry.record_bytes = int(rec.get("rb") or rec["r"][2])
        return entry

    def _domain_path(self, url: str) -> tuple[str, str]:
        try:
            parts = describe_url(url, self._key_fn)
        except BadDataError:
            return "", ""
        return parts.domain, parts.path

    def _shard(self, url_key: int) -> dict[int, list[Entry]]:
        return self._shards[url_key % len(self._shards)]

    def sync(self) -> None:
        if self._ops_log is not None:
            self._ops_log.sync()

    def close(self) -> None:
        if self._ops_log is not None:
            self._ops_log.close()
