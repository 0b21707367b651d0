"""The segment files: naming, the active hot segment puts append to, and the ones maintenance writes.

Owns ``<root>/segments/<tier>/<n>.seg``: numbers are global across tiers (a new segment
takes the highest number + 1), names are ``"<tier>/<n>.seg"`` (what a ``Location`` holds).
Segments a maintenance batch is still writing are *in flight*: garbage collection skips them.
Callers hold the store lock around ``active_writer``, ``allocate`` and ``discard`` (puts and
maintenance number their segments under it).
"""

from __future__ import annotations

from pathlib import Path

from crawlstream.store._config import StoreConfig
from crawlstream.store._files import AppendFile, ReadCache

__all__ = ["Segments"]


class Segments:
    def __init__(self, root: Path, config: StoreConfig, *, read_fds: int = 256) -> None:
        self.directory = root / "segments"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._config = config
        # descriptors of the reading path (puts' thread and readers), at most read_fds open
        self.reads = ReadCache(max_open=read_fds)
        self.in_flight: set[str] = set()
        self._active: AppendFile | None = None
        self.active_name = ""

    def files(self) -> list[Path]:
        return sorted(p for p in self.directory.glob("*/*.seg") if p.is_file())

    def sizes(self) -> dict[str, int]:
        return {self.name(p): p.stat().st_size for p in self.files()}

    def name(self, path: Path) -> str:
        return f"{path.parent.name}/{path.name}"

    def path(self, name: str) -> Path:
        return self.directory / name

    def new_path(self, tier: str) -> Path:
        numbers = [int(p.stem) for p in self.directory.glob("*/*.seg") if p.stem.isdigit()]
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
