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
    archive_bzip2: bool = True  # an archive group is bzip2 when that is smaller (ADR 026)
    segment_bytes: int = 64 * 1024 * 1024
    fsync: str = "batch"
    tier_after_s: Mapping[str, float] = field(  # age (s) after which a page moves to warm / cold / archive
        default_factory=lambda: {"warm": 7 * 86400.0, "cold": 30 * 86400.0, "archive": 90 * 86400.0}
    )
    maintenance_budget_bytes: int = 32 * 1024 * 1024
    maintenance_memory_bytes: int = 256 * 1024 * 1024
    compact_dead_ratio: float = 0.5
    # Retraining (ADR 021 "Retraining"): a dictionary is replaced once its domain's live records
    # reach ``dict_retrain_growth`` times those it was trained for, or once its gain on the domain's
    # newest pages falls ``dict_retrain_drift`` (a share) below its gain on the first pages it met.
    dict_retrain_growth: float = 4.0  # 0: off
    dict_retrain_drift: float = 0.25  # 0: off

    def __post_init__(self) -> None:
        if self.fsync not in ("always", "batch", "never"):
            raise ConfigError(f"store fsync must be always, batch or never, got {self.fsync!r}")
        if self.dict_retrain_growth != 0 and not self.dict_retrain_growth > 1:
            raise ConfigError(f"store dict_retrain_growth must be 0 (off) or above 1, got {self.dict_retrain_growth!r}")
        if not 0 <= self.dict_retrain_drift < 1:
            raise ConfigError(f"store dict_retrain_drift must be in [0, 1) (0: off), got {self.dict_retrain_drift!r}")

    @property
    def fsync_each(self) -> bool:
        """fsync every append (``fsync="always"``)."""
        return self.fsync == "always"

    @property
    def fsyncs(self) -> bool:
        """fsync at the durability points (sync, roll, maintenance): anything but ``"never"``."""
        return self.fsync != "never"
