"""Where an index version's bytes come from: memory-mapped local files, or objects on S3.

Why two sources behind one small interface (``read_small``, ``d2d_read``, ``block``, ``close``):

* **Local** (today's path, unchanged in speed): a version is pinned by a shared ``flock`` on its
  ``PIN`` file (``gc`` respects it); the domain-to-datasets file and the postings are memory
  mapped. The small files are checked against the manifest's CRC32 at open (cheap).
* **S3**: there is no mmap and no flock. At open the small files are read whole (one GET each,
  verified), the domain-to-datasets file too unless it is large (then ranges of it, in
  ``CHECKSUM_CHUNK`` pieces each verified by its own CRC32), and the postings' head (one HEAD to
  open the object, one GET for its block offsets). A postings block is then ONE ranged GET
  (its header carries a CRC32). A mismatch is read once more (a torn network read) and then
  raises ``ChecksumMismatch``: never a wrong answer. Every call goes through the reader's
  :class:`Breaker`, so an outage costs one request a deadline and the others fail at once.
"""

from __future__ import annotations

import fcntl
import io
import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

import pyarrow as pa

from crawlstream.errors import ChecksumMismatch, CrawlstreamError, StorageUnavailable
from crawlstream.index._formats import is_current_postings, postings_block, postings_head_size
from crawlstream.index._manifest import VersionInfo
from crawlstream.objectstore import ObjectStore

__all__ = ["Breaker", "LocalFiles", "Lru", "NotCached", "RangedFile", "RemoteFiles", "VersionGone"]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


class NotCached(Exception):
    """A ``cached_only`` pin needed bytes that are not in the reader's memory (a Parquet row
    group, or on S3 a postings block, a range of an index file, a manifest poll)."""


class VersionGone(CrawlstreamError):
    """The index version a request asked for was garbage-collected: the client starts over (410)."""


