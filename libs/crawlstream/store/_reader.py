"""Reading records: one page by location (checked on every read), and whole records as scans meet them.

Every read checks the header crc32, the frame's xxh3_64, the content's xxh3_128 and size
(for a group member also its own xxh3_64); a failure quarantines the region and raises
``ChecksumMismatch``. Group frames are decoded only up to the member read (ADR 002).
Maintenance passes its own zstd contexts and descriptors (``DictCodecs``, ``ReadCache``):
the shared ones serve puts and reads, and zstd contexts are not thread-safe.
"""

from __future__ import annotations

import bz2
import dataclasses
import logging
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import zstandard as zstd

from crawlstream.errors import BadDataError, ChecksumMismatch
from crawlstream.store._codec import (
    KIND_BODY,
    KIND_GROUP_BZIP2,
    KIND_REF,
    GroupHeader,
    Member,
    RecordHeader,
    ScanItem,
    TornRecord,
    UnsupportedFormat,
    content_hash,
    decode_meta,
    decode_record_header,
    frame_checksum,
    member_checksum,
    scan_records,
)
from crawlstream.store._dicts import DictCodecs, DictionaryStore
from crawlstream.store._files import ReadCache
from crawlstream.store._model import Entry, Location
from crawlstream.store._quarantine import Quarantine
from crawlstream.store._segments import SegmentDamaged, Segments

__all__ = ["RecordReader"]

logger = logging.getLogger(__name__)

_GROUP_READ_SLICE = 16 * 1024  # compressed bytes fed per step when salvaging the members of a damaged group frame


