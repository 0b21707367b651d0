"""Helpers of the storage-side service tests (fixtures live in conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from crawlstream.bus import Message
from crawlstream.runtime import Host, open_host
from crawlstream.settings import Settings


@contextmanager
def host_for(settings: Settings) -> Iterator[Host]:
    with open_host(settings) as host:
        yield host


def drain(loop: Any, idle_polls: int = 2, max_iterations: int = 200) -> int:
    """Run ``loop.run_once`` until ``idle_polls`` polls in a row return nothing."""
    consumed = idle = 0
    for _ in range(max_iterations):
        n = loop.run_once()
        consumed += n
        idle = idle + 1 if n == 0 else 0
        if idle >= idle_polls:
            return consumed
    raise AssertionError(f"loop still busy after {max_iterations} iterations")


def read_topic(
    host: Host, topic: str, expected: int, *, group: str = "test.reader", timeout_s: float = 5.0
) -> list[Message]:
    """Every message of ``topic`` (at least ``expected``), read by a fresh group."""
    consumer = host.bus.consumer(group)
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            got += consumer.consume(500, 0.05)
            if len(got) >= expected:
                got += consumer.consume(500, 0.05)  # anything beyond: a failure shows it
                break
    finally:
        consumer.close()
    return got
