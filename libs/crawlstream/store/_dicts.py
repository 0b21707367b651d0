"""Zstd dictionaries of the store: trained per domain (or one global), versioned by id.

Each dictionary is its own file ``dicts/<id>.zdict.zst`` (the dictionary bytes, themselves
zstd-compressed: a 256 KB dictionary costs ~58 KB on disk), listed in ``dicts/dicts.log``
(CRC-framed). A dictionary file is made durable before any frame uses it. The zstd frame
header of every record compressed with it carries the id, so ``zstd -D`` can read it too.
Loaded lazily and cached.

A domain's dictionary can be *retrained* (ADR 021): the new one gets a new id and a higher
generation and is the domain's from then on; the older ones stay readable until no record
in any segment uses them, then maintenance drops them (``drop``: the file is deleted, the
log line stays; a log line whose file is gone is skipped at start-up). Ids are never reused:
the highest id is always a current dictionary, and current dictionaries are never dropped.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import zstandard as zstd

from crawlstream.durable import fsync_dir, write_atomically
from crawlstream.errors import ChecksumMismatch
from crawlstream.settings import StoreSettings
from crawlstream.store._codec import decode_log_records, encode_log_record
from crawlstream.store._codec_cache import CodecCache
from crawlstream.store._files import AppendFile

__all__ = ["FIRST_DICT_ID", "GLOBAL_DOMAIN", "DictCodecs", "DictInfo", "DictionaryStore"]

logger = logging.getLogger(__name__)

GLOBAL_DOMAIN = "*"
# Ids below 32768 are reserved by the zstd format for registered dictionaries.
FIRST_DICT_ID = 32768
_EMPTY_FRAME = zstd.ZstdCompressor(write_content_size=True).compress(b"")
# Parameters are chosen for sources up to this size (group frames are ≤ 1 MiB, single records
# with a dictionary ≤ large_body_bytes); zstd still shrinks them for smaller sources.
_MAX_SOURCE_HINT = 1024 * 1024
_MIN_TABLE_LOG = 16
DICT_FILE_LEVEL = 19  # zstd level of the dictionary files themselves (they count in the on-disk ratio)


@dataclass(frozen=True)
class DictInfo:
    dict_id: int
    domain: str  # a registered domain, or "*" for the global dictionary
    size_bytes: int
    samples: int
    created_ms: int
    generation: int = 1  # 1 for a domain's first dictionary, +1 per retraining
    pool: int = 0  # distinct live bodies it was trained for (its domain's or the tail's); 0: unknown (older store)
    trained_seq: int = 0  # the first put sequence number its training did not see (its "new" pages)


class DictionaryStore:
    def __init__(self, directory: Path, *, fsync: bool = True, cache: CodecCache | None = None) -> None:
        """``cache``: where loaded dictionaries and the put and read contexts are kept (a sharded
        store passes one for all its shards); one of ``store.codec_cache_bytes``' default when None.
        ``close`` takes this store's entries out of it."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._infos: dict[int, DictInfo] = {}
        self._by_domain: dict[str, int] = {}
        log_path = directory / "dicts.log"
        if log_path.exists():
            records, valid_end, _ = decode_log_records(log_path.read_bytes())
            for rec in records:
                # "g", "p", "q" came with retraining: an older line is generation 1 with an unknown
                # pool, which the retraining rules take as the domain's size when they first see it
                # (``track``). A later line for the same id (``track``) replaces an earlier one.
                info = DictInfo(
                    rec["id"],
                    rec["d"],
                    rec["z"],
                    rec["n"],
                    rec["c"],
                    int(rec.get("g", 1)),
                    int(rec.get("p", 0)),
                    int(rec.get("q", 0)),
                )
                if (directory / f"{info.dict_id}.zdict.zst").exists():
                    self._infos[info.dict_id] = info
                    self._by_domain[info.domain] = info.dict_id  # later versions win
            if valid_end < log_path.stat().st_size:
                with open(log_path, "r+b") as fh:
                    fh.truncate(valid_end)
            logged = {int(rec["id"]) for rec in records}
        else:
            logged = set()
        self._remove_leftovers(logged, orphans=fsync)
        self._log = AppendFile(log_path, fsync_each=fsync)
        self._fsync = fsync
        self._cache = cache if cache is not None else CodecCache(StoreSettings().codec_cache_bytes)
        self._ns = object()  # this store's keys in a cache shared with other shards (ids repeat across them)

    def _remove_leftovers(self, logged: set[int], *, orphans: bool) -> None:
        """Delete what a kill during ``add`` can leave: a temporary file, and (``orphans``: the log
        is fsynced on append) the file of a dictionary newer than every logged one, whose line was
        never written: no frame can name it (a frame only uses a dictionary once its line is
        durable). Without fsync a power loss could keep frames and lose the line, so it is kept;
        so is a file whose line is merely damaged (an older id: records may use it)."""
        newest = max(logged, default=FIRST_DICT_ID - 1)
        for path in self.directory.iterdir():
            stem = path.name.removesuffix(".zdict.zst")
            orphan = orphans and path.name.endswith(".zdict.zst") and stem.isdigit() and int(stem) > newest
            if orphan or (path.name.startswith(".") and ".zdict.zst.tmp-" in path.name):
                logger.warning("removing %s: a dictionary write that a crash left unfinished", path.name)
                path.unlink(missing_ok=True)

    def infos(self) -> list[DictInfo]:
        return sorted(self._infos.values(), key=lambda i: i.dict_id)

    def for_domain(self, domain: str) -> int:
        """The newest dictionary id for ``domain``, else the global one, else 0 (none)."""
        return self._by_domain.get(domain) or self._by_domain.get(GLOBAL_DOMAIN, 0)

    def is_global(self, dict_id: int) -> bool:
        """True if ``dict_id`` is a version of the global dictionary (the one shared by small domains)."""
        info = self._infos.get(dict_id)
        return info is not None and info.domain == GLOBAL_DOMAIN

    def has_own(self, domain: str) -> bool:
        return domain in self._by_domain

    def current(self) -> dict[str, DictInfo]:
        """The dictionary each domain (and ``GLOBAL_DOMAIN``) compresses new records with."""
        return {domain: self._infos[i] for domain, i in self._by_domain.items()}

    def superseded(self) -> list[int]:
        """Ids of stored dictionaries that are no longer any domain's: readable until dropped."""
        current = set(self._by_domain.values())
        return sorted(i for i in self._infos if i not in current)

    def next_id(self) -> int:
        return max(self._infos, default=FIRST_DICT_ID - 1) + 1

    def add(
        self,
        domain: str,
        dict_bytes: bytes,
        *,
        samples: int,
        created_ms: int,
        pool: int = 0,
        trained_seq: int = 0,
    ) -> int:
        """Persist a trained dictionary (file first, then the log line) and return its id.

        It becomes ``domain``'s dictionary at once (a newer generation if the domain had one).
        """
        parsed = zstd.ZstdCompressionDict(dict_bytes)
        dict_id = parsed.dict_id()
        if dict_id in self._infos:
            raise ValueError(f"dictionary id {dict_id} already exists")
        generation = 1 + max((i.generation for i in self._infos.values() if i.domain == domain), default=0)
        stored = zstd.ZstdCompressor(level=DICT_FILE_LEVEL).compress(dict_bytes)
        write_atomically(self.directory / f"{dict_id}.zdict.zst", stored)
        info = DictInfo(dict_id, domain, len(dict_bytes), samples, created_ms, generation, pool or samples, trained_seq)
        self._log.append(_log_line(info))
        self._infos[dict_id] = info
        self._by_domain[domain] = dict_id
        self._cache.put((self._ns, "dict", dict_id), parsed, len(dict_bytes))
        logger.info(
            "zstd dictionary %d (generation %d) trained for %s (%d bytes, %d samples)",
            dict_id,
            generation,
            domain,
            len(dict_bytes),
            samples,
        )
        return dict_id

    def track(self, dict_id: int, *, pool: int, trained_seq: int) -> DictInfo:
        """Record what a current dictionary from an older store stands for (its log line had no
        pool): a repeated log line with the same id, which start-up reads as replacing the first."""
        info = self._infos[dict_id]
        if self._by_domain.get(info.domain) != dict_id:
            raise ValueError(f"dictionary {dict_id} is not current; only current ones are tracked")
        info = dataclasses.replace(info, pool=max(1, pool), trained_seq=trained_seq)
        self._log.append(_log_line(info))
        self._infos[dict_id] = info
        return info

    def drop(self, dict_id: int) -> None:
        """Delete a superseded dictionary's file (the caller has checked no record uses it).

        Crash-safe as it is: the unlink is atomic, and a log line whose file is gone is skipped
        at start-up. A current dictionary is refused (new records would need it).
        """
        info = self._infos.get(dict_id)
        if info is None:
            raise KeyError(f"dictionary {dict_id} is not stored")
        if self._by_domain.get(info.domain) == dict_id:
            raise ValueError(f"dictionary {dict_id} is {info.domain!r}'s current one; only superseded ones are dropped")
        (self.directory / f"{dict_id}.zdict.zst").unlink(missing_ok=True)
        if self._fsync:
            fsync_dir(self.directory)
        del self._infos[dict_id]
        self._cache.discard(lambda key: key[0] is self._ns and key[-1] == dict_id)
        logger.info(
            "zstd dictionary %d (%s, generation %d) dropped: no record uses it", dict_id, info.domain, info.generation
        )

    def dict_bytes(self, dict_id: int) -> bytes:
        """The raw dictionary (loaded from its file on first use); ChecksumMismatch if missing or corrupt."""
        return self._dict(dict_id).as_bytes()

    def _dict(self, dict_id: int) -> zstd.ZstdCompressionDict:
        return self._cache.get((self._ns, "dict", dict_id), lambda: self._read_dict(dict_id))

    def _read_dict(self, dict_id: int) -> tuple[zstd.ZstdCompressionDict, int]:
        path = self.directory / f"{dict_id}.zdict.zst"
        try:
            raw = zstd.ZstdDecompressor().decompress(path.read_bytes())
        except FileNotFoundError as exc:
            raise ChecksumMismatch(
                f"dictionary {dict_id} is missing ({path}); the records using it cannot be read"
            ) from exc
        except zstd.ZstdError as exc:
            raise ChecksumMismatch(f"dictionary file {path} is corrupt: {exc}") from exc
        return zstd.ZstdCompressionDict(raw), len(raw)

    def compressor(self, level: int, dict_id: int) -> zstd.ZstdCompressor:
        def build() -> tuple[zstd.ZstdCompressor, int]:
            raw = self._dict(dict_id).as_bytes() if dict_id else b""
            return _new_compressor(level, raw), compressor_bytes(level, len(raw))

        return self._cache.get((self._ns, "c", level, dict_id), build)

    def decompressor(self, dict_id: int) -> zstd.ZstdDecompressor:
        def build() -> tuple[zstd.ZstdDecompressor, int]:
            if not dict_id:
                return zstd.ZstdDecompressor(), 0
            raw = self._dict(dict_id)
            # its DDict, built on first use, holds a copy of the dictionary and its tables
            return zstd.ZstdDecompressor(dict_data=raw), 2 * len(raw.as_bytes())

        return self._cache.get((self._ns, "d", dict_id), build)

    def private_codecs(
        self, *, max_compressors: int = 1, max_decompressors: int = 2, table_bytes: int = 0
    ) -> DictCodecs:
        """Compressors and decompressors for one other thread (store maintenance).

        zstd contexts are not thread-safe, and the ones above serve puts and reads: a thread
        that compresses or decompresses beside them needs contexts of its own. These are
        built from copies of the dictionary bytes and only the last one (compressors) or two
        (decompressors) are kept: a level-22 compressor on the 8 MB global dictionary holds
        ~520 MB of tables uncapped, and a batch is sorted by domain, so it rarely switches.
        ``table_bytes`` > 0 caps each compressor's match-finder tables (see ``_new_compressor``).
        """
        return DictCodecs(
            self, max_compressors=max_compressors, max_decompressors=max_decompressors, table_bytes=table_bytes
        )

    def preload(self, budget_bytes: int) -> int:
        """Load the current dictionaries (global first) into ready decompressors, up to ``budget_bytes``
        (and a quarter of the cache's budget).

        Moves the one-off cost of a dictionary (decompress its file, build the zstd DDict:
        ~5 ms for a 4 MB one) from the first read of each domain to start-up. Returns the
        dictionaries loaded; the rest load lazily on first use.
        """
        current = sorted(
            (self._infos[i] for i in set(self._by_domain.values())),
            key=lambda i: (i.domain != GLOBAL_DOMAIN, -i.size_bytes),
        )
        loaded = 0
        used = 0
        budget_bytes = min(budget_bytes, self._cache.budget_bytes // 4)  # a loaded one is counted ~3x
        for info in current:
            if used + info.size_bytes > budget_bytes:
                continue
            try:
                self.decompressor(info.dict_id).decompress(_EMPTY_FRAME)  # builds the DDict now
            except ChecksumMismatch as exc:
                logger.error("dictionary %d not preloaded: %s", info.dict_id, exc)
                continue
            used += info.size_bytes
            loaded += 1
        return loaded

    def stored_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.directory.iterdir() if p.is_file())

    def close(self) -> None:
        self._log.close()
        # a shared cache outlives this store (a released shard): what it built there goes now
        self._cache.discard(lambda key: key[0] is self._ns)


