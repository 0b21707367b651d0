"""Step 2 of a maintenance batch: rewrite pages into new segments of a tier (no store lock held).

Cold and archive pages are packed into group records (ADR 002): consecutive pages of one
dictionary, whole domains per group where they fit, smallest members first; warm pages
(and bodies too large for a member) become single records. Identical bodies are written
once; the other URLs get reference records. Where each page went is only *returned*: the
swap (``_tiering``) decides which still apply.
"""

from __future__ import annotations

import bz2
import threading
from collections import defaultdict
from typing import Any

from crawlstream.errors import ChecksumMismatch
from crawlstream.store._codec import (
    KIND_BODY,
    KIND_GROUP,
    KIND_GROUP_BZIP2,
    KIND_REF,
    MAX_GROUP_MEMBERS,
    encode_group,
    encode_meta,
    member_checksum,
)
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import DictCodecs, DictionaryStore
from crawlstream.store._files import AppendFile, ReadCache
from crawlstream.store._maintenance import GROUP_TIERS, GroupShape, Move, Relocation
from crawlstream.store._model import Location
from crawlstream.store._reader import RecordReader
from crawlstream.store._reports import RecompressReport
from crawlstream.store._response import extra_meta
from crawlstream.store._segments import Segments
from crawlstream.store._writer import PageWriter

__all__ = ["Rewriter"]

_MAX_MEMBER_BODY = 0xFFFFFFFF  # a group member's body size is a u32; larger bodies stay single records


class Rewriter:
    def __init__(
        self,
        config: StoreConfig,
        *,
        segments: Segments,
        dicts: DictionaryStore,
        reader: RecordReader,
        writer: PageWriter,
        lock: threading.RLock,
        shapes: dict[tuple[str, int], GroupShape],
        unmovable: set[tuple[str, int, int]],
    ) -> None:
        self._config = config
        self._segments = segments
        self._dicts = dicts
        self._reader = reader
        self._writer = writer
        self._lock = lock
        self._shapes = shapes  # group shapes for space accounting (owned by the maintenance engine)
        self._unmovable = unmovable  # records that could not be read: never picked again

    def group_cap(self, dict_id: int) -> int:
        """Raw bytes per group frame: smaller on the global dictionary, whose decoding is slowest.

        Matches into the large global dictionary (8 MB) miss the CPU caches, so its frames
        decode at ~0.9 GB/s against 1.5-5 GB/s without a dictionary or on a domain's own
        (≤ 1 MB) one; ``global_group_bytes`` keeps the worst read of such a group near the
        cost of the largest single pages (ADR 002).
        """
        return self._config.global_group_bytes if self._dicts.is_global(dict_id) else self._config.group_bytes

    def group_frame(self, content: bytes, tier: str, dict_id: int, codecs: DictCodecs) -> tuple[int, int, bytes]:
        """(group kind, dictionary id, frame) of a group's content: zstd on its dictionary, or in
        the archive tier bzip2 when that is smaller (ADR 026: uniform prose, whose Burrows-Wheeler
        sort beats any LZ window; real HTML keeps its zstd frame and dictionary)."""
        frame = codecs.compressor(self._config.levels[tier], dict_id).compress(content)
        if tier == "archive" and self._config.archive_bzip2:
            packed = bz2.compress(content, 9)
            if len(packed) < len(frame):
                return KIND_GROUP_BZIP2, 0, packed
        return KIND_GROUP, dict_id, frame

    def allocate(self, tier: str, writers: list[AppendFile]) -> AppendFile:
        """A new segment for the batch: numbered and created under the lock (puts number theirs there too)."""
        with self._lock:
            writer = self._segments.allocate(tier)
        writers.append(writer)
        return writer

    def rewrite(
        self,
        moves: list[Move],
        tier: str,
        codecs: DictCodecs,
        reads: ReadCache,
        writers: list[AppendFile],
        report: RecompressReport,
        cancel: threading.Event | None,
    ) -> list[tuple[Move, Relocation]]:
        """Write ``moves`` into new segments of ``tier`` (appended to ``writers``); where each went."""
        batch = _Batch(self, tier, codecs, writers, report)
        batch.read(moves, reads)
        # Bodies that stay where they are (keep_body moves) are referenced, never rewritten.
        batch.new_locs.update(
            (m.entry.content_hash, m.body_at) for m in moves if m.keep_body and m.body_at is not None
        )
        order = sorted(moves, key=lambda m: (m.entry.domain, m.entry.url))
        domain_bytes = batch.domain_bytes(order)
        for m in order:
            if cancel is not None and cancel.is_set():
                return []
            batch.place(m, domain_bytes)
        batch.flush_group()
        if self._config.fsyncs:
            for w in writers:
                w.sync()
        return batch.pending


