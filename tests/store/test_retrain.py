"""Retraining dictionaries (ADR 021 "Retraining") on real pages: a domain that outgrows or drifts away
from its dictionary gets a new generation; its records move to it in bounded maintenance steps;
the old dictionary is dropped once no record in any segment names it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from crawlstream.cli import main as cli_main
from crawlstream.errors import ConfigError
from crawlstream.store import ContentStore, StoreConfig
from crawlstream.store._codec import content_hash, encode_log_record, scan_records
from crawlstream.store._retrain import record_dict_ids

SHOP = "www.shopdrift.com"  # one domain whose pages are rehosted real pages
OPTS = StoreConfig(
    warm_level=3,
    cold_level=9,
    archive_level=9,
    dict_min_samples=16,
    global_dict_min_samples=16,
    maintenance_budget_bytes=2 * 1024 * 1024,
    segment_bytes=2 * 1024 * 1024,
)


def split(real_pages: list[tuple[str, bytes]]) -> tuple[list[bytes], list[bytes]]:
    """(product pages of one real shop, pages of many real news and blog sites)."""
    products = [body for url, body in real_pages if "booksamillion.com" in url]
    others = [body for url, body in real_pages if "booksamillion.com" not in url and len(body) < 400_000]
    assert len(products) >= 200 and len(others) >= 200
    return products, others


def put_all(store: ContentStore, pages: list[tuple[str, bytes]], at_ms: int = 0) -> None:
    for url, body in pages:
        store.put(url, body, fetched_at_ms=at_ms)


def check_every_page(store: ContentStore, pages: dict[str, bytes]) -> None:
    assert len(store) == len(pages)
    for url, body in pages.items():
        assert store.get(url) == body, url
    report = store.verify()  # decompresses every record, dead ones too: each names a stored dictionary
    assert report.ok, report.problems


def test_a_domain_that_outgrows_its_dictionary_gets_a_new_generation_and_the_old_one_goes(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    products, _ = split(real_pages)
    first = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[:40])]
    more = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[40:170], start=40)]
    pages = dict(first + more)
    with ContentStore(tmp_path, config=OPTS) as store:
        put_all(store, first)
        store.maintain(ages_zero=True)
        (gen1,) = store.dicts.infos()
        assert (gen1.domain, gen1.generation, gen1.pool) == ("shopdrift.com", 1, 40)
        put_all(store, more)  # 170 live records >= 4 x 40
        steps: list[Any] = []
        report = store.maintain(ages_zero=True, progress=steps.append)
        assert report.retrained == ["shopdrift.com:growth"] and report.dictionaries_trained == 1
        assert steps[0].kind == "retrain" and "redict" in {s.kind for s in steps}
        assert report.dictionaries_dropped == 1
        (gen2,) = store.dicts.infos()
        assert (gen2.generation, gen2.pool) == (2, 170) and gen2.dict_id > gen1.dict_id
        assert not (tmp_path / "dicts" / f"{gen1.dict_id}.zdict.zst").exists()
        assert {e.location.dict_id for e in store.search()} == {gen2.dict_id}
        check_every_page(store, pages)
        (row,) = store.stats().dictionary_versions
        assert row["generation"] == 2 and row["current"] and row["records"] == 170 and row["age_s"] >= 0
        for path in (tmp_path / "segments").glob("*/*.seg"):  # the header walk agrees with a full scan
            walked = record_dict_ids(path)
            assert walked is not None
            scanned = {item.header.dict_id for item in scan_records(path.read_bytes()) if item.header is not None}
            assert walked == (frozenset(scanned), path.stat().st_size)
    with ContentStore(tmp_path, config=OPTS) as store:  # a reopened store knows the generation and has nothing to do
        assert [i.generation for i in store.dicts.infos()] == [2]
        assert store.maintain(ages_zero=True).dictionaries_trained == 0
        check_every_page(store, pages)


def test_a_drifted_domain_is_retrained_and_its_pages_take_less_space(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    """Trained on a shop's product pages; the site then keeps adding products, then turns into a
    news site (real articles of many sites). The growth rule does not fire (112 < 4 x 48): the
    dictionary's gain on the newest pages does."""
    products, others = split(real_pages)
    first = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[:48])]
    same = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[48:72], start=48)]
    drifted = [(f"https://{SHOP}/news/{i}", b) for i, b in enumerate(others[:40])]
    pages = dict(first + same + drifted)
    off = replace(OPTS, dict_retrain_drift=0.0, dict_retrain_growth=0.0)
    with ContentStore(tmp_path, config=off) as store:
        put_all(store, first)
        store.maintain(ages_zero=True)
        (gen1,) = store.dicts.infos()
        put_all(store, same)
        put_all(store, drifted)
        assert store.maintain(ages_zero=True).dictionaries_trained == 0  # rules off: the old dictionary stays
        before = store.stats()
        assert {e.location.dict_id for e in store.search()} == {gen1.dict_id}
    with ContentStore(tmp_path, config=OPTS) as store:
        report = store.maintain(ages_zero=True)
        assert report.retrained == ["shopdrift.com:drift"] and report.dictionaries_dropped == 1
        probe = store._tiering.retrainer.last_probe[gen1.dict_id]
        assert probe.late_gain < 0.75 * probe.early_gain, probe
        after = store.stats()
        check_every_page(store, pages)
        (gen2,) = store.dicts.infos()
        assert gen2.generation == 2 and gen2.pool == len(pages)
        assert after.ratio >= before.ratio, (before.ratio, after.ratio)
        assert store.maintain(ages_zero=True).dictionaries_trained == 0  # the new one fits: no retraining loop


