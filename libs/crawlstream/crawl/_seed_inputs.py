"""The inputs of a bulk seeding (``SeedIntake``): URL arguments, files (plain or gzip) and stdin,
checked before anything is sent, and read as raw lines in 1 MiB chunks (memory does not grow
with the input; an overlong line is dropped as it streams past).
"""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from crawlstream.errors import ConfigError
from crawlstream.urls import MAX_URL_LENGTH

__all__ = ["SeedLines", "SeedSource", "is_url_spec", "open_seed_sources"]

_CHUNK_BYTES = 1 << 20
_MAX_LINE_BYTES = 4 * MAX_URL_LENGTH + 1024
"""A line longer than this (UTF-8 bytes) cannot canonicalize: dropped unread as ``length``."""
_BOM = b"\xef\xbb\xbf"


def is_url_spec(spec: str) -> bool:
    """A seed argument naming a URL (``scheme://...``), not a file or ``-``."""
    return "://" in spec


@dataclass
class SeedSource:
    """One input of a bulk seeding: a URL argument, a file (plain or gzip, detected by its
    magic bytes) or ``-`` (stdin). ``size_bytes`` is its size on disk (compressed), None when
    unknown (a pipe); progress and ETA count bytes of it as they are read."""

    spec: str
    size_bytes: int | None

    @property
    def is_url(self) -> bool:
        return is_url_spec(self.spec)


def open_seed_sources(specs: Sequence[str]) -> list[SeedSource]:
    """Check every input before anything is sent: ``ConfigError`` names a missing/unreadable file."""
    sources = []
    for spec in specs:
        if is_url_spec(spec):
            sources.append(SeedSource(spec, None))
            continue
        if spec == "-":
            try:
                st = os.fstat(sys.stdin.fileno())
                size = st.st_size if stat.S_ISREG(st.st_mode) else None
            except (OSError, ValueError, io.UnsupportedOperation):
                size = None
            sources.append(SeedSource(spec, size))
            continue
        path = Path(spec)
        try:
            st = path.stat()
            if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode):
                raise IsADirectoryError(f"{spec} is not a regular file")
            if not os.access(path, os.R_OK):
                raise PermissionError(f"{spec} is not readable")
        except OSError as exc:
            raise ConfigError(
                f"seed input {spec!r} is neither a URL (scheme://...), '-' (stdin) nor a readable file ({exc}); "
                "give URLs, files of one URL per line (gzip allowed) or '-'"
            ) from exc
        sources.append(SeedSource(spec, st.st_size if stat.S_ISREG(st.st_mode) else None))
    return sources


class SeedLines:
    """The raw lines (bytes, newline removed) of one binary stream, read in 1 MiB chunks.

    A line longer than ``_MAX_LINE_BYTES`` is never held whole: it is dropped as it streams
    past and counted in ``overlong``. ``position`` reports bytes consumed of the underlying
    (possibly compressed) file for progress.
    """

    def __init__(self, stream: BinaryIO, position: Callable[[], int]) -> None:
        self._stream = stream
        self.position = position
        self.overlong = 0

    def __iter__(self) -> Iterator[bytes]:
        # read1: at most one read of the file per call, so the lines before a corrupt or
        # truncated gzip tail come out before the error does (read(n) would lose them).
        read = getattr(self._stream, "read1", self._stream.read)
        carry = b""
        skipping = False  # inside an overlong line: drop up to the next newline
        first = True
        while chunk := read(_CHUNK_BYTES):
            if first:
                first = False
                if chunk.startswith(_BOM):
                    chunk = chunk[len(_BOM):]
            lines = chunk.split(b"\n")
            if skipping:
                if len(lines) == 1:
                    continue
                lines[0] = b""
                skipping = False
            else:
                lines[0] = carry + lines[0]
            carry = lines.pop()
            if len(carry) > _MAX_LINE_BYTES:
                carry = b""
                skipping = True
                self.overlong += 1
            yield from lines
        if carry:
            yield carry