class RecordReader:
    def __init__(
        self,
        segments: Segments,
        dicts: DictionaryStore,
        quarantine: Quarantine,
        lock: threading.RLock,
        key_of: Callable[[str], int],
    ) -> None:
        self._segments = segments
        self._dicts = dicts
        self._quarantine = quarantine
        self._lock = lock
        self._key_of = key_of
        self._bzip2 = Bzip2Groups()

    def read(
        self,
        loc: Location,
        expected_hash: bytes | None = None,
        dicts: DictionaryStore | DictCodecs | None = None,
        reads: ReadCache | None = None,
    ) -> bytes:
        """The body at ``loc``, verified; ``dicts``/``reads``: a maintenance thread's own contexts."""
        return self._read(loc, expected_hash, dicts, reads)[0]

    def read_with_meta(
        self,
        loc: Location,
        expected_hash: bytes | None = None,
        dicts: DictionaryStore | DictCodecs | None = None,
        reads: ReadCache | None = None,
    ) -> tuple[bytes, dict[str, Any]]:
        """``read``, plus the record's metadata line (decompressed in the same pass)."""
        body, meta_line = self._read(loc, expected_hash, dicts, reads)
        return body, decode_meta(meta_line)

    def _read(
        self,
        loc: Location,
        expected_hash: bytes | None,
        dicts: DictionaryStore | DictCodecs | None,
        reads: ReadCache | None,
    ) -> tuple[bytes, bytes]:
        """(body, metadata line) at ``loc``, verified."""
        dicts = dicts or self._dicts
        if self._quarantine.has(loc):
            raise ChecksumMismatch(
                f"record at {loc.segment}:{loc.offset} (member {loc.member}) is quarantined as corrupt; "
                "run `crawlstream store verify`"
            )
        try:
            buf = self._segments.pread(loc.segment, loc.offset, loc.length, reads)
        except SegmentDamaged as exc:  # the bytes never arrived: the whole record is quarantined
            with self._lock:
                self._quarantine.add(loc.segment, loc.offset, loc.length, str(exc), b"")
            raise ChecksumMismatch(f"{exc}; the record is quarantined and will not be served") from exc
        member: int | None = None
        try:
            header = decode_record_header(buf)
            if header.record_size != loc.length:
                raise ChecksumMismatch(f"expected a record of {loc.length} bytes at {loc.segment}:{loc.offset}")
            if isinstance(header, GroupHeader):
                member = loc.member
                body, meta_line = self._read_member(header, buf, loc, dicts)
                chash = content_hash(body)
            else:
                body, meta_line = self._read_single(header, buf, loc, dicts)
                chash = header.content_hash
            if expected_hash is not None and chash != expected_hash:
                raise ChecksumMismatch(
                    f"record at {loc.segment}:{loc.offset} holds other content than the index expects"
                )
        # A record the index points at was written by this store (FORMAT guards the layout as
        # a whole), so a header naming another format version there is damage like any other.
        except (ChecksumMismatch, TornRecord, UnsupportedFormat, zstd.ZstdError) as exc:
            with self._lock:
                self._quarantine.add(loc.segment, loc.offset, loc.length, str(exc), buf, member=member)
            raise ChecksumMismatch(
                f"{exc}; the record is quarantined and will not be served. Run `crawlstream store verify` "
                "to scan the rest, and re-fetch the URL to store it again"
            ) from exc
        return body, meta_line

    def _read_single(
        self, header: RecordHeader, buf: bytes, loc: Location, dicts: DictionaryStore | DictCodecs
    ) -> tuple[bytes, bytes]:
        """(body, metadata line) of a single record."""
        if header.kind != KIND_BODY:
            raise ChecksumMismatch(f"expected a body record of {loc.length} bytes at {loc.segment}:{loc.offset}")
        frame = memoryview(buf)[header.header_size :]
        if frame_checksum(frame) != header.frame_checksum:
            raise ChecksumMismatch(f"frame checksum mismatch at {loc.segment}:{loc.offset}")
        content = decompress_single(dicts.decompressor(header.dict_id), frame, header.content_size)
        if len(content) != header.content_size:
            raise ChecksumMismatch(f"record at {loc.segment}:{loc.offset} decompresses to the wrong size")
        body = content[header.meta_len :]
        if content_hash(body) != header.content_hash:
            raise ChecksumMismatch(f"content hash mismatch at {loc.segment}:{loc.offset}")
        return body, content[: header.meta_len]

    def _read_member(
        self, header: GroupHeader, buf: bytes, loc: Location, dicts: DictionaryStore | DictCodecs
    ) -> tuple[bytes, bytes]:
        """(body, metadata line) of member ``loc.member``, checked against the member's own checksum.

        An intact frame is decoded once, up to the member's end: first everything before its
        body, then the body straight into the bytes returned (no copy of the body is made).
        """
        if loc.member >= len(header.members) or header.members[loc.member].kind != KIND_BODY:
            raise ChecksumMismatch(f"group at {loc.segment}:{loc.offset} has no body member {loc.member}")
        member = header.members[loc.member]
        what = f"group member {loc.member} at {loc.segment}:{loc.offset}"
        frame = memoryview(buf)[header.header_size :]
        if frame_checksum(frame) != header.frame_checksum:
            logger.error(
                "group frame at %s:%d fails its checksum; checking member %d alone", loc.segment, loc.offset, loc.member
            )
            piece = self.group_content(header, frame, member.end, False, member.start, dicts)
            check_member(member, what, piece)
            return bytes(piece[member.meta_len :]), bytes(piece[: member.meta_len])
        head_end = member.start + member.meta_len
        if header.kind == KIND_GROUP_BZIP2:
            content = self._bzip2.prefix((loc.segment, loc.offset, header.frame_checksum), frame, member.end)
            head, body = content[:head_end], content[head_end : member.end]
            check_member(member, what, memoryview(head)[member.start :], body)
            return body, head[member.start :]
        check_declared_size(frame, member.end, what)
        try:
            with dicts.decompressor(header.dict_id).stream_reader(frame, read_size=len(frame)) as reader:
                head = reader.read(head_end)
                body = reader.read(member.body_size)
        except zstd.ZstdError as exc:
            raise ChecksumMismatch(f"group frame does not decompress: {exc}") from exc
        # a frame ending early leaves both short: their lengths no longer add up to the member's
        check_member(member, what, memoryview(head)[member.start :], body)
        return body, head[member.start :]

    def group_content(
        self,
        header: GroupHeader,
        frame: memoryview | bytes,
        upto: int,
        frame_ok: bool,
        start: int = 0,
        dicts: DictionaryStore | DictCodecs | None = None,
    ) -> memoryview:
        """Bytes ``start:upto`` of a group frame's decompressed content (fewer if a damaged frame ends early).

        Stops decompressing once ``upto`` is reached, so reading an early member does not pay
        for the later ones. An intact frame is decoded in one ``stream_reader.read`` straight
        into the result (a third cheaper than feeding slices to a decompressobj, ADR 002). A
        frame failing its checksum is fed in slices and decompressed as far as zstd gets: the
        members it yields are trusted only if their own checksums match.
        """
        if header.kind == KIND_GROUP_BZIP2:
            return _bzip2_group_content(frame, upto, frame_ok)[start:upto]
        dec = (dicts or self._dicts).decompressor(header.dict_id)
        if frame_ok:
            check_declared_size(frame, upto, "group frame")
            try:
                with dec.stream_reader(frame, read_size=len(frame)) as reader:
                    content = reader.read(upto)
            except zstd.ZstdError as exc:
                raise ChecksumMismatch(f"group frame does not decompress: {exc}") from exc
            if len(content) < upto:
                raise ChecksumMismatch(f"group frame holds {len(content)} bytes, its members need {upto}")
            return memoryview(content)[start:upto]
        dobj = dec.decompressobj()
        pieces: list[bytes] = []
        have = pos = 0
        try:
            while have < upto and pos < len(frame):
                piece = dobj.decompress(frame[pos : pos + _GROUP_READ_SLICE])
                pos += _GROUP_READ_SLICE
                pieces.append(piece)
                have += len(piece)
        except zstd.ZstdError:
            pass  # keep what decoded before the damage
        return memoryview(b"".join(pieces))[start:upto]

    def reference_metas(self, entries: Iterable[Entry]) -> dict[str, dict[str, Any]]:
        """url -> the metadata of its own reference record, for entries whose body is stored once
        under another URL (the index locates that record only by segment): each such segment is
        read once. Entries without one, or whose record is gone (moved or compacted meanwhile),
        are left out."""
        wanted: dict[str, dict[tuple[int, int], str]] = defaultdict(dict)
        for e in entries:
            if e.record_segment:
                wanted[e.record_segment][(e.url_key, e.seq)] = e.url
        found: dict[str, dict[str, Any]] = {}
        for segment, keys in wanted.items():
            try:
                data = self._segments.read_all(segment)
            except (OSError, ChecksumMismatch):
                continue  # removed by maintenance since the entry was read
            for item in scan_records(data):
                header = item.header
                if isinstance(header, RecordHeader):
                    if header.kind != KIND_REF or (header.url_key, header.seq) not in keys:
                        continue
                elif header is None or not any(m.kind == KIND_REF for m in header.members):
                    continue
                with self._lock:
                    records, _ = self.decode_item(segment, item, data)
                for record, _loc in records:
                    url = keys.get((record.url_key, record.seq))
                    if url is not None and record.meta is not None:
                        found[url] = record.meta
        return found

    # ------------------------------------------------------------------ whole records (scans)

    def decode_item(self, name: str, item: ScanItem, data: bytes) -> tuple[list[tuple[RecordHeader, Location]], int]:
        """The records of one scanned record (one, or a group's members), with their metadata.

        Damaged parts are quarantined (a whole single record, or the group members failing
        their checksums) and left out. Returns (records, damaged members or records).
        Callers hold the store lock.
        """
        header = item.header
        assert header is not None
        tier = name.split("/", 1)[0]
        end = item.offset + item.length
        frame = memoryview(data)[item.offset + header.header_size : end]
        if isinstance(header, RecordHeader):
            try:
                full = self._with_meta(header, frame)
            except ChecksumMismatch as exc:
                self._quarantine.add(name, item.offset, item.length, str(exc), data[item.offset : end])
                return [], 1
            return [(full, Location(name, item.offset, item.length, header.dict_id, tier))], 0
        try:
            self._dicts.decompressor(header.dict_id)
        except ChecksumMismatch as exc:  # its dictionary is missing or corrupt: no member can be read
            self._quarantine.add(name, item.offset, item.length, str(exc), data[item.offset : end])
            return [], len(header.members)
        try:
            content = self.group_content(header, frame, header.content_size, item.frame_ok)
        except ChecksumMismatch:
            # The frame passed its checksum but does not hold what the member table says (a
            # collision in one of them): salvage member by member, as for a damaged frame.
            content = self.group_content(header, frame, header.content_size, False)
        out: list[tuple[RecordHeader, Location]] = []
        damaged = 0
        bad = self._quarantine.members(name, item.offset)
        for i in range(len(header.members)):
            if i in bad:
                damaged += 1
                continue
            try:
                rec = self._member_record(header, i, content)
            except ChecksumMismatch as exc:
                self._quarantine.add(name, item.offset, item.length, str(exc), data[item.offset : end], member=i)
                damaged += 1
                continue
            out.append((rec, Location(name, item.offset, item.length, header.dict_id, tier, i)))
        return out, damaged

    def _member_record(self, header: GroupHeader, index: int, content: memoryview) -> RecordHeader:
        """Member ``index`` of a group as a record header with its metadata (checked by its checksum)."""
        member = header.members[index]
        piece = content[member.start : member.end]
        check_member(member, f"group member {index}", piece)
        meta = decode_meta(piece[: member.meta_len])
        try:
            url_key = self._key_of(str(meta["u"]))
            if member.kind == KIND_BODY:
                chash, raw_size = content_hash(piece[member.meta_len :]), member.body_size
            else:
                chash, raw_size = bytes.fromhex(meta["h"]), int(meta["z"])
            seq, fetched = int(meta["q"]), int(meta["f"])
        except (KeyError, TypeError, ValueError, BadDataError) as exc:
            raise ChecksumMismatch(f"group member {index} has incomplete metadata: {exc!r}") from exc
        return RecordHeader(
            member.kind, header.dict_id, url_key, seq, fetched, raw_size, 0, chash, 0, member.meta_len, meta=meta
        )

    def _with_meta(self, header: RecordHeader, frame: bytes | memoryview) -> RecordHeader:
        """The header completed with the metadata decompressed from its frame (rebuild/recovery)."""
        try:
            content = decompress_single(self._dicts.decompressor(header.dict_id), frame, header.content_size)
        except zstd.ZstdError as exc:
            raise ChecksumMismatch(f"record frame does not decompress: {exc}") from exc
        if len(content) != header.content_size:
            raise ChecksumMismatch(f"record frame holds {len(content)} bytes, header says {header.content_size}")
        return dataclasses.replace(header, meta=decode_meta(content[: header.meta_len]))


