"""The sharded content store (ADR 028): 128 shards by domain checksum, owned by the member whose
partitions map to them, one process per shard, and a store written before shards read as one set."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from crawlstream.errors import ShardNotOwned, StoreLocked
from crawlstream.settings import load
from crawlstream.store import ContentStore, ShardedStore, StoreConfig, UnsupportedFormat, open_store
from crawlstream.urls import domain_checksum

CONFIG = StoreConfig(fsync="never", dict_min_samples=10_000, global_dict_min_samples=10_000)
DOMAINS = [f"site{i}.example" for i in range(12)]


def _url(domain: str, i: int) -> str:
    return f"http://{domain}/page/{i}"


def _body(domain: str, i: int) -> bytes:
    return f"<html><title>{domain} {i}</title>{'text ' * (50 + i)}</html>".encode()


def _fill(store: ShardedStore, domains: list[str] = DOMAINS, pages: int = 3) -> None:
    for domain in domains:
        for i in range(pages):
            store.put(_url(domain, i), _body(domain, i), status=200, fetched_at_ms=1_000 + i)


def test_each_domain_lives_in_the_shard_of_its_checksum_and_reads_merge_every_shard(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with ShardedStore(root, config=CONFIG) as store:
        _fill(store)
        assert not store.legacy
        assert len(store) == 3 * len(DOMAINS)
        urls = [e.url for e in store.search()]
        assert urls == sorted(_url(d, i) for d in DOMAINS for i in range(3))
        assert [e.url for e in store.search(domain=DOMAINS[4])] == [_url(DOMAINS[4], i) for i in range(3)]
        stats = store.stats()
        assert stats.urls == 3 * len(DOMAINS)
        assert store.verify().ok
    shards = sorted(int(p.name) for p in (root / "shards").iterdir())
    assert shards == sorted({domain_checksum(d) for d in DOMAINS})
    for domain in DOMAINS:  # each shard is a store of its own holding only its domains
        with ContentStore(root / "shards" / f"{domain_checksum(domain):03d}", config=CONFIG) as shard:
            assert shard.get(_url(domain, 1)) == _body(domain, 1)
            same = {d for d in DOMAINS if domain_checksum(d) == domain_checksum(domain)}
            assert {e.domain for e in shard.search()} <= same
    with ShardedStore(root, config=CONFIG) as reopened:  # a reader opens the shards it needs
        assert reopened.get(_url(DOMAINS[7], 2)) == _body(DOMAINS[7], 2)
        assert reopened.entry("http://never-stored.example/") is None
        with pytest.raises(KeyError):
            reopened.get("http://never-stored.example/")


def test_a_member_writes_only_the_shards_it_owns_and_nothing_after_releasing_them(tmp_path: Path) -> None:
    mine, other = DOMAINS[0], next(d for d in DOMAINS if domain_checksum(d) != domain_checksum(DOMAINS[0]))
    with ShardedStore(tmp_path / "store", config=CONFIG, owned=()) as store:
        with pytest.raises(ShardNotOwned, match="does not own"):
            store.put(_url(mine, 0), b"x")
        store.own({domain_checksum(mine)})
        store.put(_url(mine, 0), _body(mine, 0))
        with pytest.raises(ShardNotOwned, match=f"shard {domain_checksum(other)}"):
            store.put(_url(other, 0), _body(other, 0))
        store.release({domain_checksum(mine)})
        # fenced: the late write of a member that lost the partition is refused, not appended
        with pytest.raises(ShardNotOwned):
            store.put(_url(mine, 1), _body(mine, 1))
        with pytest.raises(ShardNotOwned):
            store.delete(_url(mine, 0))
        assert store.owned == frozenset()
        # its lock is gone: another writer may open the shard now
        with ContentStore(tmp_path / "store" / "shards" / f"{domain_checksum(mine):03d}", config=CONFIG) as shard:
            assert shard.get(_url(mine, 0)) == _body(mine, 0)
            assert shard.entry(_url(mine, 1)) is None


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from crawlstream.store import ShardedStore, StoreConfig
    from crawlstream.urls import domain_checksum
    root, domain = Path(sys.argv[1]), sys.argv[2]
    store = ShardedStore(root, config=StoreConfig(fsync="never"), owned={domain_checksum(domain)})
    for i in range(20):
        store.put(f"http://{domain}/child/{i}", f"child page {i} ".encode() * 40)
    print("READY", flush=True)
    time.sleep(120)
    """
)


