"""Bounded Content-Encoding decoding: the decompression-bomb guard.

aiohttp's own decompression inflates whole network chunks with no output limit, so one
64 KiB chunk of a 1000:1 bomb becomes 64 MB before any cap applies. We read raw bytes
(``auto_decompress=False``) and inflate with an output limit per call, so memory never
exceeds the body cap plus one chunk. Pure: no I/O.
"""

from __future__ import annotations

import zlib
from typing import Protocol

try:  # brotli is optional; without it we do not advertise "br"
    import brotli as _brotli
except ImportError:  # pragma: no cover - depends on the environment
    _brotli = None

__all__ = ["ACCEPT_ENCODING", "BodyDecoder", "CorruptEncoding", "UnsupportedEncoding", "make_decoder"]

ACCEPT_ENCODING = "gzip, deflate, br" if _brotli is not None else "gzip, deflate"


class UnsupportedEncoding(ValueError):
    """The server used a Content-Encoding we did not ask for and cannot decode."""


class CorruptEncoding(ValueError):
    """The body is not valid in its Content-Encoding (brotli's own error stops here; zlib's
    ``zlib.error`` is left as it is, callers already catch it)."""


class BodyDecoder(Protocol):
    consumed_bytes: int  # compressed input bytes turned into output so far

    def feed(self, chunk: bytes) -> None:
        """Queue compressed input (call ``read`` until it returns b"" before feeding more)."""
        ...

    def read(self, limit_bytes: int) -> bytes:
        """Decode queued input into about ``limit_bytes`` (b"" when the queue is used up)."""
        ...


class _Identity:
    def __init__(self) -> None:
        self.consumed_bytes = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk

    def read(self, limit_bytes: int) -> bytes:
        out, self._pending = self._pending[:limit_bytes], self._pending[limit_bytes:]
        self.consumed_bytes += len(out)
        return out


class _Zlib:
    """gzip (possibly multi-member), zlib-wrapped deflate, or raw deflate."""

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._d = zlib.decompressobj(wbits)
        self._first = True
        self._done = False
        self._pending = b""
        self.consumed_bytes = 0

    def feed(self, chunk: bytes) -> None:
        if not self._done:
            self._pending += chunk

    def read(self, limit_bytes: int) -> bytes:
        while self._pending:
            data = self._pending
            try:
                part = self._d.decompress(data, limit_bytes)
            except zlib.error:
                if self._first and self._wbits == zlib.MAX_WBITS:
                    # "deflate" sent as raw deflate (a common server bug): retry raw.
                    self._wbits = -zlib.MAX_WBITS
                    self._d = zlib.decompressobj(self._wbits)
                    continue
                raise
            self._first = False
            rest = self._d.unconsumed_tail
            if self._d.eof:
                rest = self._d.unused_data
                if rest.startswith(b"\x1f\x8b") and self._wbits > zlib.MAX_WBITS:
                    self._d = zlib.decompressobj(self._wbits)  # next gzip member
                else:
                    rest, self._done = b"", True  # trailing garbage is ignored, as browsers do
            self.consumed_bytes += len(data) - len(rest)
            self._pending = rest
            if part:
                return part
        return b""


class _Brotli:
    def __init__(self) -> None:
        assert _brotli is not None
        self._d = _brotli.Decompressor()
        self._pending = b""
        self._drained = True
        self.consumed_bytes = 0

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk
        self.consumed_bytes += len(chunk)
        self._drained = False

    def read(self, limit_bytes: int) -> bytes:
        if self._drained:
            return b""
        data, self._pending = self._pending, b""
        try:
            out: bytes = self._d.process(data, output_buffer_limit=limit_bytes)
        except _brotli.error as exc:
            raise CorruptEncoding(f"body is not valid brotli ({exc})") from exc
        if not out:
            self._drained = True
        return out


def make_decoder(content_encoding: str) -> BodyDecoder:
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        return _Identity()
    if coding in ("gzip", "x-gzip"):
        return _Zlib(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return _Zlib(zlib.MAX_WBITS)
    if coding == "br" and _brotli is not None:
        return _Brotli()
    raise UnsupportedEncoding(f"Content-Encoding {content_encoding!r} is not supported (asked for {ACCEPT_ENCODING})")