def decompress_single(dec: zstd.ZstdDecompressor, frame: bytes | memoryview, size: int) -> bytes:
    """The content of a single record's frame: one zstd frame, or the metadata's frame and the
    body's back to back (``_codec``). At most ``size`` + 1 bytes: more is damage, seen by the
    caller's size check."""
    content = dec.decompress(frame, max_output_size=size)
    if len(content) < size:  # decompress() stops after the first frame: read across them
        with dec.stream_reader(frame, read_size=len(frame), read_across_frames=True) as reader:
            content = reader.read(size + 1)
    return content


class Bzip2Groups:
    """The bzip2 groups read last, each decoded only as far as a read has needed so far.

    A member's read decodes its group from the start (bzip2 cannot seek), so readers that take
    a group's pages one after another (WARC export in URL order, maintenance moving them) would
    decode it once per page: 30x the CPU on the synthetic web's groups. The last ``size`` groups
    keep their decoder and what it produced (about 1 MiB, plus ~3.6 MB of decoder state until
    the stream ends). Keyed by the frame's checksum too: a segment number can come back after
    its file was removed. Decoding holds a lock: bzip2 reads are the archive tier's, rare.
    """

    def __init__(self, size: int = 2) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._groups: OrderedDict[tuple[str, int, int], tuple[bz2.BZ2Decompressor, bytes]] = OrderedDict()

    def prefix(self, key: tuple[str, int, int], frame: bytes | memoryview, upto: int) -> bytes:
        """At least the first ``upto`` bytes of the (checked) frame's content."""
        with self._lock:
            dec, content = self._groups.pop(key, (None, b""))
            try:
                if dec is None:
                    dec = bz2.BZ2Decompressor()
                    content = dec.decompress(frame, max_length=upto)
                elif len(content) < upto and not dec.eof:
                    content += dec.decompress(b"", max_length=upto - len(content))
            except (OSError, EOFError, ValueError) as exc:
                raise ChecksumMismatch(f"group frame does not decompress: {exc}") from exc
            if len(content) < upto:
                raise ChecksumMismatch(f"group frame holds {len(content)} bytes, its members need {upto}")
            self._groups[key] = (dec, content)
            while len(self._groups) > self._size:
                self._groups.popitem(last=False)
            return content


