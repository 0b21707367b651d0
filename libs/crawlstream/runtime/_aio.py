"""Which asyncio event loop a service's async work runs on: uvloop when it is there, else asyncio's.

The fetcher runs its HTTP client on a private event loop thread; per request, the loop's own
bookkeeping (callbacks, timers, selector wake-ups, transport reads) cost about as much Python
time as aiohttp itself (ADR 009). uvloop implements the same loop on libuv in C, and is a
drop-in ``asyncio.AbstractEventLoop``: nothing above it changes. ``event_loop`` (the setting
``CRAWLSTREAM_EVENT_LOOP`` / ``--event-loop``) picks it:

* ``auto`` (default): uvloop if it can be imported (it is in requirements.lock; it has no
  Windows build), else asyncio's default loop;
* ``uvloop``: uvloop or a ``ConfigError`` saying it is not installed;
* ``asyncio``: always asyncio's default loop (to rule uvloop out when chasing a problem).
"""

from __future__ import annotations

import asyncio
import importlib
import logging

from crawlstream.errors import ConfigError

__all__ = ["EVENT_LOOPS", "event_loop_name", "new_event_loop"]

logger = logging.getLogger(__name__)

EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def event_loop_name(choice: str) -> str:
    """``uvloop`` or ``asyncio``: the loop ``new_event_loop(choice)`` builds here."""
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"event loop must be one of {', '.join(EVENT_LOOPS)}, got {choice!r}")
    if choice == "asyncio":
        return "asyncio"
    try:
        importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "uvloop":
            raise ConfigError(
                f"event loop 'uvloop' was asked for but cannot be imported ({exc}): install it "
                "(it is in requirements.lock) or set CRAWLSTREAM_EVENT_LOOP=auto or asyncio"
            ) from exc
        return "asyncio"
    return "uvloop"


def new_event_loop(choice: str = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop of the kind ``choice`` names (see the module docstring); not set as
    the thread's current loop: the caller runs it (``run_forever`` on its own thread)."""
    name = event_loop_name(choice)
    if name == "uvloop":
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    logger.debug("event loop: %s (%s asked)", name, choice)
    return loop
