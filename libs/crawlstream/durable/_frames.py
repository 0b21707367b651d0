"""Length + CRC32 record framing: the one codec of every append-only log of frames. Pure.

A frame is ``payload_len u32 | crc32(payload) u32 | payload`` (``zlib.crc32`` over the payload
only). The header's byte order is the caller's choice, as each file format fixed it when it
was first written; nothing else differs. ``iter_frames`` walks the frames of a buffer:

* **Torn tail (one policy for every format).** The walk ends at the first frame it cannot
  delimit: fewer than 8 header bytes left, a length outside the format's ``min_size`` ..
  ``max_size``, or a payload that runs past the end of the data. What was appended after the
  last delimited frame is a write cut short by a crash: the caller truncates the file at the
  ``end`` of the last frame it keeps, so later appends are not hidden behind it.
* **Damage (a frame that can be delimited but fails its CRC)** is never dropped silently: it
  is yielded with ``intact=False``. The format decides what it means (below): skip it and
  count it, or treat it as the end of the good data like a torn tail.

The formats that use it, and what each does:

========================= ========== =========================== =========================================
format                    byte order payload size bounds         a frame failing its CRC
========================= ========== =========================== =========================================
content store logs        little     none                        skipped and counted; the walk goes on
(ops.log, quarantine.log,                                        (``store._logs.read_log`` logs the count);
dicts.log;                                                       a torn tail is truncated at start-up
``store._codec``)
frontier files and lanes  little     fixed fields .. + 1 MiB URL ends the good data: ``reconcile`` cuts
(``frontier._records``;                                          the file there (as a torn tail)
after a 20-byte header)
revisit files             little     fixed fields .. 64 KiB      ends the good data: cut before the first
(``politeness._revisit``)                                        append of a process (as a torn tail)
frontier append marks     little     16 bytes .. 64 MiB          ends the good data: ``read`` cuts the
(``frontier._marks``)                                            file there (as a torn tail)
parquet-sink staging log  big        none                        ends the good data: ``replay`` truncates
(``lake._staging``)                                              the log there, with a warning
========================= ========== =========================== =========================================

A payload the format cannot decode although its CRC matched is the format's business too
(same treatment as a CRC failure in each, except the staging log, which raises).
The embedded bus log (``bus._embedded_log``) is not one of these: its batches frame a Kafka-like
record (offset, timestamp, key, value) with the CRC over everything after the CRC field.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import BinaryIO, Literal, NamedTuple

__all__ = ["FRAME_HEADER_SIZE", "ByteOrder", "Frame", "encode_frame", "iter_frames"]

ByteOrder = Literal["little", "big"]
_HEADERS: dict[str, struct.Struct] = {"little": struct.Struct("<II"), "big": struct.Struct(">II")}
FRAME_HEADER_SIZE = 8


class Frame(NamedTuple):
    """One delimited frame: where it starts and ends (counted from ``base_offset``), its payload,
    and whether the payload matches its CRC."""

    offset: int
    end: int
    payload: memoryview
    intact: bool


def encode_frame(payload: bytes, *, byteorder: ByteOrder = "little") -> bytes:
    """``payload`` with its length and crc32 in front."""
    return _HEADERS[byteorder].pack(len(payload), zlib.crc32(payload)) + payload


def iter_frames(
    source: bytes | bytearray | memoryview | BinaryIO,
    *,
    byteorder: ByteOrder = "little",
    base_offset: int = 0,
    min_size: int = 0,
    max_size: int | None = None,
) -> Iterator[Frame]:
    """The frames of ``source`` (a buffer, or a binary file read from its position to its end)
    in order, up to the torn tail (see the module docstring). Offsets are ``base_offset`` plus
    the position in ``source``; a payload is a view into it."""
    view = memoryview(source.read() if hasattr(source, "read") else source)
    header = _HEADERS[byteorder]
    crc32 = zlib.crc32
    most = len(view) if max_size is None else max_size
    pos = 0
    end = len(view)
    while end - pos >= FRAME_HEADER_SIZE:
        length, crc = header.unpack_from(view, pos)
        start = pos + FRAME_HEADER_SIZE
        stop = start + length
        if length < min_size or length > most or stop > end:
            return
        payload = view[start:stop]
        yield Frame(base_offset + pos, base_offset + stop, payload, crc32(payload) == crc)
        pos = stop
