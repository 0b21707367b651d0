"""One configuration object per process: flags > environment > defaults."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from crawlstream.settings._core import (
    GENERAL,
    SETTINGS_GROUP_PREFIX,
    add_arguments,
    build,
    describe,
    iter_specs,
    setting,
)
from crawlstream.settings._settings import (
    ApiSettings,
    BusSettings,
    CrawlSettings,
    DedupeSettings,
    FetchSettings,
    IndexSettings,
    LakeSettings,
    MetricsSettings,
    S3Settings,
    SchedulerSettings,
    Settings,
    StoreSettings,
)

__all__ = [
    "GENERAL",
    "SETTINGS_GROUP_PREFIX",
    "ApiSettings",
    "BusSettings",
    "CrawlSettings",
    "DedupeSettings",
    "FetchSettings",
    "IndexSettings",
    "LakeSettings",
    "MetricsSettings",
    "S3Settings",
    "SchedulerSettings",
    "Settings",
    "StoreSettings",
    "add_arguments",
    "describe",
    "iter_specs",
    "load",
    "setting",
]


def load(environ: Mapping[str, str], flags: argparse.Namespace | Mapping[str, Any] | None = None) -> Settings:
    """Build the process's Settings; raises ConfigError naming the bad variable or flag."""
    return build(Settings, environ, flags)
