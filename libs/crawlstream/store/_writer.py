"""Writing pages: ``put`` appends a record to the active hot segment, then its index entry.

Order (ADR 002): the segment record first, the index row second, both under the store lock
(a kill between them: start-up re-indexes the record); a body already stored under another
URL gets a small reference record instead (dedupe by xxh3_128). Also builds single records
for maintenance, which passes its own zstd contexts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from crawlstream.store._codec import KIND_BODY, KIND_REF, content_hash, encode_meta, encode_record
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import DictCodecs, DictionaryStore
from crawlstream.store._index import UrlIndex
from crawlstream.store._model import Entry, Location
from crawlstream.store._response import response_meta
from crawlstream.store._segments import Segments
from crawlstream.store._urls import UrlParts

__all__ = ["PageWriter"]


class PageWriter:
    def __init__(
        self,
        config: StoreConfig,
        *,
        segments: Segments,
        dicts: DictionaryStore,
        index: UrlIndex,
        lock: threading.RLock,
        parts: Callable[[str], UrlParts],
        clock_ms: Callable[[], int],
        quarantined: Callable[[Location], bool],
    ) -> None:
        self._quarantined = quarantined
        self._config = config
        self._segments = segments
        self._dicts = dicts
        self._index = index
        self._lock = lock
        self._parts = parts
        self._clock_ms = clock_ms

    def put(
        self,
        url: str,
        body: bytes,
        *,
        content_type: str | None,
        title: str | None,
        status: int | None,
        fetched_at_ms: int | None,
        tags: Iterable[str],
        response_head: bytes | None = None,
        ip_address: str | None = None,
        request_head: bytes | None = None,
        body_frame: bytes | None = None,
    ) -> Location:
        """See ``ContentStore.put``: a newer body replaces the URL's older record (same URL + body:
        no-op, unless the stored copy is quarantined: then the new copy replaces it)."""
        parts = self._parts(url)
        chash = content_hash(body)
        fetched = self._clock_ms() if fetched_at_ms is None else fetched_at_ms
        tag_list = sorted(set(tags))
        with self._lock:
            existing = self._index.lookup(parts.url_key, parts.url)
            # Same body: a no-op, unless the stored copy is quarantined (a re-fetch repairs it).
            if existing is not None and existing.content_hash == chash and not self._quarantined(existing.location):
                if tag_list:
                    self._index.tag(existing, tag_list, "tag")
                return existing.location
            seq = self._index.next_seq()
            meta: dict[str, Any] = {"u": parts.url, "t": content_type, "n": title, "s": status}
            meta.update(response_meta(response_head, ip_address, request_head))  # in the frame only, never in the index
            writer = self._segments.active_writer()
            blob = self._index.body_location(chash)
            if blob is not None and self._quarantined(blob):
                blob = None  # never reference a damaged body: write this one whole
            rec_loc: Location | None = None
            # 1. the segment record (body, or a reference to an identical stored body)
            record, dict_id = self.make_record(
                KIND_BODY if blob is None else KIND_REF,
                url_key=parts.url_key,
                seq=seq,
                fetched_at_ms=fetched,
                raw_size=len(body),
                chash=chash,
                meta=meta,
                body=body if blob is None else b"",
                domain=parts.domain,
                tier="hot",
                body_frame=body_frame,
            )
            offset = writer.append(record)
            here = Location(self._segments.active_name, offset, len(record), dict_id, "hot")
            if blob is not None:
                rec_loc, location = here, blob
            else:
                location = here
            # 2. the index row (only after the record it points to is written)
            entry = Entry(
                parts.url,
                parts.url_key,
                location,
                chash,
                len(body),
                seq,
                fetched,
                parts.domain,
                parts.path,
                content_type,
                title,
                status,
            )
            if existing is not None:
                entry.tags = set(existing.tags)
            if rec_loc is not None:
                entry.record_segment = rec_loc.segment
                entry.record_bytes = rec_loc.length
            self._index.insert(entry, existing)
            self._index.indexed(here.segment, here.offset + here.length)
            if tag_list:
                self._index.tag(entry, tag_list, "tag")
            return location

    def dict_for(self, domain: str, body: bytes) -> int:
        """The dictionary a body is compressed with: its domain's, none for bodies over ``large_body_bytes``."""
        return self._dicts.for_domain(domain) if len(body) <= self._config.large_body_bytes else 0

    def make_record(
        self,
        kind: int,
        *,
        url_key: int,
        seq: int,
        fetched_at_ms: int,
        raw_size: int,
        chash: bytes,
        meta: dict[str, Any],
        body: bytes,
        domain: str,
        tier: str,
        codecs: DictCodecs | None = None,
        body_frame: bytes | None = None,
    ) -> tuple[bytes, int]:
        """(record bytes, dict id): metadata line + body compressed as one frame, the domain's dictionary.

        ``codecs``: zstd contexts of the calling thread (maintenance); puts use the shared ones.
        ``body_frame`` (``body`` compressed without a dictionary, see ``ContentStore.put``) is
        kept as the body's own frame after the metadata's when no dictionary applies.
        """
        dict_id = self.dict_for(domain, body)
        meta_bytes = encode_meta(meta)
        compressor = (codecs or self._dicts).compressor(self._config.levels[tier], dict_id)
        if body_frame is not None and body and dict_id == 0:
            frame = compressor.compress(meta_bytes) + body_frame
        else:
            frame = compressor.compress(meta_bytes + body)
        record = encode_record(
            kind=kind,
            url_key=url_key,
            seq=seq,
            fetched_at_ms=fetched_at_ms,
            raw_size=raw_size,
            chash=chash,
            meta_len=len(meta_bytes),
            frame=frame,
            dict_id=dict_id,
        )
        return record, dict_id
