"""``index/manifest.json``: which index version is current, flipped atomically.

The manifest lists, for each kept version, the exact relative path of every file a reader
opens, so a request never lists a directory (the seed's glob cost ~120 ms per request).
Pins (local disk): each version directory holds a ``PIN`` file; a process that serves a version
holds a shared ``flock`` on it (released by the kernel if the process dies, so liveness needs no
pid checks); ``gc`` removes a version only if it can take the lock exclusively. On S3 there are
no flocks: the flip is a compare-and-swap on the manifest's ETag (``publish_manifest``) and gc
waits ``index.gc_grace_s`` after a version stopped being current (``retired_at``; ADR 029).
"""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawlstream import durable
from crawlstream.durable import write_atomically
from crawlstream.errors import StorageUnavailable, TransientError

if TYPE_CHECKING:
    from crawlstream.objectstore import ObjectStore

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_REL",
    "PIN_NAME",
    "Manifest",
    "ManifestConflict",
    "VersionInfo",
    "index_dir",
    "publish_manifest",
    "read_manifest",
    "read_manifest_tagged",
    "retired_at",
    "try_lock_exclusive",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_REL = f"index/{MANIFEST_NAME}"  # relative to the index's location
PIN_NAME = "PIN"
FORMAT = 1


class ManifestConflict(TransientError):
    """Another builder flipped the manifest first (S3 compare-and-swap lost): this build's
    version was not published; its unreferenced directory is removed by ``index gc``."""


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


def retired_at(manifest: Manifest, version: str) -> float | None:
    """When ``version`` stopped being current (epoch s): the flip of the version listed before it
    (``stats.flipped_at``, else its ``created_at``); None while it is current or unknown."""
    names = [v.version for v in manifest.versions]
    if version == manifest.current_version or version not in names:
        return None
    i = names.index(version)
    if i == 0:
        return None
    successor = manifest.versions[i - 1]
    flipped = successor.stats.get("flipped_at")
    if flipped is not None:
        return float(flipped)
    return float(calendar.timegm(time.strptime(successor.created_at, "%Y-%m-%dT%H:%M:%SZ")))


def read_manifest_tagged(store: ObjectStore) -> tuple[Manifest, str] | None:
    """The manifest and its tag (ETag on S3) for a compare-and-swap, or None if there is none."""
    found = store.read_tagged(MANIFEST_REL)
    return None if found is None else (Manifest.from_bytes(found[0]), found[1])


def publish_manifest(store: ObjectStore, manifest: Manifest, tag: str | None) -> bool:
    """Flip by compare-and-swap: only if the manifest is still the one tagged ``tag`` (None: only
    if there is none). False: another writer flipped first (nothing was written)."""
    return store.replace_if(MANIFEST_REL, manifest.to_bytes(), tag)


def read_manifest(root: Path | ObjectStore) -> Manifest | None:
    if not isinstance(root, Path):
        try:
            return Manifest.from_bytes(root.read(MANIFEST_REL))
        except FileNotFoundError:
            return None
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