def _log_line(info: DictInfo) -> bytes:
    return encode_log_record(
        {
            "id": info.dict_id,
            "d": info.domain,
            "z": info.size_bytes,
            "n": info.samples,
            "c": info.created_ms,
            "g": info.generation,
            "p": info.pool,
            "q": info.trained_seq,
        }
    )


def _new_compressor(
    level: int, dict_bytes: bytes, table_bytes: int = 0, *, precompute: bool = True
) -> zstd.ZstdCompressor:
    """A compressor at ``level`` on ``dict_bytes``; ``table_bytes`` > 0 caps its match-finder tables.

    A compressor on a dictionary holds the dictionary's tables twice (the CDict, and the copy a
    frame larger than a few KB works in): at level 22 on the 8 MB global dictionary that is
    ~520 MB. Capping hash and chain logs bounds it (frames decode the same; ADR 021).

    ``precompute=False`` (maintenance): zstd builds the tables inside the first ``compress``,
    which releases the GIL; ``precompute_compress`` holds it throughout: 6.8 s at level 22 on
    an 8 MB dictionary, during which no put of the process ran (ADR 021 "Retraining"). Same
    frames, same memory; kept for puts, whose level-3 tables take milliseconds.
    """
    if not dict_bytes:
        return zstd.ZstdCompressor(level=level, write_checksum=False)
    # A dictionary object of its own per compressor: precompute_compress() frees the CDict a
    # compressor of another level still points at (frames then carry a garbage dictionary id
    # and never decode again: "Dictionary mismatch").
    d = zstd.ZstdCompressionDict(dict_bytes)
    params = capped_params(level, len(dict_bytes), table_bytes) if table_bytes > 0 else None
    if params is None:
        if precompute:
            d.precompute_compress(level=level)
        return zstd.ZstdCompressor(level=level, dict_data=d, write_checksum=False)
    if precompute:
        d.precompute_compress(compression_params=params)
    return zstd.ZstdCompressor(dict_data=d, compression_params=params)


