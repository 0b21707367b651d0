"""Test helpers: an index built locally (as the builder does today) uploaded to the real S3
server under the same relative paths, and a reader over it. Once the writers write through
``ObjectStore`` the tests can build on S3 directly; the layout is the same."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.index import IndexReader
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import load

_prefixes = itertools.count()


def s3_store(server: LocalS3, prefix: str | None = None, **overrides: str) -> ObjectStore:
    """The store of ``prefix`` (a fresh one if None) on ``server``; ``overrides``: more env settings."""
    if prefix is None:
        prefix = f"s3://crawlstream/fixture-{next(_prefixes)}-{id(server):x}"
    return open_objects(parse_location(prefix), load({**server.env, **overrides}).s3)


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
