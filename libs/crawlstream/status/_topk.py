"""Top domains in bounded memory: counts of the most frequent keys of a long stream. Pure.

A weeks-long crawl sees millions of domains; an exact counter of all of them would grow the
crawl's stats file (rewritten every second) without bound. ``TopCounts`` keeps at most
``2 * capacity`` keys: when it holds more, it keeps the ``capacity`` largest and forgets the
rest, remembering the largest count it ever forgot (``max_dropped``). A key that is not
kept starts from ``max_dropped``, as in Space-Saving (Metwally et al., 2005): a forgotten
key may come back, so every count is an upper bound and the true count lies in
``[count - max_dropped, count]``. While nothing was ever dropped the counts are exact.
Pruning sorts 2k keys once per ``capacity`` new keys: O(log k) per insertion, amortized.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TopCounts"]


class TopCounts:
    """Counts per key, bounded to the ``capacity`` (×2 between prunes) most frequent keys."""

    __slots__ = ("capacity", "counts", "max_dropped")

    def __init__(self, capacity: int = 256, counts: dict[str, int] | None = None, max_dropped: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.counts: dict[str, int] = dict(counts or {})
        self.max_dropped = max_dropped
        if len(self.counts) > 2 * capacity:
            self._prune()

    def add(self, key: str, n: int = 1) -> None:
        counts = self.counts
        counts[key] = counts.get(key, self.max_dropped) + n
        if len(counts) > 2 * self.capacity:
            self._prune()

    def _prune(self) -> None:
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))  # ties: by key, deterministic
        self.max_dropped = max(self.max_dropped, ranked[self.capacity][1])
        self.counts = dict(ranked[: self.capacity])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopCounts):
            return NotImplemented
        return (self.capacity, self.counts, self.max_dropped) == (other.capacity, other.counts, other.max_dropped)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"TopCounts(capacity={self.capacity}, keys={len(self.counts)}, max_dropped={self.max_dropped})"

    @property
    def exact(self) -> bool:
        """Whether every count is exact (no key was ever forgotten)."""
        return self.max_dropped == 0

    def top(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` largest counts, largest first (ties by key)."""
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def to_json(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "max_dropped": self.max_dropped, "counts": dict(self.counts)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopCounts:
        return cls(
            int(data.get("capacity", 256)),
            {str(k): int(v) for k, v in data.get("counts", {}).items()},
            int(data.get("max_dropped", 0)),
        )
