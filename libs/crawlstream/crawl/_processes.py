"""``crawlstream run --processes N``: the crawl loop's services in N worker processes (ADR 025).

The parent process opens the embedded log first (``EmbeddedBus(first=True)``: it waits until no
process of an earlier run is left, then shares the log), starts the private Redis, and launches
N workers, ``python -m crawlstream.crawl._worker``, each given its settings on stdin. Worker
``i`` runs the partitioned services (deduper, scheduler, fetcher, link extractor) as member
``(i, N)`` of their groups: it owns partition ``p`` when ``p % N == i``. Services whose state is
one directory (content store, lake sink) and the run's stats stay in the parent, which owns
their groups whole. ``WorkerPool`` is a ``Runnable`` of the crawl runner: its ``run`` returns
when told to stop and fails when a worker dies; ``close`` stops the workers (SIGTERM: they
finish their batch and commit, as the single-process services do) and waits for them.

A worker whose parent disappears (kill -9) stops on its own within 0.2 s (``_worker``); the
next run's parent waits for it (the log's process lock) before starting its own workers.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from crawlstream.bus._factory import open_bus
from crawlstream.errors import ConfigError, CrawlstreamError
from crawlstream.events import EventCodec
from crawlstream.redisconn import attach_redis, open_redis
from crawlstream.runtime import Host
from crawlstream.settings import Settings

__all__ = [
    "CRAWL_SERVICES",
    "WorkerFailed",
    "WorkerPayload",
    "WorkerPool",
    "default_processes",
    "open_crawl_host",
]

logger = logging.getLogger(__name__)

# The crawl loop: every run needs these four, and their work splits by partition, so each worker
# runs all of them (the content store and the lake stay in the parent, ADR 025).
CRAWL_SERVICES = ("deduper", "scheduler", "fetcher", "link-extractor")
# A new run waits this long for the processes of a killed run to finish stopping.
LOCK_WAIT_S = 60.0
_STOP_TIMEOUT_S = 60.0


class WorkerFailed(CrawlstreamError):
    """A worker process ended while the crawl ran (its log lines say why); a re-run resumes."""


def default_processes() -> int:
    """The cores this process may use (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def open_crawl_host(
    settings: Settings,
    *,
    member: tuple[int, int] | None = None,
    first: bool = False,
    attach: bool = False,
    stop_event: threading.Event | None = None,
) -> Iterator[Host]:
    """A ``Host`` on the embedded log shared by a run's processes (``open_host`` otherwise).

    ``attach``: use the Redis the run's parent serves (a worker) instead of starting it.
    """
    from crawlstream.topics import ALL_TOPICS

    with ExitStack() as stack:
        bus = open_bus(settings, member=member, first=first, lock_wait_s=LOCK_WAIT_S if first else 0.0)
        stack.callback(bus.close)
        bus.create_topics(ALL_TOPICS, settings.bus.partitions)
        redis_open = attach_redis if attach else open_redis
        host = Host(
            settings=settings,
            bus=bus,
            codec=EventCodec.from_settings(settings),
            registry=CollectorRegistry(),
            stop_event=stop_event or threading.Event(),
            _redis_factory=lambda: redis_open(settings.redis_url, settings.data_dir),
        )
        stack.callback(host.close)
        yield host


@dataclass(frozen=True)
class WorkerPayload:
    """What a worker is started with (pickled on its stdin)."""

    settings: Settings
    index: int
    count: int
    services: tuple[str, ...]
    resolve_map: Mapping[str, tuple[str, int]] | None
    log_file: Path | None
    parent_pid: int


class WorkerPool:
    """N worker processes as one ``Runnable`` of the crawl runner (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        count: int,
        *,
        services: Sequence[str] = CRAWL_SERVICES,
        resolve_map: Mapping[str, tuple[str, int]] | None = None,
        log_file: Path | None = None,
        crawl_stop: threading.Event | None = None,
    ) -> None:
        if count < 1:
            raise ConfigError(f"--processes must be >= 1, got {count}")
        self.settings = settings
        self.count = count
        self.services = tuple(services)
        self.resolve_map = dict(resolve_map) if resolve_map is not None else None
        self.log_file = log_file
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        # The crawl's stop (a Ctrl-C reaches the workers too): workers ending then are expected.
        self._crawl_stop = crawl_stop or threading.Event()

    def start(self) -> None:
        for i in range(self.count):
            payload = WorkerPayload(
                self.settings, i, self.count, self.services, self.resolve_map, self.log_file, os.getpid()
            )
            proc = subprocess.Popen(
                [sys.executable, "-m", "crawlstream.crawl._worker"], stdin=subprocess.PIPE, close_fds=True
            )
            assert proc.stdin is not None
            proc.stdin.write(pickle.dumps(payload))
            proc.stdin.close()
            self.procs.append(proc)
        logger.info("started %d crawl workers: pids %s", self.count, ", ".join(str(p.pid) for p in self.procs))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def run(self) -> None:
        if not self.procs:
            self.start()
        while not self._stop.wait(0.1):
            dead = [(i, p.returncode) for i, p in enumerate(self.procs) if p.poll() is not None]
            if dead and self._crawl_stop.is_set() and all(rc == 0 for _, rc in dead):
                return  # stopping: they finished their batch and left
            if dead:
                raise WorkerFailed(
                    "crawl worker(s) ended unexpectedly: "
                    + ", ".join(f"worker {i} (exit {rc})" for i, rc in dead)
                    + "; the crawl stops (run it again to resume)"
                )

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Ask every worker to finish its batch and commit (SIGTERM), then wait for them."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.error("crawl worker %d did not stop within %.0f s: killed", proc.pid, _STOP_TIMEOUT_S)
                proc.kill()
                proc.wait()
