"""The segment files: naming, the active hot segment puts append to, and the ones maintenance writes.

Owns ``<root>/segments/<tier>/<n>.seg``: numbers are global across tiers (a new segment
takes the highest number + 1), names are ``"<tier>/<n>.seg"`` (what a ``Location`` holds).
Segments a maintenance batch is still writing are *in flight*: garbage collection skips them.
Callers hold the store lock around ``active_writer``, ``allocate`` and ``discard`` (puts and
maintenance number their segments under it).

Archive tier on object storage (``store.archive_uri``, ADR 029): an archive segment a batch wrote
is uploaded whole as the object ``<name>`` under the store's archive prefix before the swap points
pages at it, then its local copy is removed (``offload``). ``remote`` holds the archive segments
kept as objects (listed once at open); a page keeps the same segment name wherever the segment
is, so the index never changes when a segment moves. A read of a remote record is one ranged GET
through a kept-open handle per object (opening one costs a HEAD).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.objectstore import is_checksum_failure
from crawlstream.store._config import StoreConfig
from crawlstream.store._files import AppendFile, ReadCache

if TYPE_CHECKING:
    import pyarrow as pa

    from crawlstream.objectstore import ObjectStore

__all__ = ["SegmentDamaged", "SegmentMissing", "Segments"]

logger = logging.getLogger(__name__)

ARCHIVE_TIER = "archive"


class SegmentDamaged(ChecksumMismatch):
    """Object storage refused a read of an archive segment: the object fails its stored checksum."""


class SegmentMissing(ChecksumMismatch):
    """A segment the index points into is gone (an archive object deleted behind the store's back):
    its pages are lost until re-fetched, like damaged ones, but nothing is quarantined."""


class Segments:
    def __init__(
        self, root: Path, config: StoreConfig, *, read_fds: int = 256, archive: ObjectStore | None = None
    ) -> None:
        self.directory = root / "segments"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._config = config
        # descriptors of the reading path (puts' thread and readers), at most read_fds open
        self.reads = ReadCache(max_open=read_fds)
        self.in_flight: set[str] = set()
        self._active: AppendFile | None = None
        self.active_name = ""
        self.archive = archive
        self.remote: dict[str, int] = {}  # archive segments held as objects: name -> size
        self._handles: OrderedDict[str, pa.NativeFile] = OrderedDict()
        self._max_handles = max(4, read_fds)
        self._handles_lock = threading.Lock()
        if archive is not None:
            self._list_remote(archive)

    def _list_remote(self, archive: ObjectStore) -> None:
        """Learn which archive segments are objects (one LIST); settle what a kill during uploads left.

        A local archive segment whose object has the same size was uploaded whole and the process
        died before removing the copy: the object is the segment from now on. One of another size
        is an object a batch did not finish with (never pointed at): the local file wins.
        """
        self.remote = {o.rel: o.size for o in archive.list(ARCHIVE_TIER) if o.rel.endswith(".seg")}
        # A segment over 64 MiB goes up in parts: a kill mid-upload leaves an invisible upload. The
        # writer lock makes this process the only one uploading under this prefix: abort them all.
        if aborted := archive.abort_stale_uploads(0):
            logger.warning("aborted %d unfinished archive uploads under %s", aborted, archive)
        for path in self.local_files():
            name = self.name(path)
            if name not in self.remote:
                continue
            if path.stat().st_size == self.remote[name]:
                path.unlink()
            else:
                logger.warning("archive object %s differs from the local segment: the local one is kept", name)
                archive.delete(name)
                del self.remote[name]

    def local_files(self) -> list[Path]:
        return sorted(p for p in self.directory.glob("*/*.seg") if p.is_file())

    def names(self) -> list[str]:
        """Every segment, local files and archive objects, in name order."""
        return sorted({self.name(p) for p in self.local_files()} | set(self.remote))

    def sizes(self) -> dict[str, int]:
        found = {self.name(p): p.stat().st_size for p in self.local_files()}
        found.update(self.remote)
        return found

    def exists(self, name: str) -> bool:
        return name in self.remote or self.path(name).exists()

    def is_remote(self, name: str) -> bool:
        return name in self.remote

    def read_all(self, name: str) -> bytes:
        """The whole segment (one GET for an object); ``SegmentMissing`` if it is gone."""
        if name in self.remote:
            assert self.archive is not None
            try:
                return self.archive.read(name)
            except FileNotFoundError as exc:
                raise SegmentMissing(f"archive segment {name} is missing from {self.archive}") from exc
        return self.path(name).read_bytes()

    def pread(self, name: str, offset: int, length: int, reads: ReadCache | None = None) -> bytes:
        """``length`` bytes at ``offset`` of segment ``name``: a ``pread`` (``reads``: a maintenance
        thread's own descriptors), or one ranged GET of an archive object."""
        if name not in self.remote:
            try:
                return (reads or self.reads).pread(self.path(name), offset, length)
            except StorageUnavailable as exc:
                if name in self.remote:  # offloaded between the check and the read
                    return self._remote_pread(name, offset, length)
                if self.archive is not None and name.startswith(f"{ARCHIVE_TIER}/") and not self.exists(name):
                    raise SegmentMissing(
                        f"archive segment {name} is missing from {self.archive} (and not local): its pages are lost "
                        "until re-fetched; run `crawlstream store verify`"
                    ) from exc
                raise
        return self._remote_pread(name, offset, length)

    def _remote_pread(self, name: str, offset: int, length: int) -> bytes:
        assert self.archive is not None
        with self._handles_lock:
            handle = self._handles.get(name)
            if handle is not None:
                self._handles.move_to_end(name)
        if handle is None:
            try:
                handle = self.archive.open_input(name)  # one HEAD, outside the lock
            except FileNotFoundError as exc:
                raise SegmentMissing(
                    f"archive segment {name} is missing from {self.archive}: its pages are lost until "
                    "re-fetched; run `crawlstream store verify`"
                ) from exc
            with self._handles_lock:
                self._handles[name] = handle
                while len(self._handles) > self._max_handles:
                    self._handles.popitem(last=False)  # not closed: a reader may be using it; freed with it
        try:
            return self.archive.read_range(handle, name, offset, length)
        except OSError as exc:
            if is_checksum_failure(exc):
                raise SegmentDamaged(f"archive segment {name} at {offset}: {exc}") from exc
            raise

    def upload(self, name: str) -> None:
        """Copy the finished, synced archive segment ``name`` to its object (before the swap)."""
        assert self.archive is not None
        self.archive.upload(name, self.path(name))

    def offload_local_archive(self) -> list[str]:
        """Upload and offload the archive segments still local though an archive store is set: ones
        a kill left between a batch's writing and its uploads, whose records start-up recovery
        re-indexed (pages point at them). Called at open, after garbage collection, under the lock."""
        if self.archive is None:
            return []
        moved = []
        for path in self.local_files():
            name = self.name(path)
            if path.parent.name != ARCHIVE_TIER or name in self.in_flight or name == self.active_name:
                continue
            self.upload(name)
            self.offload(name)
            moved.append(name)
        if moved:
            logger.info("archive segments left local by an interrupted batch uploaded: %s", ", ".join(moved))
        return moved

    def offload(self, name: str) -> None:
        """After the swap: reads of ``name`` go to its object, and the local copy is removed. Under the lock."""
        path = self.path(name)
        self.remote[name] = path.stat().st_size
        self.reads.forget(path)
        path.unlink()

    def name(self, path: Path) -> str:
        return f"{path.parent.name}/{path.name}"

    def path(self, name: str) -> Path:
        return self.directory / name

    def new_path(self, tier: str) -> Path:
        numbers = [int(p.stem) for p in self.directory.glob("*/*.seg") if p.stem.isdigit()]
        numbers += [int(Path(n).stem) for n in self.remote if Path(n).stem.isdigit()]
        number = max(numbers, default=0) + 1
        directory = self.directory / tier
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{number:010d}.seg"

    def active_writer(self) -> AppendFile:
        """The hot segment puts append to; rolled (synced, closed, a new one) at ``segment_bytes``."""
        if self._active is not None and self._active.size >= self._config.segment_bytes:
            self._active.sync()
            self._active.close()
            self._active = None
        if self._active is None:
            path = self.new_path("hot")
            self._active = AppendFile(path, fsync_each=self._config.fsync_each)
            self.active_name = self.name(path)
        return self._active

    def has_active(self) -> bool:
        return self._active is not None

    def allocate(self, tier: str) -> AppendFile:
        """A new segment for a maintenance batch, in flight (kept from garbage collection) until swapped in."""
        writer = AppendFile(self.new_path(tier), fsync_each=False)
        self.in_flight.add(self.name(writer.path))
        return writer

    def discard(self, writers: list[AppendFile]) -> None:
        """Delete a batch's new segments (cancelled or failed before the swap)."""
        for w in writers:
            w.close()
            w.path.unlink(missing_ok=True)
            self.in_flight.discard(self.name(w.path))

    def remove(self, name: str) -> None:
        """Delete one segment file (garbage); closes the active segment if it is this one."""
        if name == self.active_name and self._active is not None:
            self._active.close()  # nothing live in it: the next put starts a new segment
            self._active = None
            self.active_name = ""
        if name in self.remote:
            assert self.archive is not None
            self.archive.delete(name)
            del self.remote[name]
            with self._handles_lock:
                self._handles.pop(name, None)
            self.path(name).unlink(missing_ok=True)
            return
        path = self.path(name)
        self.reads.forget(path)
        path.unlink()

    def sync(self) -> None:
        if self._active is not None:
            self._active.sync()

    def close(self) -> None:
        if self._active is not None:
            self._active.close()
            self._active = None
        self.reads.close()
        with self._handles_lock:
            self._handles.clear()
