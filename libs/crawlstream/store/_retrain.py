"""Retraining dictionaries: when a dictionary is replaced, and when a replaced one can be deleted.

A dictionary is trained from the pages its domain (or, for the global one, the long tail of
domains without their own) had at the time. Two rules replace it by a new generation
(ADR 021 "Retraining"), checked at the start of every maintenance step, at most one
dictionary trained per step:

* **growth** — the distinct live bodies it serves reach ``dict_retrain_growth`` (4) times
  those it was trained for (``DictInfo.pool``; URLs deduplicated onto a stored body bring
  no new content and do not count). Geometric, so each record is recompressed
  1/(factor − 1) times on average however large the domain grows.
* **drift** — the dictionary's *gain* (the bytes of pages compressed alone without it over
  the bytes with it, zstd level 3) on the newest ``window`` pages put since its training
  has fallen ``dict_retrain_drift`` (a share) below its gain on the first ``window`` pages
  put since its training. Neither window was trained on, so the two are comparable, and
  the gain (not the ratio) does not move when pages are merely less compressible. A probe
  runs after every ``window`` new records the dictionary serves (``window`` = the minimum
  samples of a first training); it reads and compresses at most ``2 * window`` pages.

Records compressed with a superseded dictionary stay readable; maintenance rewrites them
with the current one in bounded batches (``Tiering.redict_step``) and deletes the old
dictionary once no record in any segment names it (``segments_naming``: record headers
only, cached per sealed segment), which is the only safe test: ``verify`` and
``rebuild-index`` decompress dead records too.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import zstandard as zstd

from crawlstream.errors import ChecksumMismatch
from crawlstream.store._codec import _CRC, _GROUP, _HEADER, _PAYLOAD_SIZE, _SKIP, SKIPPABLE_MAGIC
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import GLOBAL_DOMAIN, DictCodecs, DictInfo, DictionaryStore
from crawlstream.store._files import ReadCache
from crawlstream.store._index import UrlIndex
from crawlstream.store._model import Entry
from crawlstream.store._training import DictionaryTrainer

__all__ = ["PROBE_LEVEL", "Probe", "RetrainDue", "Retrainer", "dictionary_gain", "growth_due", "record_dict_ids"]

logger = logging.getLogger(__name__)

PROBE_LEVEL = 3  # cheap, and what the hot tier uses: the gain is a relative measure
_PROBE_MAX_BYTES = 4 * 1024 * 1024  # raw bytes per probe window at most (and 1/32 of the memory budget)
_MAX_PROBES_PER_STEP = 4  # a step with many grown domains probes some now, the rest in later steps


@dataclass(frozen=True)
class Probe:
    """A dictionary's gain on the first and on the newest pages put since it was trained."""

    early_gain: float
    late_gain: float
    pages: int  # pages compressed per window

    def drifted(self, margin: float) -> bool:
        return margin > 0 and self.late_gain < self.early_gain * (1 - margin)


@dataclass(frozen=True)
class RetrainDue:
    info: DictInfo
    reason: str  # "growth" | "drift"
    detail: str


def growth_due(info: DictInfo, records: int, factor: float) -> bool:
    """True once ``records`` reach ``factor`` times those the dictionary was trained for (factor 0: never)."""
    return factor > 0 and records >= factor * max(1, info.pool)


def dictionary_gain(bodies: Iterable[bytes], plain: zstd.ZstdCompressor, with_dict: zstd.ZstdCompressor) -> float:
    """Bytes of ``bodies`` compressed alone without the dictionary / with it (> 1: it helps)."""
    without = used = 0
    for body in bodies:
        without += len(plain.compress(body))
        used += len(with_dict.compress(body))
    return without / used if used else 1.0


def probe_windows(new: list[Entry], window: int, cap_bytes: int) -> tuple[list[Entry], list[Entry]] | None:
    """(the first, the newest) ``window`` distinct bodies of ``new`` (sorted by seq), each within
    ``cap_bytes`` (at least one page); None while there are fewer than ``2 * window``."""
    unique: dict[bytes, Entry] = {}
    for e in new:
        unique.setdefault(e.content_hash, e)
    pages = list(unique.values())
    if len(pages) < 2 * window:
        return None

    def fill(run: Iterable[Entry]) -> list[Entry]:
        out: list[Entry] = []
        used = 0
        for e in run:
            if len(out) >= window or (out and used + e.raw_size > cap_bytes):
                break
            out.append(e)
            used += e.raw_size
        return out

    return fill(pages), fill(reversed(pages))