def test_a_replaced_dictionary_stays_while_a_dead_record_in_a_kept_segment_names_it(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    """verify and rebuild-index decompress dead records too: the old dictionary may only go with them."""
    products, others = split(real_pages)
    shop = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[:40])]
    news = [(f"https://www.newsdesk.org/a/{i}", b) for i, b in enumerate(others[:40])]
    grown = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[40:170], start=40)]
    pages = dict(shop + news + grown)
    # one batch per step and one segment per batch; compaction takes any segment with dead records
    opts = replace(
        OPTS, segment_bytes=64 * 1024 * 1024, maintenance_budget_bytes=64 * 1024 * 1024, compact_dead_ratio=0.01
    )
    with ContentStore(tmp_path, config=opts) as store:
        put_all(store, shop + news)
        store.maintain(ages_zero=True)  # one archive segment: both domains' groups
        old = store.dicts.current()["shopdrift.com"]
        put_all(store, grown)
        report = store.maintain(ages_zero=True, compact=False)
        assert report.retrained == ["shopdrift.com:growth"] and report.dictionaries_dropped == 0
        assert all(e.location.dict_id != old.dict_id for e in store.search())
        rows = {r["id"]: r for r in store.stats().dictionary_versions}
        assert rows[old.dict_id]["records"] == 0 and not rows[old.dict_id]["current"]
        assert (tmp_path / "dicts" / f"{old.dict_id}.zdict.zst").exists()
        check_every_page(store, pages)
        store.rebuild_index()  # reads every record, the dead ones on the old dictionary too
        assert len(store) == len(pages)
        report = store.maintain(ages_zero=True)  # compaction rewrites the newsdesk.org groups: now it goes
        assert report.dictionaries_dropped == 1 and old.dict_id not in {i.dict_id for i in store.dicts.infos()}
        check_every_page(store, pages)


def test_retraining_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="dict_retrain_growth"):
        StoreConfig(dict_retrain_growth=1.0)
    with pytest.raises(ConfigError, match="dict_retrain_drift"):
        StoreConfig(dict_retrain_drift=1.0)
    assert StoreConfig(dict_retrain_growth=0, dict_retrain_drift=0).dict_retrain_growth == 0


CHILD = Path(__file__).with_name("_retrain_child.py")
CHILD_OPTS = StoreConfig(  # as _retrain_child.py opens the store
    warm_level=3,
    cold_level=6,
    archive_level=6,
    dict_min_samples=8,
    global_dict_min_samples=8,
    maintenance_budget_bytes=512 * 1024,
    segment_bytes=512 * 1024,
    compact_dead_ratio=0.3,
    dict_retrain_growth=1.5,
)


