"""How far into ``urls.frontier`` a partition's frontier files reach, kept beside them (ADR 037).

The scheduler records the next ``urls.frontier[p]`` offset each append covers in Redis, in the
pipeline that stores the files' new sizes. Redis killed at the wrong moment (AOF, fsync every
second) comes back without its last pipelines: their bytes are adopted from the files on the next
touch (``FrontierFiles.reconcile``), but the Redis mark is behind them, so the replay that follows
appends the same URLs again and each is fetched twice (session 22: 11 repeats). The same holds
when the member dies between the file append and the pipeline.

So each append is also logged here, after the files and before Redis:
``<root>/<partition>/APPENDED``, one frame (``durable`` framing) per append: ``through u64 |
at_ms u64 | the domains appended, newline-separated``. The next owner of the partition reads
the frames ahead of the Redis mark: their domains are the ones whose Redis state may be lost
(a new domain's registration among them: without adopting it, its URLs would wait for ever),
and their highest ``through`` is where the replay stops being a replay.

The log is rewritten whole when it passes ``max_bytes``, keeping the frames of the last
``keep_s`` seconds: Redis loses at most its last fsync interval, far shorter than that. The name
cannot clash with a domain's directory (those are two hex digits).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from crawlstream.durable import FRAME_HEADER_SIZE, encode_frame, iter_frames, write_atomically
from crawlstream.errors import StorageUnavailable
from crawlstream.frontier._store import sync_files

__all__ = ["AppendMark", "AppendMarks"]

logger = logging.getLogger(__name__)

MARKS_NAME = "APPENDED"
_FIXED = struct.Struct("<QQ")
_MAX_PAYLOAD = 64 * 1024 * 1024


@dataclass(frozen=True)
class AppendMark:
    """One append: the next input offset it covers, when, and the domains whose files grew."""

    through: int
    at_ms: int
    domains: tuple[str, ...]


class AppendMarks:
    """The per-partition log of appends; one writer per partition (the scheduler that owns it)."""

    def __init__(
        self,
        root: Path,
        *,
        keep_s: float = 600.0,
        max_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root)
        self._keep_ms = int(keep_s * 1000)
        self._max_bytes = max_bytes
        self._limits: dict[int, int] = {}  # a busy partition's own, above max_bytes
        self._clock = clock
        self._dirty: set[int] = set()

    def path_for(self, partition: int) -> Path:
        return self.root / str(int(partition)) / MARKS_NAME

    def record(self, partition: int, through: int, domains: Iterable[str]) -> None:
        """Log an append whose file bytes are written (not yet fsynced: ``sync`` before a commit)."""
        path = self.path_for(partition)
        frame = _encode(AppendMark(through, int(self._clock() * 1000), tuple(domains)))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as fh:
                fh.write(frame)
                size = fh.tell()
        except OSError as exc:
            raise StorageUnavailable(f"cannot log an append to {path} ({exc})") from exc
        self._dirty.add(partition)
        if size > self._limits.get(partition, self._max_bytes):
            self._trim(partition)

    def read(self, partition: int, after: int = -1) -> list[AppendMark]:
        """The frames of ``partition``'s log whose ``through`` is past ``after`` (all by default);
        only theirs are decoded, since a new owner looks for the few past the Redis mark among
        up to megabytes of them. A tail cut short by a crash is cut off the file, so appends
        after it are not hidden behind it."""
        marks: list[AppendMark] = []
        data, frames = self._frames(partition)
        for through, at_ms, start, end in frames:
            if through > after:
                names = data[start + FRAME_HEADER_SIZE + _FIXED.size : end].decode()
                marks.append(AppendMark(through, at_ms, tuple(names.split("\n")) if names else ()))
        return marks

    def _frames(self, partition: int) -> tuple[bytes, list[tuple[int, int, int, int]]]:
        """The log's bytes and (through, at_ms, start, end) of each whole frame in them, the torn
        tail cut off the file."""
        path = self.path_for(partition)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return b"", []
        except OSError as exc:
            raise StorageUnavailable(f"cannot read {path} ({exc})") from exc
        frames: list[tuple[int, int, int, int]] = []
        end = 0
        for frame in iter_frames(data, min_size=_FIXED.size, max_size=_MAX_PAYLOAD):
            if not frame.intact:
                break  # damage ends the good data, like a torn tail
            through, at_ms = _FIXED.unpack_from(frame.payload)
            frames.append((through, at_ms, frame.offset, frame.end))
            end = frame.end
        if end < len(data):
            logger.warning("%s: %d bytes after the last whole frame cut off", path, len(data) - end)
            try:
                os.truncate(path, end)
            except OSError as exc:
                raise StorageUnavailable(f"cannot cut the torn tail of {path} ({exc})") from exc
        return data, frames

    def sync(self) -> None:
        """fsync the logs appended to since the last call, after the frontier files (a mark on
        disk should not claim more than the files hold); in parallel, as the files are."""
        dirty, self._dirty = sorted(self._dirty), set()
        sync_files([self.path_for(p) for p in dirty])

    def _trim(self, partition: int) -> None:
        """Rewrite the log with the frames of the last ``keep_s`` (at least the last frame)."""
        data, frames = self._frames(partition)
        since = int(self._clock() * 1000) - self._keep_ms
        kept = [(start, end) for _, at_ms, start, end in frames if at_ms >= since] or [f[2:] for f in frames[-1:]]
        # whole frames copied as they are: nothing decoded or encoded again
        body = b"".join(data[start:end] for start, end in kept)
        write_atomically(self.path_for(partition), body)
        # a partition busy enough to keep over half the limit trims at twice what it keeps, not
        # on every append; the others keep the configured limit
        self._limits[partition] = max(self._max_bytes, 2 * len(body))


def _encode(mark: AppendMark) -> bytes:
    return encode_frame(_FIXED.pack(mark.through, mark.at_ms) + "\n".join(mark.domains).encode())
