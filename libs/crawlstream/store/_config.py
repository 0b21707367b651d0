"""The store's tunables as one frozen value, shared by its parts (no I/O).

``ContentStore.__init__`` builds it from keyword arguments (``from_settings`` from the
``store.*`` settings); every part reads its own fields from it, so a part can be built in a
test from a ``StoreConfig`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from crawlstream.errors import ConfigError

__all__ = ["StoreConfig"]


@dataclass(frozen=True)
class StoreConfig:
    levels: Mapping[str, int]  # zstd level per tier
    dict_min_samples: int = 64
    dict_size_bytes: int = 1024 * 1024
    global_dict_size_bytes: int = 8 * 1024 * 1024
    dict_sample_divisor: int = 8
    dict_preload_bytes: int = 64 * 1024 * 1024
    global_dict_min_samples: int = 32
    large_body_bytes: int = 4 * 1024 * 1024
    group_bytes: int = 1024 * 1024
    global_group_bytes: int = 640 * 1024
    segment_bytes: int = 64 * 1024 * 1024
    fsync: str = "batch"
    tier_after_s: Mapping[str, float] = field(  # age (s) after which a page moves to warm / cold / archive
        default_factory=lambda: {"warm": 7 * 86400.0, "cold": 30 * 86400.0, "archive": 90 * 86400.0}
    )
    maintenance_budget_bytes: int = 32 * 1024 * 1024
    maintenance_memory_bytes: int = 256 * 1024 * 1024
    compact_dead_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.fsync not in ("always", "batch", "never"):
            raise ConfigError(f"store fsync must be always, batch or never, got {self.fsync!r}")

    @property
    def fsync_each(self) -> bool:
        """fsync every append (``fsync="always"``)."""
        return self.fsync == "always"

    @property
    def fsyncs(self) -> bool:
        """fsync at the durability points (sync, roll, maintenance): anything but ``"never"``."""
        return self.fsync != "never"
