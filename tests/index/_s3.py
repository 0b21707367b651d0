"""Helpers of the index's S3 tests: stores on the session's S3 server, settings whose lake and
index live there, a local mirror of an S3 tree (what was published), and an index built locally
uploaded under the same relative paths with a reader over it (the layout is the same)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexReader
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import Settings, load

_prefixes = itertools.count()


def s3_settings(server: LocalS3, prefix: str, tmp_path: Path, **env: str) -> Settings:
    """Settings whose lake (and index) live under ``prefix`` on ``server``."""
    return load({**server.env, "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"), "CRAWLSTREAM_LAKE_URI": prefix,
                 **env})


def s3_store(server: LocalS3, prefix: str | None = None, **overrides: str) -> ObjectStore:
    """The store of ``prefix`` (a fresh one if None) on ``server``; ``overrides``: more env settings."""
    if prefix is None:
        prefix = f"s3://crawlstream/fixture-{next(_prefixes)}-{id(server):x}"
    return open_objects(parse_location(prefix), load({**server.env, **overrides}).s3)


def mirror(store: ObjectStore, dest: Path) -> Path:
    """Every object of ``store`` copied to ``dest`` under the same relative path."""
    for o in store.list():
        path = dest / o.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.read(o.rel))
    return dest


def upload_tree(root: Path, store: ObjectStore, *, manifest_last: bool = True) -> int:
    """Upload every file under ``root`` (but hidden ones: locks, temp dirs) at its relative path;
    the manifest goes last, as a builder publishes it. Returns how many files."""
    files = [p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                    p.relative_to(root).parts)]
    files.sort(key=lambda p: (manifest_last and p.name == "manifest.json", p.as_posix()))
    for path in files:
        store.upload(path.relative_to(root).as_posix(), path)
    return len(files)


def s3_reader(root: Path, server: LocalS3, prefix: str | None = None, **kwargs: Any) -> IndexReader:
    """A reader of ``root``'s lake and index after uploading them to S3."""
    store = s3_store(server, prefix)
    upload_tree(root, store)
    return IndexReader(index_store=store, lake_store=store, **kwargs)
