"""``index/manifest.json``: which index version is current, flipped atomically.

The manifest lists, for each kept version, the exact relative path of every file a reader
opens, so a request never lists a directory (the seed's glob cost ~120 ms per request).
Pins: each version directory holds a ``PIN`` file; a process that serves a version holds a
shared ``flock`` on it (released by the kernel if the process dies, so liveness needs no
pid checks); ``gc`` removes a version only if it can take the lock exclusively.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawlstream import durable
from crawlstream.durable import write_atomically
from crawlstream.errors import StorageUnavailable

__all__ = [
    "MANIFEST_NAME",
    "PIN_NAME",
    "Manifest",
    "VersionInfo",
    "index_dir",
    "read_manifest",
    "try_lock_exclusive",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
PIN_NAME = "PIN"
FORMAT = 1


def index_dir(root: Path) -> Path:
    return root / "index"


@dataclass(frozen=True)
class VersionInfo:
    version: str
    created_at: str
    shards: int
    files: dict[str, Any]  # name -> relative path (postings: lists indexed by shard)
    stats: dict[str, Any]
    # file name -> {"size", "crc32", ...} (``_formats.file_checksums``); empty for older versions
    checksums: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "created_at": self.created_at,
            "shards": self.shards,
            "files": self.files,
            "stats": self.stats,
            "checksums": self.checksums,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VersionInfo:
        return cls(d["version"], d["created_at"], int(d["shards"]), dict(d["files"]), dict(d.get("stats", {})),
                   dict(d.get("checksums", {})))

    def checksum(self, role: str) -> dict[str, Any]:
        """The recorded checksums of file ``role`` (a key of ``files``), or {} (older versions)."""
        return dict(self.checksums.get(str(self.files[role]).rsplit("/", 1)[-1], {}))


@dataclass(frozen=True)
class Manifest:
    current_version: str
    versions: tuple[VersionInfo, ...]  # newest first; [0] is current
    parquet_root: str = "urls/"

    def current(self) -> VersionInfo:
        for v in self.versions:
            if v.version == self.current_version:
                return v
        raise StorageUnavailable(f"manifest names current version {self.current_version!r} but does not list it")

    def to_bytes(self) -> bytes:
        doc = {
            "format": FORMAT,
            "current_version": self.current_version,
            "parquet_root": self.parquet_root,
            "versions": [v.to_json() for v in self.versions],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        doc = json.loads(data)
        return cls(
            doc["current_version"],
            tuple(VersionInfo.from_json(v) for v in doc["versions"]),
            doc.get("parquet_root", "urls/"),
        )


def read_manifest(root: Path) -> Manifest | None:
    path = index_dir(root) / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageUnavailable(f"cannot read {path}: {exc}") from exc
    return Manifest.from_bytes(data)


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Flip: write a temp file, fsync, rename over manifest.json, fsync the directory."""
    write_atomically(index_dir(root) / MANIFEST_NAME, manifest.to_bytes())


def try_lock_exclusive(pin_path: Path) -> int | None:
    """An fd holding an exclusive lock on ``pin_path``, or None if some reader pins it
    (or the version directory is already gone)."""
    try:
        return durable.try_lock_exclusive(pin_path)
    except FileNotFoundError:
        return None