def record_dict_ids(path: Path | bytes, start: int = 0) -> tuple[frozenset[int], int] | None:
    """The dictionary ids the record headers of a segment name, from ``start``; and where the
    last whole record ends. None if a header there does not parse (damage: anything may be there).

    Reads the headers only (a few hundred bytes per record). A record still being appended
    (the active segment) ends the walk; the next call resumes from the returned end. ``path``
    may be the segment's bytes (an archive object).
    """
    ids: set[int] = set()
    pos = start
    with io.BytesIO(path) if isinstance(path, bytes) else open(path, "rb") as fh:
        size = len(path) if isinstance(path, bytes) else os.fstat(fh.fileno()).st_size
        while pos + _SKIP.size <= size:
            fh.seek(pos)
            magic, payload_size = _SKIP.unpack(fh.read(_SKIP.size))
            if magic != SKIPPABLE_MAGIC or payload_size < _CRC.size:
                return None
            payload = fh.read(payload_size)
            if len(payload) < payload_size:
                break
            covered, (crc,) = payload[: -_CRC.size], _CRC.unpack_from(payload, payload_size - _CRC.size)
            if zlib.crc32(covered) != crc:
                return None
            if payload_size == _PAYLOAD_SIZE:
                fields = _HEADER.unpack(covered)
                dict_id, frame_size = fields[2], fields[7]
            elif len(covered) >= _GROUP.size:
                _, _, dict_id, frame_size, _, _ = _GROUP.unpack_from(covered, 0)
            else:
                return None
            end = pos + _SKIP.size + payload_size + frame_size
            if end > size:
                break
            ids.add(dict_id)
            pos = end
    return frozenset(ids), pos


