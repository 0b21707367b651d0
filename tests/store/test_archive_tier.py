"""The content store's archive tier on object storage (issue 26, ADR 029): archive segments are
objects under ``store.archive_uri`` (a real S3 server, versitygw on loopback, or a directory),
read one ranged GET per page; verify, quarantine, WARC export, deletes, compaction, a kill -9
and an S3 outage behave as with local segments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlstream.cli import main
from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import load
from crawlstream.store import ContentStore, ShardedStore, StoreConfig

WARCIO = Path(sys.executable).with_name("warcio")
CHILD = Path(__file__).with_name("_archive_child.py")
# Fast levels: these tests are about where the archive's segments live, not how small they are
# (zstd 22 and bzip2 trials made each test ~20 s).
FAST = {"warm_level": 3, "cold_level": 3, "archive_level": 3, "archive_bzip2": False}
CONFIG = StoreConfig(segment_bytes=64 * 1024, dict_min_samples=8, global_dict_min_samples=16,
                     maintenance_budget_bytes=256 * 1024, **FAST)


def _pages(real_pages: list[tuple[str, bytes]], n: int = 60) -> dict[str, bytes]:
    return dict(real_pages[:n])


def _s3_objects(server: LocalS3, prefix: str, deadline_s: float = 10.0) -> ObjectStore:
    env = dict(server.env, CRAWLSTREAM_S3_DEADLINE_S=str(deadline_s))
    return open_objects(parse_location(prefix), load(env).s3)


@pytest.fixture(params=["s3", "dir"])
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "dir":
        return open_objects(parse_location(tmp_path / "archive"), load({}).s3)
    return _s3_objects(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_prefix"))


def _fill(store: ContentStore | ShardedStore, pages: dict[str, bytes]) -> None:
    for i, (url, body) in enumerate(pages.items()):
        store.put(url, body, content_type="text/html", status=200, fetched_at_ms=1_600_000_000_000 + i)


def _archived_objects(archive: ObjectStore) -> set[str]:
    return {o.rel for o in archive.list() if o.rel.endswith(".seg")}


def test_archived_pages_read_back_from_objects_one_ranged_get_each(
    tmp_path: Path, archive: ObjectStore, real_pages: list[tuple[str, bytes]]
) -> None:
    pages = _pages(real_pages)
    root = tmp_path / "store"
    with ContentStore(root, config=CONFIG, archive=archive) as store:
        _fill(store, pages)
        store.maintain(ages_zero=True)
        segs = {store.entry(url).location.segment for url in pages}  # type: ignore[union-attr]
        assert all(s.startswith("archive/") for s in segs)
        assert all(store.get(url) == body for url, body in pages.items())
    assert not list((root / "segments").glob("archive/*.seg"))  # local copies gone
    assert segs <= _archived_objects(archive)
    with ContentStore(root, config=CONFIG, archive=archive) as store:  # start-up: objects listed, not read
        before = dict(archive.requests)
        url, body = next(iter(pages.items()))
        assert store.get(url) == body
        store.get(url)
        used = {k: archive.requests[k] - before.get(k, 0) for k in archive.requests}
        if not archive.is_local:
            assert used.get("GET") == 2 and used.get("HEAD") == 1  # one HEAD per object, one GET per read
        assert all(store.get(u) == b for u, b in pages.items())
        assert store.verify().ok
        assert store.stats().by_tier["archive"]["segments"] == len(_archived_objects(archive))


def test_sharded_store_keeps_each_shards_archive_under_its_own_prefix(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str, real_pages: list[tuple[str, bytes]]
) -> None:
    archive = _s3_objects(s3_server, s3_prefix)
    pages = _pages(real_pages, 80)
    with ShardedStore(tmp_path / "store", config=CONFIG, archive=archive) as store:
        _fill(store, pages)
        store.maintain(ages_zero=True)
        assert all(store.get(url) == body for url, body in pages.items())
    objects = _archived_objects(archive)
    shards = {rel.split("/", 1)[0] for rel in objects}
    assert len(shards) > 1 and all(s.isdigit() and len(s) == 3 for s in shards)
    assert all(rel.split("/")[1] == "archive" for rel in objects)
    assert not list((tmp_path / "store").glob("shards/*/segments/archive/*.seg"))
    with ShardedStore(tmp_path / "store", config=CONFIG, archive=archive) as store:
        assert all(store.get(url) == body for url, body in pages.items())
        assert store.verify().ok


def test_flipped_byte_in_an_archive_object_is_found_and_quarantined_and_a_lost_object_reported(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str, real_pages: list[tuple[str, bytes]]
) -> None:
    archive = _s3_objects(s3_server, s3_prefix)
    pages = _pages(real_pages)
    with ContentStore(tmp_path / "store", config=CONFIG, archive=archive) as store:
        _fill(store, pages)
        store.maintain(ages_zero=True)
        assert store.verify().ok
        victim = store.entry(next(iter(pages)))
        assert victim is not None
        loc = victim.location
        path = s3_server.path_of(archive.location.bucket, archive.key(loc.segment))
        data = bytearray(path.read_bytes())
        data[loc.offset + 12] ^= 0xFF  # inside the record header: its crc fails
        path.write_bytes(bytes(data))
        with pytest.raises(ChecksumMismatch):
            store.get(victim.url)
        report = store.verify()
        assert not report.ok and victim.url in {u for p in report.problems for u in p.urls}
        assert (loc.segment, loc.offset) in store.quarantined()
        assert (tmp_path / "store" / "segments" / f"{loc.segment}.invalid").exists()
        hit = {u for p in report.problems for u in p.urls}
        assert all(store.get(u) == b for u, b in pages.items() if u not in hit)
        # an object deleted behind the store's back: reported by verify, a read fails cleanly
        other = next(e for u in pages if (e := store.entry(u)) and e.location.segment != loc.segment)
        archive.delete(other.location.segment)
    with ContentStore(tmp_path / "store", config=CONFIG, archive=archive) as store:
        with pytest.raises(ChecksumMismatch, match="missing"):
            store.get(other.url)
        missing = [p for p in store.verify().problems if p.kind == "missing"]
        assert [p.segment for p in missing] == [other.location.segment] and other.url in missing[0].urls


def test_delete_and_compaction_remove_archive_objects(
    tmp_path: Path, archive: ObjectStore, real_pages: list[tuple[str, bytes]]
) -> None:
    pages = _pages(real_pages)
    config = StoreConfig(segment_bytes=64 * 1024, compact_dead_ratio=0.3, maintenance_budget_bytes=256 * 1024, **FAST)
    with ContentStore(tmp_path / "store", config=config, archive=archive) as store:
        _fill(store, pages)
        store.maintain(ages_zero=True)
        before = _archived_objects(archive)
        gone = list(pages)[::3] + list(pages)[1::3]
        for url in gone:
            assert store.delete(url)
            with pytest.raises(KeyError):
                store.get(url)
        report = store.maintain(ages_zero=True)
        assert report.segments_removed and set(report.segments_removed) <= before
        after = _archived_objects(archive)
        assert not (set(report.segments_removed) & after)
        live = {store.entry(u).location.segment for u in pages if u not in gone}  # type: ignore[union-attr]
        assert live <= after
        assert all(store.get(u) == b for u, b in pages.items() if u not in gone)
        for url in [u for u in pages if u not in gone]:
            store.delete(url)
    with ContentStore(tmp_path / "store", config=config, archive=archive):  # garbage collection at open
        assert _archived_objects(archive) == set()


def _warc_records(path: Path) -> list[tuple[str, str, bytes]]:
    out = []
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh):
            out.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI") or "",
                        record.content_stream().read()))
    return out


def test_warc_export_of_a_store_archived_on_s3_equals_the_local_one(
    tmp_path: Path, s3_env: dict[str, str], s3_prefix: str, real_pages: list[tuple[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pages = _pages(real_pages, 40)
    exports = {}
    for kind in ("local", "s3"):
        data_dir = tmp_path / kind
        with ContentStore(data_dir / "store", config=CONFIG) as store:
            _fill(store, pages)
        if kind == "s3":
            monkeypatch.setenv("CRAWLSTREAM_STORE_ARCHIVE_URI", s3_prefix)
        assert main(["store", "maintain", "--now", "--data-dir", str(data_dir)]) == 0
        assert not list((data_dir / "store" / "segments").glob("archive/*.seg")) or kind == "local"
        out = tmp_path / f"{kind}.warc.gz"
        assert main(["export-warc", "--data-dir", str(data_dir), str(out)]) == 0
        check = subprocess.run([str(WARCIO), "check", "-v", str(out)], capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        exports[kind] = _warc_records(out)
        assert main(["store", "verify", "--data-dir", str(data_dir)]) == 0
    assert exports["s3"] == exports["local"]
    responses = {uri: body for kind, uri, body in exports["s3"] if kind == "response"}
    assert set(pages) <= set(responses)


def test_s3_outage_read_fails_fast_maintenance_pauses_then_all_recovers(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str, real_pages: list[tuple[str, bytes]]
) -> None:
    archive = _s3_objects(s3_server, s3_prefix, deadline_s=1.0)
    pages = _pages(real_pages, 40)
    later = dict(real_pages[40:60])
    with ContentStore(tmp_path / "store", config=CONFIG, archive=archive) as store:
        _fill(store, pages)
        store.maintain(ages_zero=True)
        s3_server.stop(keep_data=True)
        try:
            url = next(iter(pages))
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                store.get(url)
            assert time.monotonic() - started < 5
            _fill(store, later)  # puts go on (hot tier is local)
            with pytest.raises(StorageUnavailable):
                store.maintain(ages_zero=True)
            assert not list((tmp_path / "store" / "segments").glob("archive/*.seg"))  # the batch left nothing
            assert all(store.get(u) == b for u, b in later.items())
        finally:
            s3_server.restart()
        assert store.get(url) == pages[url]
        store.maintain(ages_zero=True)
        everything = pages | later
        assert all(store.entry(u).location.tier == "archive" for u in everything)  # type: ignore[union-attr]
        assert all(store.get(u) == b for u, b in everything.items())
        assert store.verify().ok


@pytest.mark.parametrize("kill", ["upload", "offload", "0.3", "0.8", "1.5"])
def test_kill_during_archive_uploads_loses_nothing_and_points_at_no_missing_object(
    tmp_path: Path, s3_server: LocalS3, s3_prefix: str, kill: str
) -> None:
    """SIGKILL right after a batch's uploads (before its swap), right after its swap (local copies
    still there), and at random moments of tiering, deletes and compaction."""
    root, side = tmp_path / "store", tmp_path / "acked"
    env = dict(os.environ, **s3_server.env, PYTHONPATH=os.pathsep.join(sys.path))
    window = [kill] if kill in ("upload", "offload") else []
    proc = subprocess.Popen([sys.executable, str(CHILD), str(root), str(side), s3_prefix, *window], env=env)
    try:
        if window:
            assert proc.wait(timeout=120) == -signal.SIGKILL
            assert list((root / "segments").glob("archive/*.seg"))  # the batch's local copies
        else:
            deadline = time.monotonic() + 60
            while "MAINTAIN" not in (side.read_text() if side.exists() else ""):
                assert proc.poll() is None, "child exited early"
                assert time.monotonic() < deadline, "child did not reach maintenance in 60 s"
                time.sleep(0.02)
            time.sleep(float(kill) * random.uniform(0.8, 1.2))
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    sys.path.insert(0, str(CHILD.parent))
    from _archive_child import body_for

    acked: dict[str, bool] = {}
    for line in side.read_text().splitlines():
        if line.startswith("-"):
            acked[line[1:]] = False
        elif line.startswith("?"):  # a delete under way: either outcome is right
            acked.pop(line[1:], None)
        elif line != "MAINTAIN":
            acked[line] = True
    archive = _s3_objects(s3_server, s3_prefix)
    with ContentStore(root, config=CONFIG, archive=archive) as store:
        if window:  # the uploads completed: the objects are the segments, the local copies are gone
            assert _archived_objects(archive) and not list((root / "segments").glob("archive/*.seg"))
        for url, live in acked.items():
            if live:
                assert store.get(url) == body_for(url)
        report = store.verify()
        assert report.ok, report.problems
        store.maintain(ages_zero=True)
        assert all(store.get(u) == body_for(u) for u, live in acked.items() if live)
        used = {e.location.segment for e in store.search()} | {e.record_segment for e in store.search()} - {""}
        objects = _archived_objects(archive)
        assert {s for s in used if s.startswith("archive/")} <= objects
        assert objects <= used  # garbage collection left no orphan object
