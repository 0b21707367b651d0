"""What a replay reads and where it writes: the target directory's state, the retention check,
and the progress line. Pure where it can be; the command (``crawlstream.cli._replay``) wires
the bus, the Parquet sink's handler and the index builder around it.

A replay directory holds ``replay.json`` from its first moment: the consumer group it reads
with, the topics, and whether it finished. That file is what makes an interrupted replay
resumable (same group: its committed offsets and the sink's staging log carry on) and what
tells a replay directory from any other non-empty directory, which is refused.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crawlstream.durable import write_atomically
from crawlstream.errors import ConfigError
from crawlstream.topics import REPLAY_SOURCES

__all__ = [
    "STATE_FILE",
    "ReplayProgress",
    "ReplayState",
    "check_retained",
    "prepare_target",
]

STATE_FILE = "replay.json"
GROUP_PREFIX = "crawlstream.replay."


@dataclass
class ReplayState:
    group: str
    topics: list[str]
    started_at_ms: int
    done: bool = False
    events: int = 0

    def save(self, into: Path) -> None:
        """Atomically (``write_atomically``: write, fsync, rename): a crash never leaves half a state file."""
        write_atomically(into / STATE_FILE, json.dumps(asdict(self)).encode("utf-8"))


def prepare_target(into: Path, topics: Sequence[str], *, from_beginning: bool = False) -> tuple[ReplayState, bool]:
    """The state to replay with, and whether it resumes an interrupted replay.

    ``into`` must not exist, be empty, or hold an unfinished replay of the same topics.
    ``from_beginning`` starts an unfinished replay over with a new group (its directory is
    emptied of what the replay wrote).
    """
    unknown = sorted(set(topics) - REPLAY_SOURCES)
    if unknown:
        raise ConfigError(
            f"--topics: replay rebuilds from {sorted(REPLAY_SOURCES)}; {unknown} are work topics "
            "whose state lives elsewhere and are not kept forever"
        )
    if into.exists() and not into.is_dir():
        raise ConfigError(f"--into {into}: expected a directory, found a file")
    entries = sorted(p.name for p in into.iterdir()) if into.is_dir() else []
    if entries and STATE_FILE not in entries:
        raise ConfigError(
            f"--into {into} is not empty ({', '.join(entries[:5])}{', ...' if len(entries) > 5 else ''}): "
            "replay writes a new lake and index into an empty directory; give another path"
        )
    if STATE_FILE in entries:
        previous = ReplayState(**json.loads((into / STATE_FILE).read_text(encoding="utf-8")))
        if previous.done and not from_beginning:
            raise ConfigError(f"--into {into} already holds a finished replay; give an empty directory")
        if sorted(previous.topics) != sorted(topics) and not from_beginning:
            raise ConfigError(
                f"--into {into} holds an unfinished replay of {previous.topics}, not {list(topics)}: "
                "run it with the same --topics to resume, or add --from-beginning to start over"
            )
        if not from_beginning:
            return previous, True
        _empty(into)
    into.mkdir(parents=True, exist_ok=True)
    state = ReplayState(GROUP_PREFIX + uuid.uuid4().hex[:12], list(topics), int(time.time() * 1000))
    state.save(into)
    return state, False


def _empty(directory: Path) -> None:
    import shutil

    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def check_retained(starts: Mapping[str, Sequence[int]]) -> None:
    """Refuse a replay that would silently rebuild less than was written: every partition of
    every topic must still start at offset 0."""
    cut = [(topic, p, offset) for topic, offsets in starts.items() for p, offset in enumerate(offsets) if offset > 0]
    if cut:
        listed = ", ".join(f"{t}[{p}] starts at {o}" for t, p, o in cut[:5])
        raise ConfigError(
            f"retention removed the beginning of the topics ({listed}{', ...' if len(cut) > 5 else ''}): a "
            "replay would rebuild only part of what was written. The replay sources must be created with "
            "retention.ms=-1 (the services create them so; ADR 011) — rebuild from the lake instead "
            "(crawlstream index build --full)"
        )


@dataclass
class ReplayProgress:
    """Events replayed against the total the topics held when the replay began, with a rate
    and an ETA for the progress line."""

    total: int
    done_before: int = 0
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    def update(self, done: int) -> None:
        self.done = done

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        fresh = self.done - self.done_before
        return fresh / elapsed if elapsed > 0 and fresh > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.rate
        return (self.total - self.done) / rate if rate > 0 else None

    def line(self) -> str:
        share = 100.0 * self.done / self.total if self.total else 100.0
        eta = self.eta_s
        eta_text = "--" if eta is None else f"{eta:,.0f} s"
        return f"replay: {self.done:,}/{self.total:,} events ({share:.1f}%), {self.rate:,.0f} events/s, ETA {eta_text}"