def compressor_bytes(level: int, dict_size: int) -> int:
    """What a put compressor of ``_new_compressor`` holds: its context (zstd's estimate; 1.30 MB
    at level 3 on a 128 KB dictionary, where 50 of them measured 1.32 MB of RSS each) and its
    copy of the dictionary. ``memory_size()`` misses the tables, which live in the dictionary."""
    params = zstd.ZstdCompressionParameters.from_level(level, source_size=_MAX_SOURCE_HINT, dict_size=dict_size)
    return int(params.estimated_compression_context_size()) + dict_size


def capped_params(level: int, dict_size: int, table_bytes: int) -> zstd.ZstdCompressionParameters | None:
    """``level``'s parameters for a dictionary of ``dict_size`` with hash + chain tables of at most
    ``table_bytes`` (None: the level's own tables already fit)."""
    base = zstd.ZstdCompressionParameters.from_level(level, source_size=_MAX_SOURCE_HINT, dict_size=dict_size)
    hash_log, chain_log = base.hash_log, base.chain_log
    # The chain (a binary tree at levels 16+) is what reaches back into the dictionary; the hash
    # table only holds entry points, so it shrinks first, down to 1/4 of the chain.
    while (4 << hash_log) + (4 << chain_log) > table_bytes and max(hash_log, chain_log) > _MIN_TABLE_LOG:
        if hash_log > chain_log - 2:
            hash_log -= 1
        else:
            chain_log -= 1
    if (hash_log, chain_log) == (base.hash_log, base.chain_log):
        return None
    return zstd.ZstdCompressionParameters.from_level(
        level,
        source_size=_MAX_SOURCE_HINT,
        dict_size=dict_size,
        hash_log=hash_log,
        chain_log=chain_log,
        write_content_size=1,
        write_checksum=0,
        write_dict_id=1,
    )