def _run_and_kill(args: list[str], side: Path, delay_s: float) -> None:
    """Start the child, wait until it has trained its first dictionary, then SIGKILL it after ``delay_s``."""
    proc = subprocess.Popen([sys.executable, str(CHILD), *args])
    try:
        deadline = time.monotonic() + 60
        while "RETRAIN" not in (side.read_text() if side.exists() else ""):
            if proc.poll() is not None:
                pytest.fail(f"child exited early with {proc.returncode}")
            if time.monotonic() > deadline:
                pytest.fail("child did not train its first dictionary in 60 s")
            time.sleep(0.01)
        time.sleep(delay_s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("delay_s", [0.0, 0.15, 0.4, 0.9, 1.6, 2.5])
def test_kill_during_retraining_loses_nothing_and_leaves_nothing_half_done(
    tmp_path: Path, shared_data: Path, real_pages: list[tuple[str, bytes]], delay_s: float
) -> None:
    """SIGKILL while a growing, drifting domain is retrained, recompressed and its old dictionaries dropped."""
    root, side = tmp_path / "store", tmp_path / "acked.txt"
    _run_and_kill([str(root), str(side), str(shared_data)], side, delay_s)
    acked = [line for line in side.read_text().splitlines() if line.startswith("https://")]
    pages = {url: real_pages[int(url.split("/")[3])][1] for url in acked}
    with ContentStore(root) as store:
        for url, body in pages.items():  # every acknowledged put, byte-identical
            assert store.get(url) == body, url
        for entry in store.search():  # nothing torn or foreign is served (a put killed before
            # its acknowledgement was printed may be there: its body is still the URL's page)
            assert store.get(entry.url) == real_pages[int(entry.url.split("/")[3])][1], entry.url
            pages.setdefault(entry.url, real_pages[int(entry.url.split("/")[3])][1])  # checked below too
        assert store.verify().ok  # every record (dead ones too) names a dictionary that is there
        dict_files = {int(p.name.split(".")[0]) for p in (root / "dicts").glob("*.zdict.zst")}
        assert dict_files == {i.dict_id for i in store.dicts.infos()}  # no half-written dictionary left
        assert not list((root / "dicts").glob(".*tmp-*"))
        generations = max(i.generation for i in store.dicts.infos())
    with ContentStore(root, config=CHILD_OPTS) as store:  # reopens clean, and goes on
        assert store.recovered_records == 0
        store.maintain(ages_zero=True)
        assert {e.location.tier for e in store.search()} == {"archive"}
        current = {i.dict_id for i in store.dicts.current().values()}
        assert {e.location.dict_id for e in store.search()} <= current | {0}
        assert max(i.generation for i in store.dicts.infos()) >= generations
        check_every_page(store, pages)


def test_dictionaries_of_an_older_store_are_tracked_from_now_not_all_retrained_at_once(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    """dicts.log lines written before retraining have no pool: the store's size when first seen is taken."""
    products, _ = split(real_pages)
    pages = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[:60])]
    with ContentStore(tmp_path, config=OPTS) as store:
        put_all(store, pages[:20])
        store.maintain(ages_zero=True)
        put_all(store, pages[20:])  # 60 >= 3 x 20: due at 4x (80) with the pool known
        (info,) = store.dicts.infos()
    log = tmp_path / "dicts" / "dicts.log"
    old_line = {"id": info.dict_id, "d": info.domain, "z": info.size_bytes, "n": info.samples, "c": info.created_ms}
    log.write_bytes(encode_log_record(old_line))  # as the store wrote it before retraining existed
    with ContentStore(tmp_path, config=OPTS) as store:
        assert store.dicts.infos()[0].pool == 0
        assert store.maintain(ages_zero=True).dictionaries_trained == 0  # not taken as "trained for 20 samples"
        (tracked,) = store.dicts.infos()
        assert (tracked.dict_id, tracked.generation, tracked.pool) == (info.dict_id, 1, 60)
    with ContentStore(tmp_path, config=OPTS) as store:  # the tracking line is durable and replaces the first
        (again,) = store.dicts.infos()
        assert (again.pool, again.trained_seq) == (60, tracked.trained_seq)
        more = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[60:240], start=60)]
        put_all(store, more)  # 240 = 4 x 60
        assert store.maintain(ages_zero=True).retrained == ["shopdrift.com:growth"]
        check_every_page(store, dict(pages + more))