def _bzip2_group_content(frame: bytes | memoryview, upto: int, frame_ok: bool) -> memoryview:
    """``RecordReader.group_content`` of a bzip2 frame, decoding stopped at ``upto``: an intact
    frame must yield all of it (ChecksumMismatch otherwise), a damaged one yields what decodes."""
    dobj = bz2.BZ2Decompressor()
    pieces: list[bytes] = []
    have = pos = 0
    try:
        while have < upto and pos < len(frame) and not dobj.eof:
            piece = dobj.decompress(frame[pos : pos + _GROUP_READ_SLICE], max_length=upto - have)
            pos += _GROUP_READ_SLICE
            pieces.append(piece)
            have += len(piece)
    except (OSError, EOFError, ValueError) as exc:
        if frame_ok:
            raise ChecksumMismatch(f"group frame does not decompress: {exc}") from exc
    if frame_ok and have < upto:
        raise ChecksumMismatch(f"group frame holds {have} bytes, its members need {upto}")
    return memoryview(b"".join(pieces))


def check_declared_size(frame: bytes | memoryview, needed: int, what: str) -> None:
    """ChecksumMismatch if a checksummed frame declares less content than a member table needs.

    ``stream_reader.read(n)`` allocates ``n`` bytes up front, and ``n`` comes from the member
    table, which only a crc32 guards: a collision there must not become a 4 GiB allocation.
    """
    try:
        declared = zstd.frame_content_size(frame)
    except zstd.ZstdError as exc:
        raise ChecksumMismatch(f"{what} has no valid zstd frame header: {exc}") from exc
    if 0 <= declared < needed:
        raise ChecksumMismatch(f"{what} holds {declared} bytes, its members need {needed}")


def check_member(member: Member, what: str, *parts: bytes | memoryview) -> None:
    """ChecksumMismatch unless ``parts`` (consecutive pieces) are the whole member and match its checksum."""
    if sum(map(len, parts)) != member.end - member.start or member_checksum(*parts) != member.checksum:
        raise ChecksumMismatch(f"{what} fails its checksum")