class Lru(Generic[K, V]):
    """A thread-safe LRU bounded by entries and, with ``weigh``, by the sum of the values' weights."""

    def __init__(self, capacity: int, *, budget: int = 0, weigh: Callable[[V], int] | None = None) -> None:
        self.capacity = capacity
        self.budget = budget
        self._weigh = weigh
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return None
            self._data.move_to_end(key)
            return found[0]

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        with self._lock:
            found = self._data.get(key)
            if found is not None:
                self._data.move_to_end(key)
                return found[0]
        value = load()
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            old = self._data.pop(key, None)  # another thread may have loaded it meanwhile
            self._weight += weight - (old[1] if old is not None else 0)
            self._data[key] = (value, weight)
            while len(self._data) > self.capacity or (self._weigh is not None and self._weight > self.budget):
                self._weight -= self._data.popitem(last=False)[1][1]
        return value

    def pop(self, key: K) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._weight -= old[1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weight = 0


class Breaker:
    """After object storage failed (a ``StorageUnavailable``: the store's retries ran out), calls
    fail at once; every ``probe_s`` one call (one at a time) tries again, and its success closes
    the breaker. During an outage one request at a time waits out the store's deadline and every
    other one is a fast 503; reads from memory go on."""

    def __init__(self, probe_s: float = 1.0) -> None:
        self.probe_s = probe_s
        self._lock = threading.Lock()
        self._failed = False
        self._probing = False
        self._down_until = 0.0
        self._cause = ""

    @property
    def down(self) -> bool:
        return self._failed

    def call(self, fn: Callable[[], T]) -> T:
        probe = False
        with self._lock:
            if self._failed:
                if self._probing or time.monotonic() < self._down_until:
                    raise StorageUnavailable(f"object storage unavailable (retried every {self.probe_s:g} s): "
                                             f"{self._cause}")
                self._probing = probe = True
        try:
            result = fn()
        except StorageUnavailable as exc:
            with self._lock:
                self._failed = True
                self._down_until = time.monotonic() + self.probe_s
                self._cause = str(exc)[:300]
                if probe:
                    self._probing = False
            raise
        except BaseException:
            if probe:
                with self._lock:
                    self._probing = False
            raise
        if self._failed:
            with self._lock:
                self._failed = self._probing = False
        return result


def _check(data: bytes, crc: int | None) -> bool:
    return crc is None or zlib.crc32(data) == crc


def _mismatch(what: str, data: bytes, crc: int | None) -> ChecksumMismatch:
    got = zlib.crc32(data)
    logger.error("checksum mismatch: %s has CRC32 %08x, the manifest records %08x", what, got, crc or 0)
    return ChecksumMismatch(f"{what}: CRC32 {got:08x} does not match the manifest's {crc or 0:08x}; the stored "
                            "object is corrupt: rebuild the index version (`crawlstream index build --full`)")


def _map(path: Path) -> mmap.mmap | None:
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


class LocalFiles:
    """A version in a local directory: PIN flock, memory maps, small files verified at open."""

    remote = False

    def __init__(self, root: Path, info: VersionInfo) -> None:
        files = info.files
        self._maps: list[mmap.mmap | None] = []
        self._pin_fd = os.open(root / files["pin"], os.O_RDONLY)
        try:
            fcntl.flock(self._pin_fd, fcntl.LOCK_SH)
            self._small: dict[str, bytes] = {}
            for role in ("domains", "files_tsv"):
                data = (root / files[role]).read_bytes()
                crc = info.checksum(role).get("crc32")
                if not _check(data, crc):
                    raise _mismatch(str(root / files[role]), data, crc)
                self._small[role] = data
            self.d2d = _map(root / files["d2d_roar"])
            self.postings = _map(root / files["postings"])
            self._maps = [self.d2d, self.postings]
        except BaseException:
            self.close()
            raise

    def read_small(self, role: str) -> bytes:
        return self._small.pop(role)

    def d2d_read(self, offset: int, length: int, cached_only: bool) -> bytes:
        if self.d2d is None:
            return b""  # a version without domains
        return self.d2d[offset : offset + length]

    def block(self, b: int) -> bytes:
        assert self.postings is not None
        return postings_block(self.postings, b)

    def close(self) -> None:
        for m in self._maps:
            if m is not None:
                m.close()
        self._maps = []
        if self._pin_fd >= 0:
            os.close(self._pin_fd)  # releases the shared lock
            self._pin_fd = -1


class RemoteFiles:
    """A version on S3: small files in memory, open handles (one HEAD each) for ranged reads."""

    remote = True

    def __init__(
        self, store: ObjectStore, info: VersionInfo, *, cache: Lru[Any, Any], breaker: Breaker, whole_max: int
    ) -> None:
        self._store = store
        self._info = info
        self._cache = cache
        self._breaker = breaker
        self._handles: list[pa.NativeFile] = []
        files = info.files
        try:
            self._small = {role: self._whole(role) for role in ("domains", "files_tsv")}
            d2d_sum = info.checksum("d2d_roar")
            size = d2d_sum.get("size")
            self._d2d: bytes | None = None
            self._d2d_handle: pa.NativeFile | None = None
            if size is None or size <= whole_max or not d2d_sum.get("chunks"):
                self._d2d = self._whole("d2d_roar")
            else:
                self._d2d_handle = self._open(files["d2d_roar"])
                self._d2d_size = int(size)
            self._postings = self._open(files["postings"])
            head_size = postings_head_size(info.shards)
            head_crc = info.checksum("postings").get("head_crc32")
            head = self._ranged(self._postings, files["postings"], 0, head_size, head_crc)
            if not is_current_postings(head[:8]):
                raise ChecksumMismatch(f"{store.uri(files['postings'])} is not a PST4 postings file; "
                                       "rebuild with `crawlstream index build --full`")
            self._offsets = struct.unpack_from(f"<{info.shards + 1}Q", head, 16)
        except BaseException:
            self.close()
            raise

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return self._breaker.call(fn)
        except FileNotFoundError:
            raise VersionGone(f"index version {self._info.version} is gone from {self._store} ({what}): "
                              "it was garbage-collected; start over") from None

    def _open(self, rel: str) -> pa.NativeFile:
        handle = self._breaker.call(lambda: self._store.open_input(rel))  # FileNotFoundError: not opened
        self._handles.append(handle)
        return handle

    def _whole(self, role: str) -> bytes:
        rel = self._info.files[role]
        crc = self._info.checksum(role).get("crc32")
        return self._verified(self._store.uri(rel), lambda: self._breaker.call(lambda: self._store.read(rel)), crc)

    def _ranged(self, handle: pa.NativeFile, rel: str, offset: int, length: int, crc: int | None) -> bytes:
        return self._verified(f"{self._store.uri(rel)} [{offset}+{length}]",
                              lambda: self._call(rel, lambda: self._store.read_range(handle, rel, offset, length)), crc)

    @staticmethod
    def _verified(what: str, fetch: Callable[[], bytes], crc: int | None) -> bytes:
        """``fetch()`` checked against ``crc``; a mismatch (ours, or the SDK's own check of a
        whole-object GET) is read once more, a torn network read, before it is an error."""
        for attempt in (0, 1):
            try:
                data = fetch()
            except ChecksumMismatch:
                if attempt:
                    raise
                logger.warning("%s failed its checksum; reading it again", what)
                continue
            if _check(data, crc):
                return data
            if attempt:
                raise _mismatch(what, data, crc)
            logger.warning("%s failed its checksum; reading it again", what)
        raise AssertionError("unreachable")

    def read_small(self, role: str) -> bytes:
        return self._small.pop(role)

    def d2d_read(self, offset: int, length: int, cached_only: bool) -> bytes:
        if self._d2d is not None:
            return self._d2d[offset : offset + length]
        sums = self._info.checksum("d2d_roar")
        chunk, crcs = int(sums["chunk"]), sums["chunks"]
        out = []
        for c in range(offset // chunk, (offset + length - 1) // chunk + 1 if length else offset // chunk):
            key = (self._info.version, "d2d", c)
            data = self._cache.get(key)
            if data is None:
                if cached_only:
                    raise NotCached(f"d2d chunk {c}")
                start = c * chunk
                size = min(chunk, self._d2d_size - start)
                rel = self._info.files["d2d_roar"]
                assert self._d2d_handle is not None
                data = self._ranged(self._d2d_handle, rel, start, size, crcs[c])
                self._cache.get_or_load(key, lambda data=data: data)  # type: ignore[misc]
            out.append(data)
        joined = b"".join(out)
        skip = offset % chunk
        return joined[skip : skip + length]

    def block(self, b: int) -> bytes:
        """Block ``b`` with one ranged GET (its own CRC is checked when it is decoded)."""
        if not 0 <= b < self._info.shards:
            raise IndexError(b)
        start, end = self._offsets[b], self._offsets[b + 1]
        rel = self._info.files["postings"]
        return self._call(rel, lambda: self._store.read_range(self._postings, rel, start, end - start))

    def close(self) -> None:
        for h in self._handles:
            h.close()
        self._handles = []


class RangedFile(io.RawIOBase):
    """A Parquet file on S3 as a Python file: every read is one ranged GET through the store
    (retries, deadline, request counts) and the reader's breaker. Parquet then reads a footer
    with one GET and, with ``pre_buffer``, a row group's columns with one coalesced GET."""

    def __init__(self, store: ObjectStore, handle: pa.NativeFile, rel: str, breaker: Breaker) -> None:
        super().__init__()
        self._store = store
        self._handle = handle
        self._rel = rel
        self._breaker = breaker
        self._size = handle.size()
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = 0 if whence == 0 else self._pos if whence == 1 else self._size
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self._pos
        n = max(0, min(n, self._size - self._pos))
        pos = self._pos
        data = self._breaker.call(lambda: self._store.read_range(self._handle, self._rel, pos, n))
        self._pos += len(data)
        return data

    def close(self) -> None:
        self._handle.close()
        super().close()