def test_the_settings_reach_maintenance_and_store_stats_lists_the_generations(
    tmp_path: Path,
    real_pages: list[tuple[str, bytes]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    products, _ = split(real_pages)
    pages = [(f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[:50])]
    data = tmp_path / "data"
    for name, value in {
        "DATA_DIR": str(data),
        "STORE_COLD_LEVEL": "3",
        "STORE_ARCHIVE_LEVEL": "3",
        "STORE_DICT_MIN_SAMPLES": "16",
        "STORE_DICT_RETRAIN_GROWTH": "2",  # 50 >= 2 x 20
    }.items():
        monkeypatch.setenv(f"CRAWLSTREAM_{name}", value)
    with ContentStore(data / "store", config=StoreConfig(dict_min_samples=16)) as store:
        put_all(store, pages[:20])
    assert cli_main(["store", "maintain", "--now"]) == 0
    with ContentStore(data / "store", config=StoreConfig(dict_min_samples=16, dict_retrain_growth=0)) as store:
        put_all(store, pages[20:])
    capsys.readouterr()
    assert cli_main(["store", "maintain", "--now"]) == 0
    report = json.loads(capsys.readouterr()[0])
    assert report["dictionaries_trained"] == 1
    assert report["dictionaries_retrained"] == ["shopdrift.com:growth"]
    assert cli_main(["store", "stats"]) == 0
    stats = json.loads(capsys.readouterr()[0])
    (row,) = stats["dictionary_versions"]
    assert (row["domain"], row["generation"], row["current"], row["records"], row["pool"]) == (
        "shopdrift.com",
        2,
        True,
        50,
        50,
    )
    assert stats["dictionaries"] == 1 and row["age_s"] >= 0


def test_probe_windows_are_the_first_and_newest_distinct_pages_and_need_two_windows(
    real_pages: list[tuple[str, bytes]],
) -> None:
    from crawlstream.store._model import Entry, Location
    from crawlstream.store._retrain import probe_windows

    loc = Location("hot/1.seg", 0, 1, 0, "hot")
    entries = [
        Entry(f"https://{SHOP}/{i}", i, loc, content_hash(body), len(body), i, 0, "shopdrift.com", f"/{i}")
        for i, (_, body) in enumerate(real_pages[:20])
    ]
    assert probe_windows(entries[:9], 5, 1 << 30) is None  # 9 < 2 x 5
    early, late = probe_windows(entries, 5, 1 << 30) or ([], [])
    assert [e.seq for e in early] == [0, 1, 2, 3, 4] and [e.seq for e in late] == [19, 18, 17, 16, 15]
    early, late = probe_windows(entries, 5, 1) or ([], [])  # a byte cap keeps at least one page each
    assert len(early) == len(late) == 1


def test_a_dictionary_write_cut_short_by_a_crash_is_cleared_at_start_up(
    tmp_path: Path, real_pages: list[tuple[str, bytes]]
) -> None:
    """A kill inside DictionaryStore.add: after the temporary file, or after the file but before its log line."""
    products, _ = split(real_pages)
    pages = dict((f"https://{SHOP}/book/{i}", b) for i, b in enumerate(products[:20]))
    with ContentStore(tmp_path, config=OPTS) as store:
        put_all(store, list(pages.items()))
        store.maintain(ages_zero=True)
        (info,) = store.dicts.infos()
    dicts = tmp_path / "dicts"
    kept = (dicts / f"{info.dict_id}.zdict.zst").read_bytes()
    (dicts / f"{info.dict_id + 1}.zdict.zst").write_bytes(kept)  # written, line never appended
    (dicts / f".{info.dict_id + 2}.zdict.zst.tmp-123").write_bytes(kept[:100])  # cut inside write_atomically
    with ContentStore(tmp_path, config=OPTS) as store:
        assert sorted(p.name for p in dicts.iterdir()) == sorted(["dicts.log", f"{info.dict_id}.zdict.zst"])
        assert store.dicts.next_id() == info.dict_id + 1
        check_every_page(store, pages)
