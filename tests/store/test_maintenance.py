"""Bounded maintenance steps, compaction and the store CLI, on real files and real pages (issue 13, ADR 018)."""

from __future__ import annotations

import io
import json
import random
import threading
import time
from pathlib import Path

import pytest
import zstandard as zstd
from warcio.archiveiterator import ArchiveIterator

from crawlstream.cli import main as cli_main
from crawlstream.store import ContentStore, StoreConfig, export_warc

pytestmark = pytest.mark.timeout(120)


def _sample(real_pages: list[tuple[str, bytes]], n: int, seed: int = 1) -> list[tuple[str, bytes]]:
    return random.Random(seed).sample(real_pages, n)


@pytest.mark.slow  # a minute at production levels, for a goal known short on this sample (the reason below)
@pytest.mark.xfail(
    strict=True,
    reason="on a 150-page sample the store keeps 7.832x vs one zstd-19 stream's 7.881x (-0.6%): the global "
    "dictionary (2.6 MB, 667 KB stored, 25% of the store) is needed (without it 7.123x) but groups read alone "
    "cannot reach back as far as one 21 MB stream; levers tried (ADR 018/021): training on every sample "
    "(7.794x -> 7.829x), dictionary files at level 22 (+0.01%), smaller dictionaries (/12 7.808x, /16 7.780x), "
    "groups of 384 KiB 7.679x / 2 MiB 7.839x, bzip2 archive groups where smaller (ADR 026: 7.824x -> 7.832x). "
    "On all 957 pages the goal is met (test_ratio_whole_set.py, slow): 8.059x vs 8.046x with ADR 036's "
    "index of sealed blocks (~100 B a page); figures above measured with format 3's snapshot",
)
def test_a_pass_with_ages_zero_reads_back_every_page_and_beats_one_zstd19_stream(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    """Production levels and dictionary sizes; a random 150 of the real pages (the whole set
    takes minutes at level 22). Ratio = raw bytes / every byte the store keeps."""
    pages = _sample(real_pages, 150)
    raw = sum(len(b) for _, b in pages)
    stream_ratio = raw / len(zstd.ZstdCompressor(level=19).compress(b"".join(b for _, b in pages)))
    with ContentStore(tmp_path / "s", config=StoreConfig(maintenance_budget_bytes=8 * 1024 * 1024)) as store:
        for url, body in pages:
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        steps: list[str] = []
        report = store.maintain(ages_zero=True, progress=lambda r: steps.append(r.tier))
        assert len(steps) >= 3 and set(steps) == {"archive"}  # several bounded batches
        assert report.moved_urls == len(pages)
        assert all(store.get(url) == body for url, body in pages)
        st = store.stats()
    on_disk = sum(p.stat().st_size for p in (tmp_path / "s").rglob("*") if p.is_file())
    assert st.stored_bytes == on_disk  # the ratio counts every byte the store keeps
    with ContentStore(tmp_path / "s") as store:
        assert {e.location.tier for e in store.search()} == {"archive"}
        assert all(store.get(url) == body for url, body in pages)
        assert store.verify().ok
    print(f"store {st.ratio:.3f}x vs one zstd-19 stream {stream_ratio:.3f}x ({len(pages)} pages, {raw} B)")
    assert st.ratio >= stream_ratio, (
        f"store {st.ratio:.3f}x < zstd-19 stream {stream_ratio:.3f}x: dictionaries {st.dict_bytes} B, "
        f"segments {st.segment_bytes} B, index {st.index_bytes} B"
    )


def _fill(store: ContentStore, pages: list[tuple[str, bytes]], at_ms: int = 0) -> None:
    for url, body in pages:
        store.put(url, body, content_type="text/html", fetched_at_ms=at_ms)


def test_steps_are_bounded_by_the_budget_and_move_the_oldest_first(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    pages = _sample(real_pages, 40, seed=2)
    config = StoreConfig(
        warm_level=1, cold_level=1, archive_level=1, maintenance_budget_bytes=256 * 1024, warm_after_s=10
    )
    with ContentStore(tmp_path, config=config) as store:
        _fill(store, pages[:20], at_ms=0)
        _fill(store, pages[20:], at_ms=50_000)
        report = store.maintenance_step(now_ms=20_000)  # only the first 20 are 10 s old
        assert report is not None and report.kind == "tier" and report.tier == "warm"
        biggest = max(len(b) for _, b in pages[:20])
        assert 0 < report.raw_bytes <= max(256 * 1024, biggest)
        moved = {e.url for e in store.search() if e.location.tier == "warm"}
        assert moved and moved <= {u for u, _ in pages[:20]}
        while store.maintenance_step(now_ms=20_000, compact=False) is not None:
            pass
        assert {e.url for e in store.search() if e.location.tier == "warm"} == {u for u, _ in pages[:20]}
        assert all(store.get(url) == body for url, body in pages)


def test_puts_during_a_pass_are_not_blocked_beyond_the_swap(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    """A maintenance pass at level 19 on another thread; puts go on and their worst latency stays small."""
    pages = _sample(real_pages, 60, seed=3)
    extra = _sample(real_pages, 200, seed=4)
    config = StoreConfig(
        warm_after_s=0.0,
        cold_after_s=0.0,
        archive_after_s=0.0,
        maintenance_budget_bytes=2 * 1024 * 1024,
        cold_level=19,
        archive_level=19,
    )
    with ContentStore(tmp_path, config=config) as store:
        _fill(store, pages)
        done = threading.Event()
        result: list[object] = []

        step_ends: list[float] = []

        def run() -> None:
            try:  # the puts below are "fetched" later: not due
                result.append(store.maintain(now_ms=1, progress=lambda _: step_ends.append(time.monotonic())))
            finally:
                done.set()

        started = time.monotonic()
        thread = threading.Thread(target=run)
        thread.start()
        latencies: list[float] = []
        i = 0
        while not done.is_set():
            url, body = extra[i % len(extra)]
            t0 = time.perf_counter()
            store.put(f"{url}{'&' if '?' in url else '?'}during={i}", body, fetched_at_ms=10**15)
            latencies.append(time.perf_counter() - t0)
            i += 1
            time.sleep(0.001)  # a crawl's pace (~1,000 pages/s at most), not a tight loop
        thread.join()
        pass_s = time.monotonic() - started
        worst = max(latencies)
        steps = [b - a for a, b in zip([started, *step_ends], step_ends, strict=False)]
        longest = max(steps)
        print(f"pass {pass_s:.1f} s, {len(steps)} steps (longest {longest:.1f} s), {len(latencies)} puts, "
              f"worst put {worst * 1000:.1f} ms")
        assert len(latencies) >= 20, "puts went on during the pass"
        # Blocked only while a step swaps its batch in, never for a step's compression (seconds at
        # level 19). The bound is relative to the step's own time, not absolute: on 2 shared cores
        # a put also waits for the GIL (0.3-2 s seen under CI's load, when a pass takes 39 s);
        # the latency itself is measured by bench store_maintain.
        assert worst < longest / 2 and worst < pass_s / 10, (
            f"a put waited {worst:.3f} s during a {pass_s:.1f} s pass whose longest step took {longest:.1f} s")
        assert all(store.get(url) == body for url, body in pages)
        assert all(e.location.tier == "archive" for e in store.search() if e.fetched_at_ms == 0)


def test_entries_deleted_or_replaced_during_a_step_are_left_as_they_are(tmp_path: Path) -> None:
    page = b"<html><body>" + b"<p>some text of a page</p>" * 300
    with ContentStore(tmp_path, config=StoreConfig(cold_level=1, archive_level=1)) as store:
        for i in range(30):
            store.put(f"https://a.example.com/{i}", page + str(i).encode(), fetched_at_ms=0)
        real_rewrite = store._tiering.rewriter.rewrite

        def rewrite(*args, **kwargs):  # type: ignore[no-untyped-def]
            pending = real_rewrite(*args, **kwargs)
            store.delete("https://a.example.com/1")
            store.put("https://a.example.com/2", b"new body", fetched_at_ms=0)
            return pending

        store._tiering.rewriter.rewrite = rewrite  # type: ignore[method-assign]
        report = store.maintenance_step(ages_zero=True)
        assert report is not None and report.skipped_changed == 2 and report.moved_urls == 28
        assert store.entry("https://a.example.com/1") is None
        assert store.get("https://a.example.com/2") == b"new body"
        assert store.entry("https://a.example.com/2").location.tier == "hot"  # type: ignore[union-attr]
    with ContentStore(tmp_path) as store:  # the dead copies are not resurrected at start-up
        assert store.recovered_records == 0
        assert store.entry("https://a.example.com/1") is None
        assert store.get("https://a.example.com/2") == b"new body"
        assert all(store.get(f"https://a.example.com/{i}") == page + str(i).encode() for i in range(3, 30))


def _segments_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "segments").rglob("*.seg"))


@pytest.mark.parametrize("tier", ["hot", "archive"])
def test_compaction_frees_deleted_pages(tmp_path: Path, real_pages: list[tuple[str, bytes]], tier: str) -> None:
    """Delete half the pages of a domain, compact: the store shrinks by >= 90% of their stored bytes."""
    domain = "booksamillion.com"
    ours = [(u, b) for u, b in real_pages if domain in u][:60]
    others = _sample([(u, b) for u, b in real_pages if domain not in u], 20, seed=5)
    assert len(ours) == 60
    # compact_dead_ratio 0.2: pages of other domains share the segments, so a half-deleted domain
    # leaves some below the default 0.5
    config = StoreConfig(
        cold_level=3, archive_level=3, segment_bytes=64 * 1024, dict_min_samples=16, compact_dead_ratio=0.2
    )
    root = tmp_path / "s"
    with ContentStore(root, config=config) as store:
        _fill(store, ours + others)
        if tier == "archive":
            store.maintain(ages_zero=True)
        gone = ours[::2]
        # their stored bytes: the record, or the group member's share of its group record
        before = store.stats()
        share = {}
        for url, _ in gone:
            e = store.entry(url)
            assert e is not None and e.location.tier == tier
            shape = store._tiering.group_shapes.get((e.location.segment, e.location.offset))
            share[url] = (
                e.location.length
                if shape is None
                else e.location.length * shape.sizes[e.location.member] / shape.total
            )
        stored_gone = sum(share.values())
        for url, _ in gone:
            assert store.delete(url)
        dead = store.stats()
        assert dead.dead_bytes - before.dead_bytes >= 0.9 * stored_gone
        size_before = _segments_bytes(root)
        report = store.maintain(compact=True)
        assert report.segments_removed
        shrunk = size_before - _segments_bytes(root)
        print(f"{tier}: deleted pages stored {stored_gone:.0f} B, segments shrank by {shrunk} B")
        assert shrunk >= 0.9 * stored_gone
        assert store.stats().dead_bytes < 0.1 * stored_gone + 4096
    with ContentStore(root) as store:
        assert store.recovered_records == 0 and store.verify().ok
        kept = [(u, b) for u, b in ours[1::2] + others]
        assert all(store.get(url) == body for url, body in kept)
        for url, _ in gone:
            with pytest.raises(KeyError):
                store.get(url)
        listed = {e.url for e in store.search(domain=domain)}
        assert listed == {u for u, _ in ours[1::2]}
        out = io.BytesIO()
        written, skipped = export_warc(store, out, domain=domain)
        assert (written, skipped) == (30, 0)
        out.seek(0)
        warc_urls = {
            r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(out) if r.rec_type == "response"
        }
        assert warc_urls == listed and not warc_urls & {u for u, _ in gone}


def test_cli_maintain_stats_and_verify(
    tmp_path: Path, real_pages: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pages = _sample(real_pages, 30, seed=6)
    data = tmp_path / "data"
    monkeypatch.setenv("CRAWLSTREAM_DATA_DIR", str(data))
    monkeypatch.setenv("CRAWLSTREAM_STORE_COLD_LEVEL", "3")
    monkeypatch.setenv("CRAWLSTREAM_STORE_ARCHIVE_LEVEL", "3")
    monkeypatch.setenv("CRAWLSTREAM_STORE_MAINTENANCE_BUDGET_BYTES", str(1024 * 1024))
    with ContentStore(data / "store") as store:
        _fill(store, pages)  # fetched at 0: in 1970, due for archive anyway
        store.delete(pages[0][0])
    assert cli_main(["store", "maintain", "--now"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["moved_urls"] == len(pages) - 1 and summary["steps"] >= 2
    assert "MB moved" in err and "MB/s" in err and "ETA" in err
    assert cli_main(["store", "maintain"]) == 0  # nothing left
    assert json.loads(capsys.readouterr()[0])["moved_urls"] == 0
    assert cli_main(["store", "stats"]) == 0
    stats = json.loads(capsys.readouterr()[0])
    assert stats["by_tier"]["archive"]["urls"] == len(pages) - 1 and stats["by_tier"]["hot"]["urls"] == 0
    assert stats["by_tier"]["archive"]["records"] < len(pages) // 2  # group records
    assert stats["live_bytes"] + stats["dead_bytes"] == stats["segment_bytes"]
    assert stats["ratio"] > 3 and stats["quarantined_urls"] == []
    # damage one group: verify names the URLs it lost, stats lists them
    with ContentStore(data / "store") as store:
        victim = store.entry(pages[5][0])
        assert victim is not None
        loc = victim.location
        here = (loc.segment, loc.offset)
        members = sorted(e.url for e in store.search() if (e.location.segment, e.location.offset) == here)
    seg = data / "store" / "segments" / loc.segment
    raw = bytearray(seg.read_bytes())
    raw[loc.offset + 30] ^= 0xFF  # inside the member table: the whole group is lost
    seg.write_bytes(bytes(raw))
    assert cli_main(["store", "verify"]) == 1
    report = json.loads(capsys.readouterr()[0])
    lost = sorted(u for p in report["problems"] for u in p["urls"])
    assert lost == members
    assert cli_main(["store", "stats"]) == 0
    assert json.loads(capsys.readouterr()[0])["quarantined_urls"] == members


def test_a_cancelled_step_leaves_nothing_behind(tmp_path: Path) -> None:
    page = b"<html><body>" + b"<p>some text of a page</p>" * 300
    cancel = threading.Event()
    with ContentStore(tmp_path, config=StoreConfig(cold_level=1, archive_level=1)) as store:
        for i in range(20):
            store.put(f"https://a.example.com/{i}", page + str(i).encode(), fetched_at_ms=0)
        segments = sorted(p.name for p in (tmp_path / "segments").rglob("*.seg"))
        real_rewrite = store._tiering.rewriter.rewrite

        def rewrite(*args, **kwargs):  # type: ignore[no-untyped-def]
            pending = real_rewrite(*args, **kwargs)
            cancel.set()  # a SIGTERM arrives after the new segments were written
            return pending

        store._tiering.rewriter.rewrite = rewrite  # type: ignore[method-assign]
        report = store.maintenance_step(ages_zero=True, cancel=cancel)
        assert report is not None and report.cancelled and report.moved_urls == 0
        assert sorted(p.name for p in (tmp_path / "segments").rglob("*.seg")) == segments
        assert {e.location.tier for e in store.search()} == {"hot"}
    with ContentStore(tmp_path) as store:
        assert store.recovered_records == 0
        assert all(store.get(f"https://a.example.com/{i}") == page + str(i).encode() for i in range(20))
