"""Record framing of the embedded log: how one record is laid out, encoded, decoded and verified.

``_embedded_log`` keeps segments, indexes and recovery; this module is the pure part it builds
on (bytes in, bytes or ``Message`` objects out, no files).

Record framing (little-endian; ``_RECORD``):

    length u32 | crc32 u32 | offset i64 | timestamp_ms i64 | key_len i32 (-1 = None)
    | value_len u32 | header_count u16 | key | value | headers

``length`` counts the bytes after the crc field; the crc (zlib.crc32) covers exactly those
bytes. Each header is ``name_len u16 | value_len u32 | name (UTF-8) | value``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from crawlstream.bus._base import Message

__all__ = [
    "RECORD_OVERHEAD_BYTES",
    "PendingRecord",
    "build_message",
    "decode_records",
    "encode_records",
]


_RECORD = struct.Struct("<IIqqiIH")
RECORD_OVERHEAD_BYTES = _RECORD.size
_PREFIX_BYTES = 8  # length + crc: what ``length`` does not count
_FIXED_AFTER_CRC = _RECORD.size - _PREFIX_BYTES
_BODY = struct.Struct("<qqiIH")  # the fixed part covered by the crc
_HEADER = struct.Struct("<HI")
_NO_TIMESTAMP = -(1 << 62)
# A record larger than this is not something we wrote: treat its length field as corrupt.
_MAX_RECORD_BYTES = 1 << 30

# (value, key, headers, timestamp_ms): what a producer buffers, before it has an offset.
PendingRecord = tuple[bytes, bytes | None, Sequence[tuple[str, bytes]], int]

_OK, _INCOMPLETE, _CORRUPT = 0, 1, 2

_MESSAGE_FIELDS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp_ms")


def _message_setters() -> tuple[Any, ...] | None:
    """Slot setters of ``Message``, to build one without its frozen ``__init__``.

    The generated ``__init__`` of a frozen dataclass costs ~0.8 us (7 ``object.__setattr__``
    lookups and calls), half of decoding a small record; setting the slots directly halves
    that. Used only while ``Message`` is exactly the slotted class this was written for
    (same fields, no ``__post_init__``); otherwise decoding calls the constructor.
    """
    slots = getattr(Message, "__slots__", ())
    if tuple(slots) != _MESSAGE_FIELDS or hasattr(Message, "__post_init__"):
        return None
    return tuple(Message.__dict__[name].__set__ for name in _MESSAGE_FIELDS)


_SETTERS = _message_setters()


def _message_builder() -> Callable[[str, int, int, bytes | None, bytes, tuple[tuple[str, bytes], ...], int], Message]:
    if _SETTERS is None:
        return Message
    set_topic, set_partition, set_offset, set_key, set_value, set_headers, set_ts = _SETTERS
    new = object.__new__

    def build(
        topic: str, partition: int, offset: int, key: bytes | None, value: bytes,
        headers: tuple[tuple[str, bytes], ...], timestamp_ms: int,
    ) -> Message:
        message = new(Message)
        set_topic(message, topic)
        set_partition(message, partition)
        set_offset(message, offset)
        set_key(message, key)
        set_value(message, value)
        set_headers(message, headers)
        set_ts(message, timestamp_ms)
        return message

    return build


build_message = _message_builder()


def encode_records(base_offset: int, records: Sequence[PendingRecord]) -> tuple[bytes, int]:
    """Frame ``records`` with consecutive offsets from ``base_offset``. Pure.

    Returns the bytes and the largest timestamp among the records.
    """
    out = bytearray()
    pack_body = _BODY.pack
    pack_prefix = struct.Struct("<II").pack
    crc32 = zlib.crc32
    max_ts = _NO_TIMESTAMP
    offset = base_offset
    for value, key, headers, ts in records:
        if ts > max_ts:
            max_ts = ts
        if headers:
            parts = []
            for name, hvalue in headers:
                raw_name = name.encode()
                parts.append(_HEADER.pack(len(raw_name), len(hvalue)))
                parts.append(raw_name)
                parts.append(hvalue)
            tail = value + b"".join(parts)
        else:
            tail = value
        if key is None:
            body = pack_body(offset, ts, -1, len(value), len(headers)) + tail
        else:
            body = pack_body(offset, ts, len(key), len(value), len(headers)) + key + tail
        out += pack_prefix(len(body), crc32(body))
        out += body
        offset += 1
    return bytes(out), max_ts


def decode_records(
    buf: bytes,
    pos: int,
    topic: str,
    partition: int,
    min_offset: int,
    max_count: int,
    out: list[Message],
) -> tuple[int, int, int]:
    """Decode records of ``buf`` from ``pos`` into ``out`` (at most ``max_count``). Pure.

    Records with an offset below ``min_offset`` are verified but not returned (a seek
    landed on an index entry before the wanted offset). Returns ``(pos, next_offset,
    status)``: where decoding stopped, the offset after the last record passed, and
    ``_OK`` (count reached or buffer consumed exactly), ``_INCOMPLETE`` (the buffer ends
    inside a record) or ``_CORRUPT`` (the record at ``pos`` fails its CRC or framing).
    """
    end = len(buf)
    mv = memoryview(buf)
    unpack = _RECORD.unpack_from
    crc32 = zlib.crc32
    fixed = _RECORD.size
    count = 0
    next_offset = min_offset
    append = out.append
    new = object.__new__
    msg_class = Message
    if _SETTERS is not None:
        set_topic, set_partition, set_offset, set_key, set_value, set_headers, set_ts = _SETTERS
    while count < max_count:
        if pos + fixed > end:
            return pos, next_offset, (_OK if pos == end else _INCOMPLETE)
        length, crc, offset, ts, klen, vlen, nh = unpack(buf, pos)
        rec_end = pos + _PREFIX_BYTES + length
        if length < _FIXED_AFTER_CRC or length > _MAX_RECORD_BYTES:
            return pos, next_offset, _CORRUPT
        if rec_end > end:
            return pos, next_offset, _INCOMPLETE
        if crc32(mv[pos + _PREFIX_BYTES : rec_end]) != crc:
            return pos, next_offset, _CORRUPT
        p = pos + fixed
        if offset >= min_offset:
            if klen < 0:
                key = None
            else:
                key = buf[p : p + klen]
                p += klen
            value = buf[p : p + vlen]
            if nh:
                p += vlen
                headers = []
                for _ in range(nh):
                    nlen, hlen = _HEADER.unpack_from(buf, p)
                    p += 6
                    name = buf[p : p + nlen].decode()
                    p += nlen
                    headers.append((name, buf[p : p + hlen]))
                    p += hlen
                append(build_message(topic, partition, offset, key, value, tuple(headers), ts))
            elif _SETTERS is None:
                append(Message(topic, partition, offset, key, value, (), ts))
            else:  # build_message inlined: this is the hot path of every consumer
                message = new(msg_class)
                set_topic(message, topic)
                set_partition(message, partition)
                set_offset(message, offset)
                set_key(message, key)
                set_value(message, value)
                set_headers(message, ())
                set_ts(message, ts)
                append(message)
            count += 1
        next_offset = offset + 1
        pos = rec_end
    return pos, next_offset, _OK


def _peek(buf: bytes, pos: int) -> tuple[int, int, int, int] | None:
    """``(record_end, offset, timestamp_ms, status)`` of the record at ``pos``, verified."""
    if pos + _RECORD.size > len(buf):
        return None
    length, crc, offset, ts, _klen, _vlen, _nh = _RECORD.unpack_from(buf, pos)
    if length < _FIXED_AFTER_CRC or length > _MAX_RECORD_BYTES:
        return (pos, offset, ts, _CORRUPT)
    rec_end = pos + _PREFIX_BYTES + length
    if rec_end > len(buf):
        return (rec_end, offset, ts, _INCOMPLETE)
    if zlib.crc32(memoryview(buf)[pos + _PREFIX_BYTES : rec_end]) != crc:
        return (rec_end, offset, ts, _CORRUPT)
    return (rec_end, offset, ts, _OK)
