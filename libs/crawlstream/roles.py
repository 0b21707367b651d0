"""The eight services by name: what ``crawlstream service <name>``, ``crawlstream run`` and its
worker processes build, and what ``services/<name>/main.py`` runs.

Each service's wiring is a ``service`` module in the library package whose job it is
(``crawlstream.dedupe.service``, ``crawlstream.fetch.service``...): its handler, ``build(host)``
(the handler built from settings, on the host's bus, codec and metrics), ``run(settings)`` (one
service in its own process) and, for consumers, ``GROUP`` and ``TOPICS``. They are imported on
first use, so a process loads only the services it runs. The names are a fixed contract
(operators, manifests and metrics use them).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Final

from crawlstream.errors import ConfigError

__all__ = ["ROLES", "SERVICE_NAMES", "Role", "role"]


@dataclass(frozen=True)
class Role:
    """One service: its name and the library module that wires it."""

    name: str
    module_name: str

    def module(self) -> ModuleType:
        return importlib.import_module(self.module_name)

    @property
    def group(self) -> str | None:
        """The consumer group (None: the service consumes no topic)."""
        return getattr(self.module(), "GROUP", None)

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(getattr(self.module(), "TOPICS", ()))


ROLES: Final = {
    role.name: role
    for role in (
        Role("deduper", "crawlstream.dedupe.service"),
        Role("scheduler", "crawlstream.politeness.service"),
        Role("fetcher", "crawlstream.fetch.service"),
        Role("link-extractor", "crawlstream.links.service"),
        Role("bucket-compressor", "crawlstream.store.service"),
        Role("parquet-sink", "crawlstream.lake.service"),
        Role("index-compactor", "crawlstream.index.service"),
        Role("query-api", "crawlstream.api.service"),
    )
}
SERVICE_NAMES: Final = tuple(ROLES)


def role(name: str) -> Role:
    """The service called ``name``; ConfigError naming the known ones otherwise."""
    try:
        return ROLES[name]
    except KeyError:
        raise ConfigError(f"unknown service {name!r}; expected one of {', '.join(SERVICE_NAMES)}") from None
