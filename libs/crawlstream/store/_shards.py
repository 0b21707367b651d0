"""The content store of a crawl: 128 shards, one per domain checksum (ADR 028).

Layout under the store root (``<data_dir>/store``)::

    LAYOUT          {"store_layout": "sharded", "shards": 128}
    shards/<ccc>/   one ContentStore per checksum value ccc (000 ... 127): its own WRITER.lock,
                    segments, dictionaries and index (``_store``)

A page lives in the shard of its registered domain's checksum, the 7 bits that also pick its
partition (``partition = checksum mod P``, P a divisor of 128): the bucket-compressor member that
holds partition p of ``fetch.results`` writes exactly the shards c with ``c mod P == p``, and the
layout does not change when P does. A member *owns* the checksums of its partitions (``own`` on
assign, ``release`` on revoke or loss) and opens an owned shard on first use, taking its lock:

* a put, delete or tag for a checksum it does not own is refused (``ShardNotOwned``): a member
  that lost a partition cannot append to its shards any more (they are closed on release);
* a shard another live process holds is waited for up to ``lock_wait_s`` (a clean hand-over
  releases it within a batch; a killed holder's lock is dropped by the kernel at once), then
  refused with ``StoreLocked``, a transient error: two processes never write one shard.

Readers (``crawlstream store``, the API's content routes, WARC export) own every checksum and open
only the shards that exist. A store written before shards (``FORMAT`` at the root) is read and
written as one shard set: a single ContentStore at the root, owned whole by one writer.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawlstream.durable import write_atomically
from crawlstream.errors import ShardNotOwned, StoreLocked
from crawlstream.objectstore import ObjectStore, archive_location, open_objects
from crawlstream.store._codec import UnsupportedFormat
from crawlstream.store._codec_cache import CodecCache
from crawlstream.store._config import StoreConfig
from crawlstream.store._model import Entry, Location
from crawlstream.store._reports import RecompressReport, StoreStats, VerifyReport
from crawlstream.store._response import StoredResponse
from crawlstream.store._store import ContentStore
from crawlstream.store._urls import describe_url
from crawlstream.urls import domain_checksum

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["ALL_CHECKSUMS", "SHARDS", "ShardedStore", "open_store", "shard_dir_name"]

logger = logging.getLogger(__name__)

SHARDS = 128
ALL_CHECKSUMS = frozenset(range(SHARDS))
LAYOUT_FILE = "LAYOUT"
_LAYOUT = {"store_layout": "sharded", "shards": SHARDS}
_LEGACY = 0  # the one shard id of a store written before shards
_LOCK_RETRY_S = 0.1
_LEGACY_ARCHIVE = "store"  # the archive subprefix of a store written before shards
_SHARD_READ_FDS = 32  # segment descriptors each shard keeps open: 4,096 for all 128 (one store: 256)
# Each shard's index page cache: index_cache_bytes / 64 (64 KiB by default), so a member holding
# half the shards holds the setting's worth. An eighth each (512 KiB) held ~0.76 MB a shard warm
# (~49 MB a member), emptied by every close and filled again over ~20 minutes: a sawtooth in RSS,
# for ~14% less CPU per small put (ADR 034 "Session 27", bench shard_cache).
_INDEX_CACHE_SHARE = 64  # index_db.connect gives a connection 64 KiB at least
_COUNTED = (  # the StoreStats fields that add up across shards
    "urls",
    "bodies",
    "raw_bytes",
    "segment_bytes",
    "dict_bytes",
    "index_bytes",
    "dictionaries",
    "quarantined_regions",
    "live_bytes",
    "dead_bytes",
    "other_bytes",
)


def shard_dir_name(checksum: int) -> str:
    """``shards/<ccc>``: the checksum in decimal, as partitions are numbered."""
    return f"shards/{checksum:03d}"


def open_store(settings: Settings, *, owned: Iterable[int] = ALL_CHECKSUMS) -> ShardedStore:
    """The crawl's store under ``<data_dir>/store``, configured by the ``store.*`` settings."""
    location = archive_location(settings)
    return ShardedStore(
        settings.data_dir / "store",
        config=StoreConfig.from_settings(settings),
        owned=owned,
        lock_wait_s=settings.store.shard_lock_wait_s,
        archive=None if location is None else open_objects(location, settings.s3),
    )


