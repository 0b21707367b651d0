"""Helpers of the writers' S3 tests: stores on the session's S3 server, and a local mirror of an
S3 tree (this branch's reader serves local directories; the mirror shows what was published)."""

from __future__ import annotations

from pathlib import Path

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import Settings, load


def s3_settings(server: LocalS3, prefix: str, tmp_path: Path, **env: str) -> Settings:
    """Settings whose lake (and index) live under ``prefix`` on ``server``."""
    return load({**server.env, "CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"), "CRAWLSTREAM_LAKE_URI": prefix,
                 **env})


def s3_store(server: LocalS3, prefix: str, **env: str) -> ObjectStore:
    return open_objects(parse_location(prefix), load({**server.env, **env}).s3)


def mirror(store: ObjectStore, dest: Path) -> Path:
    """Every object of ``store`` copied to ``dest`` under the same relative path."""
    for o in store.list():
        path = dest / o.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.read(o.rel))
    return dest
