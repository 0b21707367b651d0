"""The content store: append-only zstd segments, dictionaries, a url index on disk and tiers.

Owns everything under its root directory::

    segments/<tier>/<n>.seg    records (see _codec): independently decompressible frames
    segments/<tier>/<n>.seg.invalid   copies of quarantined (damaged) regions
    (with ``archive``: archive-tier segments are objects ``archive/<n>.seg`` under that prefix)
    dicts/                     zstd dictionaries + dicts.log
    FORMAT                     {"store_format": 4}: format 3 (the index as a snapshot + index.log)
                               is migrated on first open, other layouts are refused, never misread
    WRITER.lock                flock held while the store is open: one process at a time
    index.sqlite (-wal, -shm)  the url index (ADR 036): url -> location, tags, where each segment's
                               indexed records end (rebuildable from the segments + ops.log)
    ops.log                    CRC-framed tombstones and tag operations (not rebuildable)
    quarantine.log             damaged regions: never served again

Durability contract (``fsync``): a record is *acknowledged* when ``put`` returns. With
"always" its segment record is fsynced before that; with "batch" (default) it is in
the OS page cache (survives kill -9, not power loss) and fsynced by ``sync``/``close``/a
segment roll/``recompress``; "never" leaves even those to the OS.
Ordering on every write: segment record first, index row second; index rows are committed in
transactions of a few thousand (``_index``). Start-up truncates torn tails and re-indexes
complete records that a crash left unindexed (past the committed ends), so an acknowledged
record is never lost and a torn one is never served.

One process at a time opens a root (opening repairs torn tails, so readers are writers too):
``WRITER.lock`` is an exclusive flock taken first, refused with ``StoreLocked`` while another
live process holds it, and dropped by the kernel when that process dies. Threads of the
holder share a lock. A crawl's store is 128 such roots, one per domain checksum
(``_shards.ShardedStore``), each written by the member that owns its partition.

``ContentStore`` is the public surface; each job is a part of its own (ADR 021):
``_segments`` (segment files, the active hot segment), ``_writer`` (put), ``_reader``
(reads and checks), ``_index`` + ``_index_db`` (the url index in SQLite, tombstones and tags;
``_index_legacy`` migrates the layout before it), ``_quarantine`` (damaged regions), ``_recovery``
(start-up recovery, verify, rebuild-index), ``_training`` (dictionaries), ``_tiering`` +
``_rewrite`` (maintenance batches: tiers, groups, compaction, garbage), ``_stats``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from crawlstream.durable import try_lock_exclusive
from crawlstream.errors import BadDataError, StorageUnavailable, StoreLocked
from crawlstream.store._codec_cache import CodecCache
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import DictionaryStore
from crawlstream.store._index import UrlIndex
from crawlstream.store._index_db import DAMAGED, INDEX_FILE, IndexDamaged, is_text
from crawlstream.store._index_legacy import migrate_legacy_index, remove_legacy_files
from crawlstream.store._logs import read_log
from crawlstream.store._maintenance import GroupShape
from crawlstream.store._model import Entry, Location
from crawlstream.store._quarantine import Quarantine
from crawlstream.store._reader import RecordReader
from crawlstream.store._recovery import Integrity, check_format, mark_format, quarantined_urls
from crawlstream.store._reports import RecompressReport, StoreStats, VerifyReport
from crawlstream.store._response import StoredResponse, stored_response
from crawlstream.store._rewrite import Rewriter
from crawlstream.store._segments import Segments
from crawlstream.store._stats import collect_stats
from crawlstream.store._tiering import Tiering
from crawlstream.store._training import DictionaryTrainer
from crawlstream.store._urls import UrlParts, describe_url
from crawlstream.store._writer import PageWriter

if TYPE_CHECKING:
    from crawlstream.objectstore import ObjectStore

__all__ = ["WRITER_LOCK", "ContentStore", "RecompressReport", "StoreStats", "VerifyReport"]

logger = logging.getLogger(__name__)

WRITER_LOCK = "WRITER.lock"


def _take_writer_lock(root: Path) -> int:
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = try_lock_exclusive(root / WRITER_LOCK)
    except OSError as exc:
        raise StorageUnavailable(f"cannot open the content store {root}: {exc}") from exc
    if fd is None:
        raise StoreLocked(
            f"the content store {root} is open in another process (a bucket-compressor member, a "
            "`crawlstream store` command, or an API serving content): one process at a time writes a "
            "store or shard; stop that one first (the lock is released when it exits)"
        )
    return fd


class ContentStore:
    """Keeps every page compact and readable alone. See the module docstring for layout."""

    def __init__(
        self,
        root: Path,
        *,
        config: StoreConfig | None = None,
        read_fds: int = 256,
        key_fn: Callable[[str], int] | None = None,
        clock_ms: Callable[[], int] | None = None,
        archive: ObjectStore | None = None,
        codec_cache: CodecCache | None = None,
    ) -> None:
        """``config``: the ``store.*`` settings (``StoreConfig()``, their defaults, when None).
        ``codec_cache``: the dictionaries and zstd contexts in memory (a sharded store shares one);
        one of ``store.codec_cache_bytes`` when None.
        ``read_fds``: segment descriptors kept open for reads (a sharded store gives each shard a share).
        ``archive``: where this root's archive-tier segments live as objects (``store.archive_uri``,
        already narrowed to this root's prefix); None keeps them in ``segments/archive``."""
        self.config = config if config is not None else StoreConfig()
        self.root = Path(root)
        self.levels = self.config.levels
        self.recovered_records = 0
        self._key_fn = key_fn
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._archive = archive
        self._codec_cache = codec_cache if codec_cache is not None else CodecCache(self.config.codec_cache_bytes)
        self._lock = threading.RLock()
        # one maintenance step at a time: taken before _lock, never after it
        self._maint_lock = threading.Lock()
        self._writer_lock = _take_writer_lock(self.root)
        try:
            self._open(max(1, read_fds))
        except BaseException:
            os.close(self._writer_lock)
            raise

    # ------------------------------------------------------------------ start-up

    def _open(self, read_fds: int) -> None:
        """Build the parts and bring the index up to date with the files (order matters: see each step)."""
        config, lock = self.config, self._lock
        # 1. refuse another layout before touching anything; migrate the index of format 3 (once)
        legacy = check_format(self.root)
        self._segments = Segments(self.root, config, read_fds=read_fds, archive=self._archive)
        self.dicts = DictionaryStore(self.root / "dicts", fsync=config.fsyncs, cache=self._codec_cache)
        self.dicts.preload(config.dict_preload_bytes)
        if legacy:
            migrate_legacy_index(self.root, config, self._key_of, self._parts)
            mark_format(self.root)
            remove_legacy_files(self.root)
        # 2. the index, and the logs read (torn tails truncated) before any is opened for appending
        self._index = self._open_index()
        ops = read_log(self._index.ops_path)
        self._quarantine = Quarantine(self.root, self._segments, config)
        self._index.open_ops_log()
        # 3. the parts that work on them
        self._reader = RecordReader(self._segments, self.dicts, self._quarantine, lock, self._key_of)
        self._writer = PageWriter(
            config,
            segments=self._segments,
            dicts=self.dicts,
            index=self._index,
            lock=lock,
            parts=self._parts,
            clock_ms=self._clock_ms,
            quarantined=self._quarantine.has,
        )
        self._trainer = DictionaryTrainer(
            config, dicts=self.dicts, index=self._index, reader=self._reader, lock=lock, clock_ms=self._clock_ms
        )
        shapes: dict[tuple[str, int], GroupShape] = {}
        unmovable: set[tuple[str, int, int]] = set()
        rewriter = Rewriter(
            config,
            segments=self._segments,
            dicts=self.dicts,
            reader=self._reader,
            writer=self._writer,
            lock=lock,
            shapes=shapes,
            unmovable=unmovable,
        )
        self._tiering = Tiering(
            config,
            segments=self._segments,
            dicts=self.dicts,
            index=self._index,
            quarantine=self._quarantine,
            trainer=self._trainer,
            lock=lock,
            maint_lock=self._maint_lock,
            shapes=shapes,
            unmovable=unmovable,
            rewriter=rewriter,
            clock_ms=self._clock_ms,
        )
        self._integrity = Integrity(
            segments=self._segments,
            reader=self._reader,
            quarantine=self._quarantine,
            index=self._index,
            lock=lock,
            maint_lock=self._maint_lock,
            parts=self._parts,
        )
        # 4. the index: records a crash left unindexed, and ops.log past what it committed
        self.recovered_records = self._integrity.recover_segment_tails(ops)
        with lock:
            self._tiering.collect_garbage()
            self._segments.offload_local_archive()

    def _open_index(self) -> UrlIndex:
        """The index database; a damaged one (or one a process found damaged) is removed for a new one,
        which start-up fills from the segments and ops.log (as ``rebuild-index`` would)."""
        path = self.root / INDEX_FILE
        marker = path.with_name(INDEX_FILE + DAMAGED)
        try:
            if not marker.exists():
                index = UrlIndex(self.root, self.config)
                index.segment_ends()  # reads the pages start-up needs first: damage shows here or later
                return index
            logger.error("%s was found damaged while in use: re-indexing every segment", path)
        except IndexDamaged as exc:
            logger.error("%s; re-indexing every segment", exc)
        for suffix in ("", "-wal", "-shm"):
            path.with_name(INDEX_FILE + suffix).unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        return UrlIndex(self.root, self.config)

    def _key_of(self, url: str) -> int:
        return describe_url(url, self._key_fn).url_key

    def _parts(self, url: str) -> UrlParts:
        return describe_url(url, self._key_fn)

    # ------------------------------------------------------------------ writes

    def put(
        self,
        url: str,
        body: bytes,
        *,
        content_type: str | None = None,
        title: str | None = None,
        status: int | None = None,
        fetched_at_ms: int | None = None,
        tags: Iterable[str] = (),
        response_head: bytes | None = None,
        ip_address: str | None = None,
        request_head: bytes | None = None,
        body_frame: bytes | None = None,
    ) -> Location:
        """Store ``body`` for ``url``; idempotent (same url + body is a no-op).

        A different body replaces the URL's older record (its tags carry over). Identical
        bodies under other URLs are stored once: the second URL gets a small reference
        record and the first body's location. ``response_head`` (status line + header lines,
        CRLF-terminated), ``ip_address`` and ``request_head`` (the request line and header
        lines sent) go into the record's compressed metadata, not the index: ``read_response``
        returns them (WARC export). ``body_frame``: ``body`` already
        compressed as one zstd frame without a dictionary (the fetcher's transit frame, which
        the caller decompressed to ``body``); while the page's domain has no dictionary it is
        stored as it is instead of compressing the body again (issue 15: one compression per
        page on the way in; maintenance recompresses it for the deeper tiers).
        """
        return self._writer.put(
            url,
            body,
            content_type=content_type,
            title=title,
            status=status,
            fetched_at_ms=fetched_at_ms,
            tags=tags,
            response_head=response_head,
            ip_address=ip_address,
            request_head=request_head,
            body_frame=body_frame,
        )

    def delete(self, url: str) -> bool:
        """Tombstone ``url``; effective at once. Returns False if it was not stored."""
        parts = self._parts(url)
        with self._lock:
            entry = self._index.lookup(parts.url_key, parts.url)
            if entry is None:
                return False
            self._index.delete(entry)
            return True

    def tag(self, url: str, *tags: str) -> None:
        self._tag_url(url, tags, "tag")

    def untag(self, url: str, *tags: str) -> None:
        self._tag_url(url, tags, "untag")

    def _tag_url(self, url: str, tags: Iterable[str], op: str) -> None:
        tags = list(tags)
        for tag in tags:
            if not is_text(tag):
                raise BadDataError(f"tag {tag!r} is not valid text (a lone surrogate)")
        parts = self._parts(url)
        with self._lock:
            entry = self._index.lookup(parts.url_key, parts.url)
            if entry is None:
                raise KeyError(f"{parts.url} is not stored; put it before tagging it")
            self._index.tag(entry, sorted(set(tags)), op)

    def sync(self) -> None:
        """fsync everything written so far (the 'batch' durability point)."""
        with self._lock:
            self._segments.sync()
            self._index.sync()

    def close(self) -> None:
        with self._lock:
            if self._writer_lock < 0:
                return
            try:
                if self.config.fsyncs:
                    self.sync()
                self._segments.close()
                self._index.close()
                self._quarantine.close()
                self.dicts.close()
            finally:
                os.close(self._writer_lock)  # last: another process may open the root from here on
                self._writer_lock = -1

    def __enter__(self) -> ContentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    def entry(self, url: str) -> Entry | None:
        parts = self._parts(url)
        with self._lock:  # one connection for every thread: its statements run one at a time
            return self._index.lookup(parts.url_key, parts.url)

    def get(self, url: str) -> bytes:
        """The body stored for ``url``; KeyError if absent, ChecksumMismatch if damaged."""
        parts = self._parts(url)
        return self.get_by_key(parts.url_key, parts.url)

    def get_by_key(self, url_key: int, url: str) -> bytes:
        """Read by key; ``url`` (canonical) picks the right entry when keys collide."""
        with self._lock:
            entry = self._index.lookup(url_key, url)
        if entry is None:
            raise KeyError(f"{url} (url_key {url_key}) is not stored")
        return self._reader.read(entry.location, entry.content_hash)

    def read_location(self, loc: Location, *, expected_hash: bytes | None = None) -> bytes:
        """Read and verify one record: header crc, frame checksum, content hash, size.

        For a group member also its own checksum; a member of a group whose frame is damaged
        is still served when its checksum and content hash match.
        """
        return self._reader.read(loc, expected_hash)

    def read_response(self, entry: Entry) -> tuple[bytes, StoredResponse | None]:
        """``entry``'s body, verified, and the HTTP response head it was stored with, read in the
        same pass. None when the record has none: stored before heads were kept, put without one
        (``crawlstream migrate``), or a body stored once for several URLs read for a URL other
        than the first (its own head is in its reference record, which the index does not locate)."""
        body, meta = self._reader.read_with_meta(entry.location, entry.content_hash)
        return body, stored_response(meta, entry.url)

    def reference_heads(self, entries: Iterable[Entry]) -> dict[str, StoredResponse]:
        """url -> response head, for entries whose body is stored once under another URL (their own
        head is in their reference record, which the index locates only by segment): each such
        segment is read once and its reference records' metadata decoded. Entries without a
        reference record, or whose record is gone (moved or compacted meanwhile), are left out."""
        found: dict[str, StoredResponse] = {}
        for url, meta in self._reader.reference_metas(entries).items():
            if (response := stored_response(meta, url)) is not None:
                found[url] = response
        return found

    def search(
        self, domain: str | None = None, path_prefix: str | None = None, tag: str | None = None
    ) -> Iterator[Entry]:
        """Entries matching all given filters, sorted by URL; reads the index only.

        A stream over a snapshot of the index (``IndexSnapshot``): the store lock is not held while it
        is read, and puts made meanwhile are not in it."""
        with self._lock:
            snapshot = self._index.snapshot()
        with snapshot:
            for entry in snapshot.search(domain, tag):
                if tag is not None and tag not in entry.tags:
                    continue
                if path_prefix is not None and not entry.path.startswith(path_prefix):
                    continue
                yield entry

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    # ------------------------------------------------------------------ integrity

    def quarantined(self) -> list[tuple[str, int]]:
        """Damaged regions (segment, offset): whole records, and groups with damaged members."""
        return self._quarantine.regions()

    def quarantined_urls(self) -> list[str]:
        """Live URLs whose body is quarantined (reads fail until the page is fetched and stored again)."""
        with self._lock:
            return quarantined_urls(self._index, self._quarantine)

    def verify(self) -> VerifyReport:
        """Scan every segment and decompress every body; quarantine and report damage.

        Each problem names the live URLs whose body was in the damaged region (lost until
        re-fetched); waits for a maintenance step in progress (its new segments are not done).
        """
        return self._integrity.verify()

    def rebuild_index(self) -> int:
        """Rewrite the index from the segments; returns the records found.

        Each record's URL and metadata come from the metadata line at the start of its
        frame. Tombstones and tags (ops.log) are kept and applied on top by sequence number.
        """
        return self._integrity.rebuild_index()

    # ------------------------------------------------------------------ tiers and maintenance

    def train_dictionaries(self, samples_by_domain: dict[str, list[bytes]]) -> int:
        """Train a dictionary for each domain with enough samples and none yet; plus a global one.

        The global dictionary serves domains with too few pages of their own (the long tail).
        """
        return self._trainer.train_dictionaries(samples_by_domain)

    def maintain(
        self,
        now_ms: int | None = None,
        *,
        ages_zero: bool = False,
        compact: bool = True,
        progress: Callable[[RecompressReport], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> RecompressReport:
        """Run bounded maintenance steps until nothing is eligible; then compact the index.

        Records move down the tiers by age (``warm_after_s`` …, all of them at once with
        ``ages_zero``) and segments with too much dead space are compacted (``compact``).
        ``progress`` is called after each step with its report.
        """
        return self._tiering.maintain(now_ms, ages_zero=ages_zero, compact=compact, progress=progress, cancel=cancel)

    def maintenance_step(
        self,
        now_ms: int | None = None,
        *,
        ages_zero: bool = False,
        compact: bool = True,
        cancel: threading.Event | None = None,
    ) -> RecompressReport | None:
        """One bounded step: retrain one dictionary a rule replaces, else the oldest batch due for a
        deeper tier, else a batch of records on a replaced dictionary, else one compaction batch,
        else drop replaced dictionaries no record uses (ADR 018, ADR 021 "Retraining").

        None when nothing is eligible. A batch holds at most ``maintenance_budget_bytes`` of
        raw content (and a quarter of ``maintenance_memory_bytes``; at least one page) and
        goes to one tier: the deepest tier its oldest page is old enough for (``ages_zero``:
        every tier age counts as zero, so: archive).
        """
        return self._tiering.step(now_ms, ages_zero=ages_zero, compact=compact, cancel=cancel)

    def maintenance_backlog(self, now_ms: int | None = None, *, ages_zero: bool = False) -> dict[str, int]:
        """Raw bytes due for a deeper tier, and live bytes of segments due for compaction (an estimate)."""
        return self._tiering.backlog(now_ms, ages_zero=ages_zero)

    def recompress(
        self, older_than_s: float = 0.0, *, tier: str = "cold", now_ms: int | None = None
    ) -> RecompressReport:
        """Rewrite every record fetched more than ``older_than_s`` ago into ``tier`` (bounded batches).

        Each batch is one maintenance batch (see ``_tiering.Tiering.run_batch`` for the
        crash-safe order); the index is compacted at the end.
        """
        return self._tiering.recompress(older_than_s, tier=tier, now_ms=now_ms)

    # ------------------------------------------------------------------ stats

    def stats(self) -> StoreStats:
        """Counts and sizes; live/dead segment bytes are estimates (group records by member share)."""
        return collect_stats(
            self.root,
            segments=self._segments,
            dicts=self.dicts,
            index=self._index,
            quarantine=self._quarantine,
            tiering=self._tiering,
            lock=self._lock,
        )