class ShardedStore:
    """Routes each URL to the ContentStore of its domain checksum; see the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        config: StoreConfig | None = None,
        owned: Iterable[int] = ALL_CHECKSUMS,
        lock_wait_s: float = 30.0,
        key_fn: Callable[[str], int] | None = None,
        clock_ms: Callable[[], int] | None = None,
        archive: ObjectStore | None = None,
    ) -> None:
        """``archive``: where archive-tier segments live as objects (``store.archive_uri``): each
        shard under ``<ccc>/`` of it, a store written before shards under ``store/``."""
        self.root = Path(root)
        self.archive = archive
        self.config = config if config is not None else StoreConfig()
        self.legacy = (self.root / "FORMAT").exists()
        if not self.legacy:
            _check_layout(self.root)
        # The dictionary preload budget is the whole store's: each shard gets its share. So is the
        # index's page cache, mostly: each shard a 64th of it (128 open and warm: 2x the setting).
        self._shard_config = (
            self.config
            if self.legacy
            else dataclasses.replace(
                self.config,
                dict_preload_bytes=self.config.dict_preload_bytes // SHARDS,
                index_cache_bytes=self.config.index_cache_bytes // _INDEX_CACHE_SHARE,
            )
        )
        self.lock_wait_s = lock_wait_s
        # one memory budget for the dictionaries and zstd contexts of every shard this process opens
        self._codec_cache = CodecCache(self.config.codec_cache_bytes)
        self._key_fn = key_fn
        self._clock_ms = clock_ms
        self._lock = threading.RLock()  # guards _open and _owned (opening a shard happens under it)
        self._open: dict[int, ContentStore] = {}
        self._dirty: set[int] = set()  # shards written since the last sync: the only ones it fsyncs
        self._owned: set[int] = set()
        self._closed = False
        # one maintenance step at a time; ``release`` cancels the step on a shard it closes
        self._step_lock = threading.Lock()
        self._step_shard: int | None = None
        self._step_cancel = threading.Event()
        self._next_step = 0
        self.own(owned)

    # ------------------------------------------------------------------ ownership

    @property
    def codec_cache(self) -> CodecCache:
        """The zstd dictionaries and contexts every shard of this process shares (one budget)."""
        return self._codec_cache

    @property
    def owned(self) -> frozenset[int]:
        """The checksums this process may write."""
        return frozenset(self._owned)

    def own(self, checksums: Iterable[int]) -> None:
        """Take ``checksums`` (a member's new partitions); their shards open on first use."""
        wanted = set(checksums)
        if bad := sorted(c for c in wanted if not 0 <= c < SHARDS):
            raise ValueError(f"domain checksums are 0..{SHARDS - 1}, got {bad}")
        with self._lock:
            self._owned |= wanted

    def release(self, checksums: Iterable[int]) -> None:
        """Give ``checksums`` up: their shards are synced and closed (their locks dropped), and
        writes for them are refused from now on. A maintenance step on one of them is cancelled."""
        with self._lock:
            self._owned -= set(checksums)
            closing = [s for s in self._open if not self._owns_shard(s)]
        if not closing:
            return
        if self._step_shard in closing:
            self._step_cancel.set()
        with self._step_lock, self._lock:
            for shard in closing:
                self._dirty.discard(shard)  # close syncs it
                store = self._open.pop(shard, None)
                if store is not None:
                    store.close()
        logger.info("content store: released %d shard(s)", len(closing))

    def shard_of(self, domain: str) -> int | None:
        """The shard (domain checksum) pages of ``domain`` are stored in; None in a store
        written before shards (one root)."""
        return None if self.legacy else domain_checksum(domain)

    def _shard_id(self, checksum: int) -> int:
        return _LEGACY if self.legacy else checksum

    def _owns_shard(self, shard: int) -> bool:
        """Whether any owned checksum lives in ``shard`` (the one root of a legacy store: any at all)."""
        return bool(self._owned) if self.legacy else shard in self._owned

    def _shard_root(self, shard: int) -> Path:
        return self.root if self.legacy else self.root / shard_dir_name(shard)

    def _writable(self, domain: str) -> ContentStore:
        checksum = domain_checksum(domain)
        with self._lock:
            if checksum not in self._owned:
                raise ShardNotOwned(
                    f"domain {domain!r} is in shard {checksum} of the content store {self.root}, which this "
                    f"process does not own (it owns {len(self._owned)} of {SHARDS}): the member holding partition "
                    f"{checksum} mod P of fetch.results writes it"
                )
            shard = self._shard_id(checksum)
            store = self._shard(shard, create=True)
            assert store is not None
            self._dirty.add(shard)
            return store

    def _readable(self, domain: str) -> ContentStore | None:
        with self._lock:
            return self._shard(self._shard_id(domain_checksum(domain)), create=False)

    def _shard(self, shard: int, *, create: bool) -> ContentStore | None:
        """The open shard, opened now if needed (None: it does not exist and ``create`` is off)."""
        if self._closed:
            raise ValueError(f"the content store {self.root} is closed")
        store = self._open.get(shard)
        if store is not None:
            return store
        root = self._shard_root(shard)
        if not create and not (self.legacy or (root / "FORMAT").exists()):
            return None
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                store = ContentStore(
                    root,
                    config=self._shard_config,
                    read_fds=256 if self.legacy else _SHARD_READ_FDS,
                    key_fn=self._key_fn,
                    clock_ms=self._clock_ms,
                    archive=self._shard_archive(shard),
                    codec_cache=self._codec_cache,
                )
                break
            except StoreLocked:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(_LOCK_RETRY_S)
        self._open[shard] = store
        return store

    def _shard_archive(self, shard: int) -> ObjectStore | None:
        if self.archive is None:
            return None
        return self.archive.child(_LEGACY_ARCHIVE if self.legacy else f"{shard:03d}")

    def _existing(self) -> list[int]:
        """Every shard on disk (opened by readers as they go)."""
        if self.legacy:
            return [_LEGACY]
        found = []
        for path in sorted((self.root / "shards").glob("[0-9][0-9][0-9]")):
            if (path / "FORMAT").exists() and int(path.name) < SHARDS:
                found.append(int(path.name))
        return found

    def _stores(self) -> Iterator[tuple[int, ContentStore]]:
        """The owned shards on disk, opened as they come: every shard for a reader, a member's own
        for a member (another member's shards are never opened: that would take their locks)."""
        for shard in self._existing():
            with self._lock:
                if not self._owns_shard(shard):
                    continue
                store = self._shard(shard, create=False)
            if store is not None:
                yield shard, store

    # ------------------------------------------------------------------ writes

    def put(self, url: str, body: bytes, **kwargs: Any) -> Location:
        """``ContentStore.put`` into the URL's shard (which this process must own)."""
        return self._writable(describe_url(url, self._key_fn).domain).put(url, body, **kwargs)

    def delete(self, url: str) -> bool:
        return self._writable(describe_url(url, self._key_fn).domain).delete(url)

    def tag(self, url: str, *tags: str) -> None:
        self._writable(describe_url(url, self._key_fn).domain).tag(url, *tags)

    def untag(self, url: str, *tags: str) -> None:
        self._writable(describe_url(url, self._key_fn).domain).untag(url, *tags)

    def sync(self) -> None:
        """fsync the shards written since the last sync (an idle shard's fsyncs cost ~0.1 ms each:
        13 ms a batch with 128 open)."""
        with self._lock:
            stores = [self._open[s] for s in self._dirty if s in self._open]
            self._dirty.clear()
        for store in stores:
            store.sync()

    def close(self) -> None:
        self._step_cancel.set()
        with self._step_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            stores, self._open = list(self._open.values()), {}
        for store in stores:
            store.close()

    def __enter__(self) -> ShardedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    def entry(self, url: str) -> Entry | None:
        parts = describe_url(url, self._key_fn)
        store = self._readable(parts.domain)
        return None if store is None else store.entry(url)

    def get(self, url: str) -> bytes:
        parts = describe_url(url, self._key_fn)
        return self.get_by_key(parts.url_key, parts.url)

    def get_by_key(self, url_key: int, url: str) -> bytes:
        store = self._readable(describe_url(url, self._key_fn).domain)
        if store is None:
            raise KeyError(f"{url} (url_key {url_key}) is not stored")
        return store.get_by_key(url_key, url)

    def read_location(self, loc: Location, *, shard: int | None, expected_hash: bytes | None = None) -> bytes:
        """Read one record where a ``content.stored`` event says it is: ``shard`` is its
        ``location.shard`` (None in a store written before shards). KeyError: no such shard."""
        if (shard is None) != self.legacy or (shard is not None and not 0 <= shard < SHARDS):
            raise KeyError(f"shard {shard!r} is not a shard of the content store {self.root}")
        with self._lock:
            store = self._shard(_LEGACY if shard is None else shard, create=False)
        if store is None:
            raise KeyError(f"shard {shard} of the content store {self.root} does not exist")
        return store.read_location(loc, expected_hash=expected_hash)

    def _of_entry(self, entry: Entry) -> ContentStore:
        store = self._readable(entry.domain)
        if store is None:
            raise KeyError(f"{entry.url} is not stored (its shard does not exist)")
        return store

    def read_response(self, entry: Entry) -> tuple[bytes, StoredResponse | None]:
        return self._of_entry(entry).read_response(entry)

    def reference_heads(self, entries: Iterable[Entry]) -> dict[str, StoredResponse]:
        by_shard: dict[int, list[Entry]] = defaultdict(list)
        for entry in entries:
            by_shard[self._shard_id(domain_checksum(entry.domain))].append(entry)
        found: dict[str, StoredResponse] = {}
        for shard_entries in by_shard.values():
            found.update(self._of_entry(shard_entries[0]).reference_heads(shard_entries))
        return found

    def search(
        self, domain: str | None = None, path_prefix: str | None = None, tag: str | None = None
    ) -> Iterator[Entry]:
        """Entries matching all given filters, sorted by URL: one shard for a domain, else every
        shard's sorted entries merged."""
        if domain is not None:
            store = self._readable(domain)
            if store is not None:
                yield from store.search(domain, path_prefix, tag)
            return
        streams = [store.search(None, path_prefix, tag) for _, store in self._stores()]
        yield from heapq.merge(*streams, key=lambda e: e.url)

    def __len__(self) -> int:
        return sum(len(store) for _, store in self._stores())

    # ------------------------------------------------------------------ integrity

    def _named(self, shard: int, segment: str) -> str:
        return segment if self.legacy else f"{shard_dir_name(shard)}/{segment}"

    def quarantined(self) -> list[tuple[str, int]]:
        """Damaged regions (segment, offset), segments named under the store root."""
        return [(self._named(s, seg), off) for s, store in self._stores() for seg, off in store.quarantined()]

    def quarantined_urls(self) -> list[str]:
        return sorted(url for _, store in self._stores() for url in store.quarantined_urls())

    def verify(self) -> VerifyReport:
        total = VerifyReport()
        for shard, store in self._stores():
            report = store.verify()
            total.segments += report.segments
            total.records += report.records
            total.bodies_checked += report.bodies_checked
            total.problems += [dataclasses.replace(p, segment=self._named(shard, p.segment)) for p in report.problems]
        return total

    def rebuild_index(self) -> int:
        return sum(store.rebuild_index() for _, store in self._stores())

    # ------------------------------------------------------------------ maintenance

    def maintain(
        self,
        now_ms: int | None = None,
        *,
        ages_zero: bool = False,
        compact: bool = True,
        progress: Callable[[RecompressReport], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> RecompressReport:
        """``ContentStore.maintain`` on each owned shard in turn (readers own them all)."""
        total = RecompressReport(kind="maintain")
        for _, store in self._stores():
            if cancel is not None and cancel.is_set():
                break
            total.merge(store.maintain(now_ms, ages_zero=ages_zero, compact=compact, progress=progress, cancel=cancel))
        return total

    def maintenance_step(
        self,
        now_ms: int | None = None,
        *,
        ages_zero: bool = False,
        compact: bool = True,
        cancel: threading.Event | None = None,
    ) -> RecompressReport | None:
        """One bounded step on the next owned shard that has work (round robin, so every shard
        gets its turn); None when none has. ``release`` of that shard cancels it."""
        shards = [s for s, _ in self._stores()]
        if not shards:
            return None
        start = self._next_step % len(shards)
        for shard in shards[start:] + shards[:start]:
            if cancel is not None and cancel.is_set():
                return None
            with self._step_lock:
                store = self._open.get(shard)
                if store is None:  # released meanwhile
                    continue
                self._step_shard = shard
                self._step_cancel.clear()
                watcher = _EitherSet(cancel, self._step_cancel)
                try:
                    report = store.maintenance_step(now_ms, ages_zero=ages_zero, compact=compact, cancel=watcher)
                finally:
                    self._step_shard = None
            if report is not None:
                self._next_step = shards.index(shard) + 1
                return report
        return None

    def maintenance_backlog(self, now_ms: int | None = None, *, ages_zero: bool = False) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for _, store in self._stores():
            for key, value in store.maintenance_backlog(now_ms, ages_zero=ages_zero).items():
                total[key] += value
        return dict(total)

    def recompress(
        self, older_than_s: float = 0.0, *, tier: str = "cold", now_ms: int | None = None
    ) -> RecompressReport:
        total = RecompressReport(kind="maintain", tier=tier)
        for _, store in self._stores():
            total.merge(store.recompress(older_than_s, tier=tier, now_ms=now_ms))
        return total

    # ------------------------------------------------------------------ stats

    def stats(self) -> StoreStats:
        """The owned shards' counts added up (a reader's: the whole store; dictionary rows name their shard)."""
        parts = [(shard, store.stats()) for shard, store in self._stores()]
        total = merge_stats(parts, legacy=self.legacy)
        if not self.legacy:
            total.other_bytes += (self.root / LAYOUT_FILE).stat().st_size
        return total


def merge_stats(parts: list[tuple[int, StoreStats]], *, legacy: bool = False) -> StoreStats:
    """The sum of several shards' stats."""
    total = StoreStats(
        urls=0,
        bodies=0,
        raw_bytes=0,
        segment_bytes=0,
        dict_bytes=0,
        index_bytes=0,
        dictionaries=0,
        quarantined_regions=0,
        by_tier={},
    )
    for shard, stats in parts:
        for name in _COUNTED:
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        for tier, numbers in stats.by_tier.items():
            row = total.by_tier.setdefault(tier, {})
            for key, value in numbers.items():
                row[key] = row.get(key, 0) + value
        total.quarantined_urls += stats.quarantined_urls
        total.dictionary_versions += [row if legacy else {"shard": shard, **row} for row in stats.dictionary_versions]
    total.quarantined_urls.sort()
    return total


class _EitherSet(threading.Event):
    """Set when either of two events is (a cancel flag for ``Tiering.step``, which polls ``is_set``)."""

    def __init__(self, first: threading.Event | None, second: threading.Event) -> None:
        super().__init__()
        self._first, self._second = first, second

    def is_set(self) -> bool:
        return self._second.is_set() or (self._first is not None and self._first.is_set())


def _check_layout(root: Path) -> None:
    """Write the layout marker of a new store; refuse another layout."""
    marker = root / LAYOUT_FILE
    if marker.exists():
        try:
            found = json.loads(marker.read_text())
        except ValueError:
            found = None
        if found != _LAYOUT:
            raise UnsupportedFormat(
                f"content store {root} has layout {found!r}, this build reads {_LAYOUT}; open it with the "
                "build that wrote it"
            )
        return
    root.mkdir(parents=True, exist_ok=True)
    write_atomically(marker, json.dumps(_LAYOUT).encode())
