"""``index gc`` on S3: no PIN flocks there, so a grace period stands in for them (ADR 029).

A request pins the version it started on for at most ``api.request_timeout_s``; a version (and a
lake file a compaction retired) is deleted only ``index.gc_grace_s`` after it stopped being
current (``retired_at``: the flip of its successor), so no request can still be reading it.
Order: the manifest drops the versions first (a compare-and-swap, retried if a build flipped
meanwhile), then their objects go; a crash in between leaves unreferenced objects that the next
gc removes. Version directories no manifest lists (a build that crashed or lost the flip) go
once their newest object is older than the grace (a build in progress is younger). Multipart
uploads a killed writer left behind are aborted after an hour.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from crawlstream.index._manifest import (
    Manifest,
    ManifestConflict,
    VersionInfo,
    publish_manifest,
    read_manifest_tagged,
    retired_at,
)

if TYPE_CHECKING:
    from crawlstream.index._builder import GcResult, IndexBuilder

__all__ = ["STALE_UPLOAD_S", "gc_s3"]

logger = logging.getLogger(__name__)

STALE_UPLOAD_S = 3600.0  # an upload begun this long ago belongs to a dead writer
_CAS_ATTEMPTS = 5


def _drop_expired(builder: IndexBuilder, keep: int, now: float, result: GcResult) -> tuple[Manifest, list[VersionInfo]]:
    """Take the expired versions out of the manifest (compare-and-swap); (the manifest as read, removed)."""
    store, grace = builder.index_store, builder.index.gc_grace_s
    for _ in range(_CAS_ATTEMPTS):
        tagged = read_manifest_tagged(store)
        if tagged is None:
            return Manifest("", ()), []
        manifest, tag = tagged
        removed = []
        for v in manifest.versions[keep:]:
            since = retired_at(manifest, v.version)
            if since is not None and now - since >= grace:
                removed.append(v)
            else:
                result.pinned_versions.append(v.version)  # within its grace: a request may still read it
        if not removed:
            return manifest, []
        gone = {v.version for v in removed}
        kept = tuple(v for v in manifest.versions if v.version not in gone)
        if publish_manifest(store, Manifest(manifest.current_version, kept, manifest.parquet_root), tag):
            return manifest, removed
        result.pinned_versions.clear()  # a build flipped meanwhile: decide again on its manifest
    raise ManifestConflict(f"index gc: the manifest under {store} kept changing; run gc again")


def gc_s3(builder: IndexBuilder, keep: int) -> GcResult:
    from crawlstream.index._builder import GcResult

    result = GcResult()
    store, lake = builder.index_store, builder.lake_store
    now = builder.clock()
    grace = builder.index.gc_grace_s
    manifest, removed = _drop_expired(builder, keep, now, result)
    for v in removed:
        store.delete_prefix(f"index/{v.version}")
        result.removed_versions.append(v.version)
    listed = {v.version for v in manifest.versions}
    newest: dict[str, float] = defaultdict(float)
    for o in store.list("index"):
        parts = o.rel.split("/")
        if len(parts) >= 3 and not parts[1].startswith("."):
            newest[parts[1]] = max(newest[parts[1]], o.mtime)
    for name, mtime in sorted(newest.items()):
        if name not in listed and now - mtime >= grace:  # a build's orphan, not one in progress
            store.delete_prefix(f"index/{name}")
            result.removed_tmp_dirs.append(name)
    if manifest.versions:
        gone_versions = {v.version for v in removed}
        kept = [v for v in manifest.versions if v.version not in gone_versions]
        for rel in builder.unused_retired(manifest.versions, kept):
            if lake.exists(rel):
                lake.delete(rel)
                result.removed_lake_files.append(rel)
    aborted = store.abort_stale_uploads(STALE_UPLOAD_S)
    if lake.location != store.location:
        aborted += lake.abort_stale_uploads(STALE_UPLOAD_S)
    logger.info("index gc (S3, grace %.0fs): removed %s, kept in grace %s, %d orphans, %d lake files deleted, "
                "%d stale uploads aborted", grace, result.removed_versions, result.pinned_versions,
                len(result.removed_tmp_dirs), len(result.removed_lake_files), aborted)
    return result