class _Batch:
    """One ``rewrite``: the bodies read (``bodies``) and the response heads to keep (``heads``),
    where each body is now (``new_locs``), the open segment and the group record being filled;
    ``pending`` collects where the pages went."""

    def __init__(
        self, rewriter: Rewriter, tier: str, codecs: DictCodecs, writers: list[AppendFile], report: RecompressReport
    ) -> None:
        self._rw = rewriter
        self._tier = tier
        self._codecs = codecs
        self._writers = writers
        self._report = report
        self.bodies: dict[bytes, bytes] = {}
        # The response head a body record carries (its first URL's, ADR 022), carried over to
        # that URL's new record: (url, content hash) -> the metadata keys to keep.
        self.heads: dict[tuple[str, bytes], dict[str, Any]] = {}
        self.new_locs: dict[bytes, Location] = {}
        self.pending: list[tuple[Move, Relocation]] = []
        self._writer: AppendFile | None = None
        self._group: list[tuple[Move, int, bytes, bytes]] = []  # (move, kind, metadata line, body)
        self._group_hashes: set[bytes] = set()
        self._group_dict = self._group_raw = 0
        self._group_domain = ""

    def read(self, moves: list[Move], reads: ReadCache) -> None:
        """The bodies to rewrite (each once) and the response heads their records carry."""
        rw = self._rw
        # ... and the one a URL stored as a reference to another URL's body has in its own record
        ref_metas = rw._reader.reference_metas(m.entry for m in moves)
        for m in moves:
            if m.entry.url in ref_metas and (extra := extra_meta(ref_metas[m.entry.url])):
                self.heads[(m.entry.url, m.entry.content_hash)] = extra
        for m in moves:
            if m.keep_body or m.entry.content_hash in self.bodies:
                continue
            key = (m.location.segment, m.location.offset, m.location.member)
            try:
                body, old_meta = rw._reader.read_with_meta(m.location, m.entry.content_hash, self._codecs, reads)
                self.bodies[m.entry.content_hash] = body
                if extra := extra_meta(old_meta):
                    self.heads[(str(old_meta.get("u", "")), m.entry.content_hash)] = extra
            except ChecksumMismatch:
                self._report.skipped_corrupt += 1
                rw._unmovable.add(key)
                continue
            self._report.raw_bytes += m.entry.raw_size

    def domain_bytes(self, order: list[Move]) -> dict[str, int]:
        """Raw bytes each domain brings (bodies stored once): a domain that does not fit in the
        current group starts a new one, so groups split between domains rather than inside
        one (its pages share the most, ADR 002)."""
        domain_bytes: dict[str, int] = defaultdict(int)
        counted: set[bytes] = set()
        for m in order:
            h = m.entry.content_hash
            if h in self.bodies and h not in counted and h not in self.new_locs:
                counted.add(h)
                domain_bytes[m.entry.domain] += len(self.bodies[h])
        return domain_bytes

    def place(self, m: Move, domain_bytes: dict[str, int]) -> None:
        """Write ``m``'s page: a member of the current group (cold and archive tiers), else a
        single record; a body already written (or in the group) becomes a reference to it."""
        entry = m.entry
        is_ref = entry.content_hash in self.new_locs or entry.content_hash in self._group_hashes
        stored = b"" if is_ref else self.bodies.get(entry.content_hash)
        if stored is None:
            return  # unreadable: left where it is (quarantined by the read)
        meta = {"u": entry.url, "t": entry.content_type, "n": entry.title, "s": entry.status}
        meta.update(self.heads.get((entry.url, entry.content_hash), {}))
        body = stored
        if self._tier in GROUP_TIERS and len(body) <= _MAX_MEMBER_BODY:
            dict_id = self._rw._writer.dict_for(entry.domain, body)
            meta.update(q=entry.seq, f=entry.fetched_at_ms)
            if is_ref:
                meta.update(h=entry.content_hash.hex(), z=entry.raw_size)
            cap = self._rw.group_cap(dict_id)
            group, group_raw = self._group, self._group_raw
            if group and (
                dict_id != self._group_dict
                or group_raw + len(body) > cap
                or (entry.domain != self._group_domain and group_raw + domain_bytes[entry.domain] > cap)
                or len(group) >= MAX_GROUP_MEMBERS
            ):
                self.flush_group()
            self._group.append((m, KIND_REF if is_ref else KIND_BODY, encode_meta(meta), body))
            self._group_hashes.add(entry.content_hash)
            self._group_dict = dict_id
            self._group_domain = entry.domain
            self._group_raw += len(body)
            return
        self.flush_group()
        self._write_single(m, is_ref, meta, body)

    def _out(self) -> AppendFile:
        writer = self._writer
        if writer is None or writer.size >= self._rw._config.segment_bytes:
            if writer is not None and self._rw._config.fsyncs:
                writer.sync()
            writer = self._writer = self._rw.allocate(self._tier, self._writers)
        return writer

    def _write_single(self, m: Move, is_ref: bool, meta: dict[str, Any], body: bytes) -> None:
        entry = m.entry
        w = self._out()
        name = self._rw._segments.name(w.path)
        record, dict_id = self._rw._writer.make_record(
            KIND_REF if is_ref else KIND_BODY,
            url_key=entry.url_key,
            seq=entry.seq,
            fetched_at_ms=entry.fetched_at_ms,
            raw_size=entry.raw_size,
            chash=entry.content_hash,
            meta=meta,
            body=body,
            domain=entry.domain,
            tier=self._tier,
            codecs=self._codecs,
        )
        off = w.append(record)
        here = Location(name, off, len(record), dict_id, self._tier)
        if is_ref:
            self.pending.append((m, Relocation(self.new_locs[entry.content_hash], name, len(record))))
        else:
            self.new_locs[entry.content_hash] = here
            self._report.moved_bodies += 1
            self.pending.append((m, Relocation(here)))

    def flush_group(self) -> None:
        """Write the pending members as one group record (one zstd frame)."""
        group = self._group
        if not group:
            return
        # Smallest bodies first (references last): a member's read decodes the frame up to
        # its end, so only the largest member pays for the whole frame (ADR 002).
        group.sort(key=lambda m: (m[1] == KIND_REF, len(m[3])))
        contents = [meta_line + body for _, _, meta_line, body in group]
        frame_kind, frame_dict, frame = self._rw.group_frame(
            b"".join(contents), self._tier, self._group_dict, self._codecs
        )
        record = encode_group(
            dict_id=frame_dict,
            members=[
                (kind, len(meta_line), len(body), member_checksum(content))
                for (_, kind, meta_line, body), content in zip(group, contents, strict=True)
            ],
            frame=frame,
            kind=frame_kind,
        )
        w = self._out()
        name = self._rw._segments.name(w.path)
        off = w.append(record)
        total = sum(map(len, contents)) or 1
        self._rw._shapes[(name, off)] = GroupShape(
            tuple(map(len, contents)), frozenset(i for i, g in enumerate(group) if g[1] == KIND_BODY)
        )
        for i, (move, kind, _, _) in enumerate(group):
            here = Location(name, off, len(record), frame_dict, self._tier, i)
            if kind == KIND_REF:
                share = max(1, len(record) * len(contents[i]) // total)
                body_loc = self.new_locs[move.entry.content_hash]
                self.pending.append((move, Relocation(body_loc, name, share)))
            else:
                self.new_locs[move.entry.content_hash] = here
                self._report.moved_bodies += 1
                self.pending.append((move, Relocation(here)))
        group.clear()
        self._group_hashes.clear()
        self._group_raw = 0
