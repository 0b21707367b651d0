"""index-compactor: a timer that makes new lake files servable, compacts and collects."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from crawlstream.index import IndexBuilder, IndexReader, read_manifest
from crawlstream.index.service import IndexCompactor, build, max_live_files_per_partition
from crawlstream.lake import LakeWriter
from crawlstream.settings import IndexSettings, Settings
from crawlstream.urls import canonicalize
from tests.services._support import host_for

pytestmark = pytest.mark.timeout(60)


def write_files(root: Path, urls: list[str], *, dataset_id: int = 3) -> None:
    """One lake file per call for the partition of these URLs (as one sink flush would)."""
    writer = LakeWriter(root)
    for u in urls:
        writer.add_canonical(dataset_id, canonicalize(u))
    writer.flush()


def served_urls(root: Path, domain: str, dataset_id: int) -> tuple[int, list[str]]:
    reader = IndexReader(root)
    try:
        with reader.pin() as idx:
            page = idx.urls(domain, dataset_id, 0, 1000)
            assert page is not None
            return page.total, [i.url for i in page.items]
    finally:
        reader.close()


def test_one_tick_builds_a_version_the_reader_answers(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    root = settings.data_dir
    write_files(root, [f"https://www.example.com/a/{i}" for i in range(10)])
    with host_for(settings) as host:
        compactor = build(host)
        tick = compactor.run_once()
        assert tick.build.version is not None and tick.build.files_scanned == 1
        assert served_urls(root, "example.com", 3) == (10, sorted(f"https://www.example.com/a/{i}" for i in range(10)))
        assert compactor.run_once().build.version is None, "nothing new: no version written"


def test_fragmented_partition_is_compacted_and_answers_stay_the_same(tmp_path: Path) -> None:
    root = tmp_path
    urls = [f"https://shop.example.com/p/{i}" for i in range(12)]
    for chunk in (urls[:4], urls[4:8], urls[8:], urls[:2]):  # 4 flushes, one of them a replay
        write_files(root, chunk)
    compactor = IndexCompactor(
        IndexBuilder(root, index=IndexSettings(keep_versions=2)), interval_s=60, compact_min_files=3
    )
    tick = compactor.run_once()
    assert tick.compaction is not None and tick.compaction.compacted_partitions == 1
    assert max_live_files_per_partition(compactor._builder) == 1
    assert served_urls(root, "example.com", 3) == (12, sorted(urls))
    manifest = read_manifest(root)
    assert manifest is not None and len(manifest.versions) <= 2, "gc keeps index.keep_versions"


def test_stop_returns_within_a_second(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(CRAWLSTREAM_INDEX_BUILD_INTERVAL_S="30")
    write_files(settings.data_dir, ["https://example.org/x"])
    with host_for(settings) as host:
        compactor = build(host)
        thread = threading.Thread(target=compactor.run)
        thread.start()
        deadline = time.monotonic() + 10
        while compactor.ticks == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert compactor.ticks == 1 and compactor.versions_flipped == 1
        started = time.monotonic()
        compactor.stop()
        thread.join(5)
        assert not thread.is_alive() and time.monotonic() - started < 1.0
        compactor.close()


def test_a_long_tick_beats_the_heartbeat_as_it_goes(tmp_path: Path) -> None:
    """The soak's defect at small scale: a tick beat the heartbeat only before and after, so a
    compaction plus build longer than the liveness probe's bound (300 s; thousands of small
    files on a busy machine) was killed as hung, over and over. Now every lake prefix scanned,
    partition compacted and version file written is a beat: the heartbeat's age is one step."""
    domains = [f"site{i}.example" for i in range(120)]  # spread over many lake prefixes
    for flush in range(3):  # three files per partition: every partition is compacted
        write_files(tmp_path, [f"https://www.{d}/p/{flush}" for d in domains])
    beats: list[float] = []
    compactor = IndexCompactor(IndexBuilder(tmp_path), interval_s=60, compact_min_files=2,
                               heartbeat=lambda: beats.append(time.monotonic()))
    started = time.monotonic()
    tick = compactor.run_once()
    ended = time.monotonic()
    assert tick.compaction is not None
    partitions = tick.compaction.compacted_partitions
    prefixes = len({p.parent.name for p in (tmp_path / "urls").rglob("*.parquet")})
    assert partitions == prefixes > 10
    # one beat per partition compacted, per lake prefix of the build after it, and per version
    # file step: never one long silence over the whole tick
    assert len(beats) >= partitions + prefixes, (len(beats), partitions, prefixes)
    gaps = [b - a for a, b in zip([started, *beats], [*beats, ended], strict=True)]
    assert max(gaps) < (ended - started) / 4, gaps


