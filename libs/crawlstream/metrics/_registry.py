"""One instance of a metrics class per registry (a registry refuses a second collector of a name)."""

from __future__ import annotations

import threading
import weakref
from typing import TypeVar

from prometheus_client import CollectorRegistry

__all__ = ["per_registry"]

T = TypeVar("T")

_instances: weakref.WeakKeyDictionary[CollectorRegistry, dict[type, object]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def per_registry(cls: type[T], registry: CollectorRegistry) -> T:
    """``cls(registry)`` the first time, the same object after: in ``crawlstream run`` several
    services share one registry, and a standalone service rebuilt after an outage registers
    again on the same one (its counters go on from where they were)."""
    with _lock:
        by_class = _instances.setdefault(registry, {})
        found = by_class.get(cls)
        if found is None:
            found = by_class[cls] = cls(registry)  # type: ignore[call-arg]
        return found  # type: ignore[return-value]