class Retrainer:
    """The retraining rules over a store's current dictionaries, and which superseded ones can go."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        dicts: DictionaryStore,
        index: UrlIndex,
        trainer: DictionaryTrainer,
        lock: threading.RLock,
    ) -> None:
        self._config = config
        self._dicts = dicts
        self._index = index
        self._trainer = trainer
        self._lock = lock
        self._probed: dict[int, int] = {}  # dict id -> URLs it served at its last probe
        self._probe_turn: dict[int, int] = {}  # dict id -> when it was last probed (least recent first)
        self._turns = 0
        self._failed: set[int] = set()  # dict ids whose retraining failed (not retried until restart)
        self._segments: dict[str, tuple[int, int, frozenset[int]]] = {}  # name -> (inode, scanned end, ids)
        self.last_probe: dict[int, Probe] = {}  # for stats and tests

    @property
    def enabled(self) -> bool:
        return self._config.dict_retrain_growth > 0 or self._config.dict_retrain_drift > 0

    def served(self) -> dict[str, int]:
        """Live URLs each current dictionary serves (by domain; ``GLOBAL_DOMAIN``: the long tail)."""
        with self._lock:
            snapshot = self._index.snapshot()
        with snapshot:
            counts = snapshot.domain_counts()
        out: dict[str, int] = {}
        tail = 0
        for domain, n in counts.items():
            if self._dicts.has_own(domain):
                out[domain] = n
            else:
                tail += n
        out[GLOBAL_DOMAIN] = tail
        return out

    def distinct_bodies(self, domain: str) -> int:
        """Distinct live bodies a dictionary for ``domain`` (or the global one) serves (an index aggregate)."""
        with self._lock:
            snapshot = self._index.snapshot()
        with snapshot:
            return snapshot.pool_size(*self._trainer.pool_of(domain))[0]

    def due(self, codecs: DictCodecs, reads: ReadCache, cancel: threading.Event | None) -> RetrainDue | None:
        """The first current dictionary a rule replaces (growth first: it needs no reads), else None."""
        served = self.served()
        self._track_untracked()
        current = sorted(self._dicts.current().values(), key=lambda i: i.dict_id)
        growth = self._config.dict_retrain_growth
        for info in current:
            # URLs bound the distinct bodies from above: count those only where the URLs are enough
            if info.dict_id in self._failed or not growth_due(info, served.get(info.domain, 0), growth):
                continue
            n = self.distinct_bodies(info.domain)
            if growth_due(info, n, growth):
                return RetrainDue(info, "growth", f"{n} distinct live bodies, trained for {info.pool}")
        if self._config.dict_retrain_drift <= 0:
            return None
        probes = 0
        for info in sorted(current, key=lambda i: self._probe_turn.get(i.dict_id, -1)):
            if probes >= _MAX_PROBES_PER_STEP or (cancel is not None and cancel.is_set()):
                break
            n = served.get(info.domain, 0)
            if info.dict_id in self._failed or n - self._probed.get(info.dict_id, info.pool) < self.window(info):
                continue
            probes += 1
            self._turns += 1
            self._probed[info.dict_id] = n
            self._probe_turn[info.dict_id] = self._turns
            probe = self.probe(info, codecs, reads)
            if probe is None:
                continue
            self.last_probe[info.dict_id] = probe
            if probe.drifted(self._config.dict_retrain_drift):
                return RetrainDue(
                    info,
                    "drift",
                    f"gain {probe.late_gain:.2f}x on the newest {probe.pages} pages, "
                    f"{probe.early_gain:.2f}x on the first {probe.pages} after training",
                )
        return None

    def _track_untracked(self) -> None:
        """Dictionaries of an older store do not know their pool: take the domain as it is now
        (and pages from now on as new), rather than retrain every one at once."""
        with self._lock:
            next_seq = self._index.seq + 1
        for info in self._dicts.current().values():
            if info.pool == 0:
                self._dicts.track(info.dict_id, pool=self.distinct_bodies(info.domain), trained_seq=next_seq)

    def window(self, info: DictInfo) -> int:
        c = self._config
        return max(2, c.global_dict_min_samples if info.domain == GLOBAL_DOMAIN else c.dict_min_samples)

    def probe(self, info: DictInfo, codecs: DictCodecs, reads: ReadCache) -> Probe | None:
        """The dictionary's gain on its first and newest unseen pages; None while too few exist."""
        window = self.window(info)
        pool = self._trainer.pool_of(info.domain)
        with self._lock:
            snapshot = self._index.snapshot()
        with snapshot:  # the first and the newest ``window`` distinct bodies put since training, no more
            if snapshot.pool_size(*pool, since_seq=info.trained_seq)[0] < 2 * window:
                return None
            first = list(islice(snapshot.pool_bodies(*pool, since_seq=info.trained_seq, by_seq=True), window))
            newest = snapshot.pool_bodies(*pool, since_seq=info.trained_seq, by_seq=True, newest_first=True)
            last = list(islice(newest, window))
        cap = max(1, min(_PROBE_MAX_BYTES, self._config.maintenance_memory_bytes // 32))
        windows = probe_windows(first + last[::-1], window, cap)
        if windows is None:
            return None
        try:
            raw = self._dicts.dict_bytes(info.dict_id)
        except ChecksumMismatch as exc:
            logger.error("dictionary %d not probed: %s", info.dict_id, exc)
            return None
        plain = zstd.ZstdCompressor(level=PROBE_LEVEL, write_checksum=False)
        with_dict = zstd.ZstdCompressor(
            level=PROBE_LEVEL, dict_data=zstd.ZstdCompressionDict(raw), write_checksum=False
        )
        early, late = (self._trainer.read_samples(w, codecs, reads) for w in windows)
        if not early or not late:
            return None
        return Probe(dictionary_gain(early, plain, with_dict), dictionary_gain(late, plain, with_dict), len(late))

    def failed(self, dict_id: int) -> None:
        """Retraining ``dict_id`` did not produce a dictionary: do not try again until restart."""
        self._failed.add(dict_id)

    def unreferenced(
        self,
        superseded: set[int],
        segment_paths: Callable[[], list[tuple[str, Path]]],
        remote: Mapping[str, int] | None = None,
        fetch: Callable[[str], bytes] | None = None,
    ) -> set[int]:
        """Those of ``superseded`` that no record of any segment names (record headers, cached per segment).
        ``remote``: archive objects (name -> size), read whole with ``fetch`` once (they never change).

        The caller holds the maintenance lock (no batch is writing) and checks live entries
        again under the store lock before dropping: puts never use a superseded dictionary.
        """
        named: set[int] = set()
        seen: set[str] = set()
        for name, path in segment_paths():
            seen.add(name)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            cached = self._segments.get(name)
            start, ids = 0, frozenset[int]()
            if cached is not None and cached[0] == st.st_ino and cached[1] <= st.st_size:
                start, ids = cached[1], cached[2]
            if start < st.st_size:
                walked = record_dict_ids(path, start)
                if walked is None:
                    logger.warning("segment %s has a damaged record header: no dictionary is dropped", name)
                    return set()
                ids = ids | walked[0]
                self._segments[name] = (st.st_ino, walked[1], ids)
            named |= ids
        for name, size in (remote or {}).items():
            seen.add(name)
            cached = self._segments.get(name)
            if cached is None or cached[0] != -1 or cached[1] != size:
                assert fetch is not None
                walked = record_dict_ids(fetch(name))
                if walked is None:
                    logger.warning("archive segment %s has a damaged record header: no dictionary is dropped", name)
                    return set()
                cached = self._segments[name] = (-1, size, walked[0])
            named |= cached[2]
        for name in [n for n in self._segments if n not in seen]:
            del self._segments[name]
        return superseded - named
