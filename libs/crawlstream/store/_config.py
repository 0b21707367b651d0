"""The store's tunables as one frozen value, shared by its parts (no I/O).

``StoreConfig`` *is* the ``store.*`` settings section (``StoreSettings``: every field, its
default and its check are declared there, once) plus the views the parts read: the zstd level
per tier, the age per tier, the fsync modes. ``StoreConfig.from_settings`` builds it from a
process's settings; ``StoreConfig()`` is the defaults and ``StoreConfig(group_bytes=...)`` or
``dataclasses.replace`` a variant (tests, benchmarks). ``ContentStore`` takes it whole, and a
part can be built in a test from a ``StoreConfig`` alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from crawlstream.errors import ConfigError
from crawlstream.settings import StoreSettings

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["StoreConfig"]


@dataclasses.dataclass(frozen=True)
class StoreConfig(StoreSettings):
    """The ``store.*`` settings, checked; see ``StoreSettings`` for each field."""

    def __post_init__(self) -> None:
        # The settings' own checks: a value given here directly is held to what a flag or an
        # environment variable may set.
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            if check is not None and (problem := check(value)):
                raise ConfigError(f"store.{f.name}={value!r} is invalid: expected {problem}")

    @classmethod
    def from_settings(cls, settings: Settings | StoreSettings) -> StoreConfig:
        """The store section of ``settings`` (or that section itself) as a ``StoreConfig``."""
        section = settings if isinstance(settings, StoreSettings) else settings.store
        return cls(**{f.name: getattr(section, f.name) for f in dataclasses.fields(StoreSettings)})

    @cached_property
    def levels(self) -> Mapping[str, int]:
        """zstd level per tier."""
        return {"hot": self.zstd_level, "warm": self.warm_level, "cold": self.cold_level, "archive": self.archive_level}

    @cached_property
    def tier_after_s(self) -> Mapping[str, float]:
        """Age (s) after which a page moves to warm / cold / archive."""
        return {"warm": self.warm_after_s, "cold": self.cold_after_s, "archive": self.archive_after_s}

    @property
    def fsync_each(self) -> bool:
        """fsync every append (``fsync="always"``)."""
        return self.fsync == "always"

    @property
    def fsyncs(self) -> bool:
        """fsync at the durability points (sync, roll, maintenance): anything but ``"never"``."""
        return self.fsync != "never"
