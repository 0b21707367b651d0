"""The embedded bus's files besides the log: directory names, groups' offsets files, ``read_log_state``.

Topic and group names become directory names (``_check_name``). A group's committed offsets
live in ``groups/<group>/offsets*.json`` (one file per process of a shared log, see
``_embedded``), replaced atomically so they are read without a lock (``read_committed``, and
``read_log_state`` for a status page beside a running crawl).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawlstream.bus._base import TopicPartition
from crawlstream.bus._embedded_log import read_end_offset
from crawlstream.durable import write_atomically
from crawlstream.errors import BusUnavailable, ConfigError

__all__ = ["LogState", "offsets_file_name", "read_committed", "read_log_state"]

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_OFFSETS_GLOB = "offsets*.json"


def offsets_file_name(member: tuple[int, int]) -> str:
    """The offsets file a process writes: ``offsets.json`` for a whole group, else per member."""
    index, count = member
    return "offsets.json" if count == 1 else f"offsets.{index}-of-{count}.json"


def read_committed(group_dir: Path) -> dict[TopicPartition, int]:
    """A group's committed offsets on disk, without any lock: per partition, the value of the
    most recently written offsets file that has it (files are replaced atomically)."""
    found: list[tuple[int, str, Path]] = []
    for path in group_dir.glob(_OFFSETS_GLOB):
        if path.name.endswith(".tmp"):
            continue
        try:
            found.append((path.stat().st_mtime_ns, path.name, path))
        except FileNotFoundError:
            continue
    out: dict[TopicPartition, int] = {}
    for _, _, path in sorted(found):  # oldest first: newer files overwrite
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            raise BusUnavailable(
                f"unreadable offsets file {path}: {exc}; it is replaced atomically, so this is "
                "outside damage: delete it to restart the group from the beginning"
            ) from exc
        for topic, parts in raw.items():
            for p, offset in parts.items():
                out[TopicPartition(topic, int(p))] = int(offset)
    return out


def _check_name(kind: str, name: str) -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"invalid {kind} name {name!r}: expected 1-249 characters of [A-Za-z0-9._-] "
            "(it becomes a directory name); rename it"
        )
    return name


@dataclass(frozen=True)
class LogState:
    """What ``read_log_state`` found: log ends per topic (one per partition) and each group's
    committed offsets (``{group: {topic: {partition: next offset}}}``)."""

    end_offsets: dict[str, list[int]]
    committed: dict[str, dict[str, dict[int, int]]]


def read_log_state(root: Path) -> LogState:
    """Committed and end offsets of the embedded log at ``root`` (``<data_dir>/bus``), read-only.

    Takes no lock and writes nothing, so it is safe beside a running crawl of one or several
    processes (a status page); values are a moment's view (a batch being appended is not counted).
    """
    ends: dict[str, list[int]] = {}
    for meta_path in sorted((root / "topics").glob("*/meta.json")):
        try:
            partitions = int(json.loads(meta_path.read_text())["partitions"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        ends[meta_path.parent.name] = [read_end_offset(meta_path.parent / str(p)) for p in range(partitions)]
    committed: dict[str, dict[str, dict[int, int]]] = {}
    for group_dir in sorted(p for p in (root / "groups").glob("*") if p.is_dir()):
        by_topic: dict[str, dict[int, int]] = {}
        for tp, offset in sorted(read_committed(group_dir).items()):
            by_topic.setdefault(tp.topic, {})[tp.partition] = offset
        committed[group_dir.name] = by_topic
    return LogState(ends, committed)


def _write_json_atomic(path: Path, data: Any, *, fsync: bool) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # writers never share it
    write_atomically(path, json.dumps(data, sort_keys=True).encode(), fsync=fsync, tmp=tmp)