class DictCodecs:
    """zstd contexts of one thread over a ``DictionaryStore``'s dictionaries (least recently used dropped)."""

    def __init__(
        self, store: DictionaryStore, *, max_compressors: int, max_decompressors: int, table_bytes: int = 0
    ) -> None:
        self._store = store
        self._table_bytes = table_bytes
        self._max_compressors = max(1, max_compressors)
        self._max_decompressors = max(1, max_decompressors)
        self._compressors: dict[tuple[int, int], zstd.ZstdCompressor] = {}
        self._decompressors: dict[int, zstd.ZstdDecompressor] = {}

    def compressor(self, level: int, dict_id: int) -> zstd.ZstdCompressor:
        key = (level, dict_id)
        comp = self._compressors.pop(key, None)
        if comp is None:
            while len(self._compressors) >= self._max_compressors:
                self._compressors.pop(next(iter(self._compressors)))
            raw = self._store._dict(dict_id).as_bytes() if dict_id else b""
            comp = _new_compressor(level, raw, self._table_bytes, precompute=False)
        self._compressors[key] = comp  # most recently used last
        return comp

    def decompressor(self, dict_id: int) -> zstd.ZstdDecompressor:
        dec = self._decompressors.pop(dict_id, None)
        if dec is None:
            while len(self._decompressors) >= self._max_decompressors:
                self._decompressors.pop(next(iter(self._decompressors)))
            raw = self._store._dict(dict_id).as_bytes() if dict_id else b""
            dec = zstd.ZstdDecompressor(dict_data=zstd.ZstdCompressionDict(raw)) if raw else zstd.ZstdDecompressor()
        self._decompressors[dict_id] = dec
        return dec

    def clear(self) -> None:
        self._compressors.clear()
        self._decompressors.clear()