def test_a_stop_mid_compaction_returns_after_the_partition_in_hand(tmp_path: Path) -> None:
    """Session 25's soak: SIGTERM came during a compaction of ~250 lake partitions, which went
    on to the end (30 s, then the deployment's SIGKILL). The stop is now checked at each beat:
    the pass ends after the partition in hand, what it published stays, the index still answers
    from its last version, and the next run compacts the rest."""
    domains = [f"site{i}.example" for i in range(120)]
    for flush in range(3):
        write_files(tmp_path, [f"https://www.{d}/p/{flush}" for d in domains])
    IndexBuilder(tmp_path).build()  # a version to answer from before the compaction
    compactor: IndexCompactor | None = None
    beats = 0

    def beat() -> None:  # SIGTERM's handler runs stop() in the middle of the pass
        nonlocal beats
        beats += 1
        if beats == 3 and compactor is not None:
            compactor.stop()

    compactor = IndexCompactor(IndexBuilder(tmp_path), interval_s=60, compact_min_files=2, heartbeat=beat)
    thread = threading.Thread(target=compactor.run)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    assert compactor.ticks == 0, "the stopped tick did not complete"
    assert beats <= 4, beats
    compacted = list((tmp_path / "urls").rglob("part-c-*.parquet"))
    prefixes = len({p.parent.name for p in (tmp_path / "urls").rglob("*.parquet")})
    assert 1 <= len(compacted) <= 3 < prefixes, (len(compacted), prefixes)  # the partitions before the stop
    assert served_urls(tmp_path, "site7.example", 3)[0] == 3
    compactor.close()

    again = IndexCompactor(IndexBuilder(tmp_path), interval_s=60, compact_min_files=2)
    tick = again.run_once()
    assert tick.compaction is not None and max_live_files_per_partition(again._builder) == 1
    assert all(served_urls(tmp_path, d, 3)[0] == 3 for d in domains)
    again.close()


def test_a_build_killed_every_tick_does_not_starve_the_compaction(tmp_path: Path) -> None:
    """Session 23's 2-hour soak: the compaction ran after the build in each tick, so four build
    kills in 31 minutes (builds of minutes over thousands of small files) kept the lake from being
    compacted for 49 minutes, and its bytes per page rose 1.14x. A fragmented lake is now merged
    first, and the compaction's own build brings the index up to the lake: one build a tick."""
    urls = [f"https://shop.example.com/p/{i}" for i in range(12)]
    for chunk in (urls[:4], urls[4:8], urls[8:]):
        write_files(tmp_path, chunk)
    builder = IndexBuilder(tmp_path)
    compactor = IndexCompactor(builder, interval_s=60, compact_min_files=3)

    def killed() -> None:  # the build that a kill would end
        raise RuntimeError("killed mid-build")

    builder.build = killed  # type: ignore[method-assign]
    tick = compactor.run_once()
    assert tick.compaction is not None and tick.compaction.compacted_partitions == 1
    assert tick.build is tick.compaction and tick.build.version is not None
    assert max_live_files_per_partition(builder) == 1
    assert served_urls(tmp_path, "example.com", 3) == (12, sorted(urls))
