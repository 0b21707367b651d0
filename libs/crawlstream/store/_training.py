"""Dictionary training: which domains get a dictionary, from which samples, how large.

A domain gets its own dictionary once it has ``dict_min_samples`` distinct bodies; domains
without one share the *global* dictionary. Maintenance trains them before it writes any
frame naming them (step 1 of a batch, ADR 018), from live pages of the whole domain (not
only the batch: a dictionary is trained once), spread evenly. The samples are bounded by
the memory budget (``maintenance_memory_bytes``): fastCOVER's peak is a multiple of its
sample bytes (``TRAIN_PEAK_FACTOR``, ADR 021); the dictionary's size is still taken from
the whole pool, so a bounded sample does not shrink the dictionary.

A dictionary records what it was trained for (``DictInfo.pool``: distinct live bodies; ``trained_seq``:
the first put it did not see), so ``_retrain`` can tell when the domain has outgrown it or
drifted away from it; ``retrain`` then trains the next generation from the same kind of pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import zstandard as zstd

from crawlstream.errors import ChecksumMismatch
from crawlstream.store._config import StoreConfig
from crawlstream.store._dicts import GLOBAL_DOMAIN, DictCodecs, DictionaryStore
from crawlstream.store._files import ReadCache
from crawlstream.store._index import UrlIndex
from crawlstream.store._maintenance import Move, sample_evenly
from crawlstream.store._model import Entry
from crawlstream.store._reader import RecordReader

__all__ = ["TRAIN_PEAK_FACTOR", "DictionaryTrainer", "sample_cap_bytes"]

logger = logging.getLogger(__name__)

# fastCOVER segment size: k=2048 beat 512/1024 (and tied 4096) on the same-site cluster with group
# frames (ADR 002). The level only scores the one (k, d) candidate and builds the dictionary's
# entropy tables: at 19 its context over an 8 MB dictionary held ~200 MB during training; at 9 the
# pass keeps the same ratio (8.084x vs 8.086x on the 957 pages) within the memory budget (ADR 021).
_TRAIN_K = 2048
_TRAIN_LEVEL = 9
# Train on every sample: zstd's default (0.75) trains on the first three quarters only and
# scores on the rest, and samples come sorted by domain and URL, so the domains sorted last
# never reached the global dictionary (ADR 021).
_TRAIN_SPLIT_POINT = 1.0
# Training samples take at most 1/TRAIN_PEAK_FACTOR of the memory budget: the samples, the
# trainer's contiguous copy of them and its tables peak near 2-3x the samples, plus the scoring
# context (ADR 021: +245 MB for the pass with 62 MB of samples at the default 256 MiB).
TRAIN_PEAK_FACTOR = 4


def sample_cap_bytes(memory_bytes: int) -> int:
    """The most sample bytes one training may hold so that its peak stays within ``memory_bytes``."""
    return max(1, memory_bytes // TRAIN_PEAK_FACTOR)


def dictionary_size(pool_bytes: int, cap_bytes: int, divisor: int) -> int:
    """A dictionary's size: 1/``divisor`` of the bytes it stands for (the whole pool), capped."""
    return min(cap_bytes, max(4096, pool_bytes // max(1, divisor)))


class DictionaryTrainer:
    def __init__(
        self,
        config: StoreConfig,
        *,
        dicts: DictionaryStore,
        index: UrlIndex,
        reader: RecordReader,
        lock: threading.RLock,
        clock_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._dicts = dicts
        self._index = index
        self._reader = reader
        self._lock = lock
        self._clock_ms = clock_ms

    def train_dictionaries(self, samples_by_domain: dict[str, list[bytes]]) -> int:
        """Train a dictionary for each domain with enough samples and none yet; plus a global one."""
        c = self._config
        trained = 0
        now = self._clock_ms()
        for domain, samples in sorted(samples_by_domain.items()):
            if not domain or len(samples) < c.dict_min_samples or self._dicts.has_own(domain):
                continue
            size = dictionary_size(sum(map(len, samples)), c.dict_size_bytes, c.dict_sample_divisor)
            if self.train(domain, samples, size, now):
                trained += 1
        if not self._dicts.has_own(GLOBAL_DOMAIN):
            tail = [b for d, s in samples_by_domain.items() if not self._dicts.has_own(d) for b in s]
            if len(tail) >= c.global_dict_min_samples:
                size = dictionary_size(sum(map(len, tail)), c.global_dict_size_bytes, c.dict_sample_divisor)
                if self.train(GLOBAL_DOMAIN, tail, size, now):
                    trained += 1
        return trained

    def train(
        self,
        domain: str,
        samples: list[bytes],
        size: int,
        now_ms: int,
        cancel: threading.Event | None = None,
        *,
        pool: int = 0,
        trained_seq: int = 0,
    ) -> bool:
        """Train and store (durably) one dictionary; False if zstd could not train one or ``cancel`` is set.

        ``pool``: distinct live bodies the dictionary is trained for; ``trained_seq``: the first put
        sequence number the pool did not include (both for the retraining rules).
        """
        try:
            trained = zstd.train_dictionary(
                size,
                cast(Any, samples),
                k=_TRAIN_K,
                d=8,
                dict_id=self._dicts.next_id(),
                level=_TRAIN_LEVEL,
                split_point=_TRAIN_SPLIT_POINT,
                threads=1,
            )
        except zstd.ZstdError as exc:
            logger.warning(
                "zstd dictionary training for %s failed (%d samples): %s; storing without", domain, len(samples), exc
            )
            return False
        if cancel is not None and cancel.is_set():
            return False  # stopping: keep nothing of this step
        self._dicts.add(
            domain, trained.as_bytes(), samples=len(samples), created_ms=now_ms, pool=pool, trained_seq=trained_seq
        )
        return True

    def train_for(self, moves: list[Move], codecs: DictCodecs, reads: ReadCache, cancel: threading.Event | None) -> int:
        """Step 1 of a tier batch: dictionaries for the batch's domains that have none (and the global one)."""
        c = self._config
        cap = sample_cap_bytes(c.maintenance_memory_bytes)
        now = self._clock_ms()
        trained = 0
        domains = sorted({m.entry.domain for m in moves if not m.keep_body and m.entry.domain})
        for domain in domains:
            if self._dicts.has_own(domain) or (cancel is not None and cancel.is_set()):
                continue
            trained += self._train_pool(domain, codecs, reads, cancel, now, cap)
        tail_in_batch = any(not self._dicts.has_own(m.entry.domain) for m in moves if not m.keep_body)
        if not self._dicts.has_own(GLOBAL_DOMAIN) and tail_in_batch and (cancel is None or not cancel.is_set()):
            trained += self._train_pool(GLOBAL_DOMAIN, codecs, reads, cancel, now, cap)
        return trained

    def retrain(self, domain: str, codecs: DictCodecs, reads: ReadCache, cancel: threading.Event | None) -> bool:
        """Train the next generation of ``domain``'s dictionary (or the global one) from its pool as it is now.

        The same pool, samples and size rules as a first training (bounded by the memory budget);
        the old dictionary stays readable (records move off it in later maintenance batches).
        """
        cap = sample_cap_bytes(self._config.maintenance_memory_bytes)
        return self._train_pool(domain, codecs, reads, cancel, self._clock_ms(), cap)

    def pool_of(self, domain: str) -> tuple[str | None, list[str]]:
        """The pool a dictionary for ``domain`` is trained from, as index queries name it (``pool_size``,
        ``pool_bodies``): the domain's pages, or for ``GLOBAL_DOMAIN`` every domain without a
        dictionary of its own (the long tail)."""
        if domain == GLOBAL_DOMAIN:
            return None, list(self._dicts.current())
        return domain, []

    def _train_pool(
        self,
        domain: str,
        codecs: DictCodecs,
        reads: ReadCache,
        cancel: threading.Event | None,
        now: int,
        cap: int,
    ) -> bool:
        """Train ``domain``'s next dictionary from samples spread evenly over its pool (distinct bodies,
        by domain and URL), read on a snapshot of the index: only the samples are held."""
        c = self._config
        is_global = domain == GLOBAL_DOMAIN
        minimum = c.global_dict_min_samples if is_global else c.dict_min_samples
        with self._lock:
            snapshot = self._index.snapshot()
            trained_seq = self._index.seq + 1  # the first put the pool does not include
        with snapshot:
            distinct, pool_bytes = snapshot.pool_size(*self.pool_of(domain))
            if distinct < minimum:
                return False
            chosen = sample_evenly(snapshot.pool_bodies(*self.pool_of(domain)), pool_bytes, cap)
        samples = self.read_samples(chosen, codecs, reads)
        if len(samples) < minimum:
            return False
        size = dictionary_size(
            pool_bytes, c.global_dict_size_bytes if is_global else c.dict_size_bytes, c.dict_sample_divisor
        )
        return self.train(domain, samples, size, now, cancel, pool=distinct, trained_seq=trained_seq)

    def read_samples(self, entries: list[Entry], codecs: DictCodecs, reads: ReadCache) -> list[bytes]:
        """The bodies of ``entries`` (maintenance's own contexts); unreadable ones are left out (and quarantined)."""
        out = []
        for e in entries:
            try:
                out.append(self._reader.read(e.location, e.content_hash, codecs, reads))
            except ChecksumMismatch:
                continue
        return out

