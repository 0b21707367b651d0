"""The zstd dictionaries and contexts a store keeps in memory, within one byte budget.

Every domain with its own dictionary needs, for its puts, a level-3 compressor on it (its
tables: ~1-2 MB for a 100 KB-1 MB dictionary) and, for its reads, a decompressor. Kept forever,
they grew with the number of domains a member had written: the 2-hour soak's bucket
compressor went from 214 MB to 417 MB RSS as 40 new domains a minute got dictionaries (ADR
034). Rebuilding one costs milliseconds, so the least recently used are dropped beyond
``store.codec_cache_bytes``; a sharded store shares one cache (one budget per process).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class CodecCache:
    """Values by key with a size each; past ``budget_bytes`` in all, the least recently used go
    (never the one just added). Thread-safe; a value is built outside the lock."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"a codec cache needs a positive budget, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.evictions = 0

    @property
    def bytes(self) -> int:
        """What the values held now are counted as."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, build: Callable[[], tuple[T, int]]) -> T:
        """The value of ``key``, built by ``build() -> (value, size)`` if it is not held."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        value, size = build()
        self.put(key, value, size)
        return value

    def put(self, key: Hashable, value: Any, size: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.budget_bytes and len(self._entries) > 1:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
                self.evictions += 1

    def discard(self, match: Callable[[Any], bool]) -> None:
        """Drop every value whose key ``match``es (a dictionary deleted, a store closed)."""
        with self._lock:
            for key in [k for k in self._entries if match(k)]:
                self._bytes -= self._entries.pop(key)[1]