def test_a_second_process_on_a_held_shard_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    root = tmp_path / "store"
    held, free = DOMAINS[0], next(d for d in DOMAINS if domain_checksum(d) != domain_checksum(DOMAINS[0]))
    ShardedStore(root, config=CONFIG, owned=()).close()  # the layout exists before both start
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root), held], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY", child.stderr
        with ShardedStore(root, config=CONFIG, lock_wait_s=0.3) as store:
            store.put(_url(free, 0), _body(free, 0))  # other shards are not held
            started = time.monotonic()
            with pytest.raises(StoreLocked, match="open in another process"):
                store.put(_url(held, 0), _body(held, 0))
            assert time.monotonic() - started >= 0.3  # it waited for a hand-over first
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            # the kernel dropped the lock with the process: the shard opens, its pages are there
            store.put(_url(held, 0), _body(held, 0))
            assert store.get(f"http://{held}/child/19") == b"child page 19 " * 40
            assert len(list(store.search(domain=held))) == 21
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_a_store_written_before_shards_is_read_and_written_as_one_set(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with ContentStore(root, config=CONFIG) as old:
        old.put(_url(DOMAINS[0], 0), _body(DOMAINS[0], 0))
    with ShardedStore(root, config=CONFIG) as store:
        assert store.legacy and store.shard_of(DOMAINS[0]) is None
        assert store.get(_url(DOMAINS[0], 0)) == _body(DOMAINS[0], 0)
        store.put(_url(DOMAINS[1], 0), _body(DOMAINS[1], 0))
        assert [e.url for e in store.search()] == sorted([_url(DOMAINS[0], 0), _url(DOMAINS[1], 0)])
    assert not (root / "shards").exists() and not (root / "LAYOUT").exists()
    member = ShardedStore(root, config=CONFIG, owned={domain_checksum(DOMAINS[0])})
    with member, pytest.raises(ShardNotOwned):  # one root, but writes still follow ownership
        member.put(_url(DOMAINS[1], 1), b"y")


def test_a_sharded_root_is_refused_by_a_single_store(tmp_path: Path) -> None:
    ShardedStore(tmp_path / "store", config=CONFIG).close()
    with pytest.raises(UnsupportedFormat, match="sharded content store"):
        ContentStore(tmp_path / "store", config=CONFIG)


def test_maintenance_steps_take_the_owned_shards_in_turn(tmp_path: Path) -> None:
    with ShardedStore(tmp_path / "store", config=CONFIG) as store:
        _fill(store, DOMAINS[:4])
        shards = {domain_checksum(d) for d in DOMAINS[:4]}
        reports = []
        while (report := store.maintenance_step(ages_zero=True)) is not None:
            reports.append(report)
            assert len(reports) < 50
        assert sum(r.moved_urls for r in reports) >= 12
        assert {e.location.tier for e in store.search()} == {"archive"}
        assert len(reports) >= len(shards)
        for domain in DOMAINS[:4]:
            assert store.get(_url(domain, 2)) == _body(domain, 2)
        store.release(shards)
        assert store.maintenance_step(ages_zero=True) is None  # nothing owned, nothing to do


def test_open_store_takes_the_settings(tmp_path: Path) -> None:
    settings = load({"CRAWLSTREAM_DATA_DIR": str(tmp_path), "CRAWLSTREAM_STORE_SHARD_LOCK_WAIT_S": "2.5"})
    with open_store(settings, owned=()) as store:
        assert store.root == tmp_path / "store" and store.lock_wait_s == 2.5 and store.owned == frozenset()
        # the dictionary preload budget is the whole store's: each shard gets 1/128
        assert store._shard_config.dict_preload_bytes == settings.store.dict_preload_bytes // 128


def test_a_member_counts_and_maintains_only_its_own_shards_and_never_opens_another_members(tmp_path: Path) -> None:
    first, second = DOMAINS[0], next(d for d in DOMAINS if domain_checksum(d) != domain_checksum(DOMAINS[0]))
    a = ShardedStore(tmp_path / "store", config=CONFIG, owned={domain_checksum(first)}, lock_wait_s=5.0)
    b = ShardedStore(tmp_path / "store", config=CONFIG, owned={domain_checksum(second)}, lock_wait_s=5.0)
    with a, b:
        _fill(a, [first])
        _fill(b, [second])
        started = time.monotonic()
        assert a.stats().urls == 3 and len(a) == 3 and [e.domain for e in a.search()] == [first] * 3
        while a.maintenance_step(ages_zero=True) is not None:
            pass
        assert time.monotonic() - started < 4.0  # b's shard was never waited for
        assert {e.location.tier for e in b.search()} == {"hot"}  # b's pages are b's to move
        assert b.stats().urls == 3


def test_sync_fsyncs_only_the_shards_written_since_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real_sync = ContentStore.sync

    def counting_sync(self: ContentStore) -> None:
        synced.append(self.root)
        real_sync(self)

    monkeypatch.setattr(ContentStore, "sync", counting_sync)
    with ShardedStore(tmp_path / "store", config=CONFIG) as store:
        _fill(store, DOMAINS[:6], pages=1)
        store.sync()
        assert sorted(p.name for p in synced) == sorted({f"{domain_checksum(d):03d}" for d in DOMAINS[:6]})
        synced.clear()
        store.put(_url(DOMAINS[2], 9), _body(DOMAINS[2], 9))
        store.sync()
        assert [p.name for p in synced] == [f"{domain_checksum(DOMAINS[2]):03d}"]
        synced.clear()
        store.sync()  # nothing written since
        assert synced == []
