"""The consumer loop every service runs: decode, handle, flush, then commit.

Modelled on confluent-kafka's ``examples/cooperative_consumer.py``. One iteration::

    1. consume up to ``handler.room(batch_size)`` messages (short timeout, so ``stop`` is
       noticed; shorter still while the handler has unfinished messages)
    2. decode each; an EventDecodeError, or a BadDataError raised by the handler for that
       message, dead-letters the original bytes to ``<topic>.dlq`` and the loop goes on
    3. ``handler.end_batch()`` (every iteration, even an empty one: timed work goes here)
    4. flush the handler's producers and the DLQ producer (durable before the commit)
    5. commit, per partition, up to the first message ``handler.unfinished()`` still holds
       (every consumed message when the handler finishes each one inside the iteration),
       after ``handler.before_commit()``; with ``commit_interval_s`` > 0 at most that often
       while messages flow (a commit fsyncs under the embedded log's default policy), at
       once when a poll finds nothing

The order is the at-least-once guarantee: moving 5 before 2-4 loses messages on a crash;
committing later only replays more.
A handler that finishes messages later (the fetcher: a slow page must not hold back the
results of fast ones) reports them in ``unfinished`` until their output was sent in some
``end_batch``; their offsets are committed by a later iteration. On a clean revoke, and
when ``run`` stops, the loop waits for them first.
Anything that is not bad data (TransientError, bugs) propagates out of ``run``: nothing of
the batch is committed, the process exits non-zero, and the batch replays on restart.
Signals belong to the entry point: it calls ``stop()`` from its handler.

Disk floor (ADR 033): a loop given a ``DiskFloor`` (the services that write under the data
dir) checks it before step 1. Below the floor an iteration consumes nothing for the handler
and calls no ``end_batch``: what is not consumed stays in the topics, and the commit never
moves past what earlier batches finished. It still commits those, beats, samples, and polls
once (one message, sought straight back) so the group keeps the member and rebalances go on;
then it waits out the poll timeout. It resumes by itself once the space is back.

Transactions (ADR 038, Kafka only, opt-in: the deduper): a loop given a ``transaction``
producer commits in step 5 with ``commit_transaction(offsets, consumer)`` instead of
``consumer.commit``: the handler's outputs and the offsets of their inputs become visible
together, or not at all, so a member that dies after sending and before committing has sent
nothing a read_committed reader sees. It commits every partition's offsets (the transaction
holds all their outputs), then calls ``handler.after_commit`` (where state that must never run
ahead of the commit is written). On a clean revoke it commits first and calls ``on_revoke``
after; on a loss with a transaction open it aborts and raises ``BusUnavailable``, as it does
when a commit fails: the handler's memory is ahead of what was committed, so the host builds
the service again from its last commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from crawlstream.bus import Consumer, Message, Producer, TopicPartition, TransactionalProducer
from crawlstream.durable import MIB, DiskFloor
from crawlstream.errors import BadDataError, BusUnavailable, TransientError
from crawlstream.events import TOPIC_EVENTS, EventCodec, dead_letter
from crawlstream.logs import log_fields, service_context
from crawlstream.metrics import per_registry

__all__ = ["EventHandler", "Flushable", "LoopMetrics", "LoopService", "ServiceLoop"]

logger = logging.getLogger(__name__)


class Flushable(Protocol):
    def flush(self, timeout_s: float = 30.0) -> None: ...


class EventHandler:
    """What a service plugs into the loop. Override ``handle``; the rest are optional hooks.

    Partition hooks run inside ``consume`` between batches, after the previous batch was
    committed: ``on_assign`` before the first message of a newly owned partition,
    ``on_revoke`` when a partition is handed over cleanly (flush its state to durable
    storage before returning), ``on_lost`` when it was taken away already (drop its state;
    do not write on its behalf: another member owns it now).
    """

    def handle(self, event: Any, message: Message) -> None:
        """Process one decoded event. Raise BadDataError to dead-letter this message."""
        raise NotImplementedError

    def end_batch(self) -> None:
        """After each poll (even an empty one), before producers are flushed and offsets committed."""

    def before_commit(self) -> None:
        """Make durable what the next commit's inputs were turned into, besides producers
        (the scheduler's frontier files): after it, those inputs are never replayed."""

    def after_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """``offsets`` (next offset per partition) were just committed, with the outputs of their
        inputs when the loop is transactional: state that must not cover more than was committed
        (the deduper's Bloom snapshots) may be written up to them now."""

    def room(self, batch_size: int) -> int:
        """How many messages the next poll may return (0: do not poll; ``end_batch`` should
        then wait for unfinished work). Handlers that finish each message in ``handle`` or
        ``end_batch`` keep the default."""
        return batch_size

    def unfinished(self) -> Mapping[TopicPartition, int]:
        """The lowest offset per partition whose output has not been sent yet: the loop
        commits nothing from it on. Empty when every handled message is finished (default)."""
        return {}

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        """Partitions newly owned by this member."""

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        """Partitions handed over cleanly: persist their state now."""

    def on_lost(self, partitions: list[TopicPartition]) -> None:
        """Partitions already owned by someone else: drop their state, write nothing."""

    def caught_up(self, partitions: list[TopicPartition], as_of_ms: int) -> None:
        """Owned partitions whose every message produced before ``as_of_ms`` (epoch ms) has been
        handled: their log end, read at that time, was reached (the lag sample, between batches)."""


class LoopMetrics:
    """The loops' metrics of one registry, shared by every loop of a process (labelled by
    service, or by consumer group for the lag): events in (``processed``), out (``produced``,
    counted by the host's producers) and dead-lettered per topic, and the lag per partition.

    Use ``LoopMetrics.of(registry)``: a collector name can be registered only once per
    registry, and in embedded mode several services share one process.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.processed = Counter(
            "crawlstream_events_processed",
            "Events handled (decoded and processed) by a service loop",
            ["service", "topic"],
            registry=registry,
        )
        self.dead_lettered = Counter(
            "crawlstream_events_dead_lettered",
            "Messages sent to <topic>.dlq by a service loop",
            ["service", "topic", "error_type"],
            registry=registry,
        )
        self.batches = Counter(
            "crawlstream_loop_batches", "Batches committed by a service loop", ["service"], registry=registry
        )
        self.produced = Counter(
            "crawlstream_events_produced", "Events sent to a topic (queued for the bus)", ["topic"], registry=registry
        )
        self.consumer_lag = Gauge(
            "crawlstream_consumer_lag",
            "Messages of an owned partition not yet committed by its consumer group (log end - committed "
            "offset), sampled every metrics.lag_interval_s by the member that owns it",
            ["group", "topic", "partition"],
            registry=registry,
        )
        self.disk_floor_paused = Gauge(
            "crawlstream_disk_floor_paused",
            "1 while a service loop pauses (consumes and writes nothing) because the data disk has less "
            "free space than data_dir_min_free_mb",
            ["service"],
            registry=registry,
        )
        self.disk_floor_pauses = Counter(
            "crawlstream_disk_floor_pauses",
            "Times a service loop paused because the data disk fell below data_dir_min_free_mb",
            ["service"],
            registry=registry,
        )
        self.lag_sample_failures = Counter(
            "crawlstream_consumer_lag_sample_failures",
            "Lag samples skipped because the bus did not answer (the loop goes on)",
            ["group"],
            registry=registry,
        )

    @classmethod
    def of(cls, registry: CollectorRegistry) -> LoopMetrics:
        return per_registry(cls, registry)


class ServiceLoop:
    """Runs ``handler`` over ``topics`` with at-least-once delivery.

    ``producers`` are flushed after each batch (pass every producer the handler writes
    to); ``dlq_producer`` receives dead letters. ``registry`` holds the loop's counters (a
    private one when None; libraries never touch the global registry). ``heartbeat`` is
    called after every iteration, empty or not (``Heartbeat.beat``: the liveness probe's file).
    ``end_offsets`` (the bus's): with it, every ``lag_interval_s`` the loop sets
    ``crawlstream_consumer_lag`` of each partition it owns to the log end minus the group's
    committed offset (its own last commit; the group's, read once, for a partition it has not
    committed yet), labelled ``group``; a partition it no longer owns loses its series (ADR 019).
    ``samplers`` are called at the same interval, on the loop's thread, with the partitions it
    owns (a service's own gauges: the scheduler's ready domains); so is the handler's
    ``caught_up`` with the owned partitions read to their end (the scheduler's lease clock).
    ``disk_floor``: pause while the data disk is below it (module docstring; None: never).
    ``transaction``: commit outputs and offsets in one transaction (module docstring; it must be
    the producer the handler sends with, and among ``producers``).
    """

    def __init__(
        self,
        *,
        service: str,
        consumer: Consumer,
        topics: Sequence[str],
        codec: EventCodec,
        handler: EventHandler,
        dlq_producer: Producer,
        producers: Sequence[Flushable] = (),
        batch_size: int = 500,
        poll_timeout_s: float = 1.0,
        busy_poll_timeout_s: float = 0.005,
        commit_interval_s: float = 0.0,
        flush_timeout_s: float = 30.0,
        registry: CollectorRegistry | None = None,
        stop_event: threading.Event | None = None,
        clock_ms: Callable[[], int] | None = None,
        heartbeat: Callable[[], None] | None = None,
        group: str = "",
        end_offsets: Callable[[str], Sequence[int]] | None = None,
        lag_interval_s: float = 5.0,
        samplers: Sequence[Callable[[list[TopicPartition]], None]] = (),
        disk_floor: DiskFloor | None = None,
        transaction: TransactionalProducer | None = None,
    ) -> None:
        self._service = service
        self._transaction = transaction
        self._disk_floor = disk_floor if disk_floor is not None and disk_floor.enabled else None
        self._paused = False
        self._group = group or service
        self._end_offsets = end_offsets
        self._lag_interval_s = lag_interval_s
        self._samplers = list(samplers)
        self._next_sample_s = 0.0
        self._group_committed: dict[TopicPartition, int] = {}  # read once per owned partition not committed here
        self._floor: dict[TopicPartition, int] = {}  # the group's commit when this member was given each
        self._lag_reported: set[TopicPartition] = set()
        self._heartbeat = heartbeat
        self._consumer = consumer
        self._topics = list(topics)
        self._codec = codec
        self._handler = handler
        self._dlq = dlq_producer
        self._flushables: list[Flushable] = [*producers, dlq_producer]
        self._batch_size = batch_size
        self._poll_timeout_s = poll_timeout_s
        self._busy_poll_timeout_s = min(busy_poll_timeout_s, poll_timeout_s)
        self._commit_interval_s = commit_interval_s
        self._last_commit_s = time.monotonic()
        self._flush_timeout_s = flush_timeout_s
        self._stop = stop_event or threading.Event()
        self._stop_when_idle = threading.Event()
        self._clock_ms = clock_ms
        self._metrics = LoopMetrics.of(registry if registry is not None else CollectorRegistry())
        self._processed = {t: self._metrics.processed.labels(service, t) for t in self._topics}
        if self._disk_floor is not None:
            self._metrics.disk_floor_paused.labels(service).set(0)
        self._warned: set[tuple[str, str]] = set()
        self._subscribed = False
        self._consumed: dict[TopicPartition, int] = {}  # next offset after the last handled message
        self._committed: dict[TopicPartition, int] = {}

    @property
    def metrics(self) -> LoopMetrics:
        return self._metrics

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch (safe from a signal handler)."""
        self._stop.set()

    def stop_when_idle(self) -> None:
        """Ask ``run`` to return once a poll finds nothing left to consume (drain, then stop)."""
        self._stop_when_idle.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        """True while the data disk is below the loop's floor (as of the last iteration)."""
        return self._paused

    def subscribe(self) -> None:
        """Join the consumer group (``run`` does it on first use)."""
        self._consumer.subscribe(
            self._topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._subscribed = True

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        logger.info("%s: assigned %s", self._service, _describe(partitions))
        self._handler.on_assign(partitions)
        # A handler may read again what its group has finished (the deduper replays from its
        # snapshot): committing that would move the group back, and a member that died in the
        # middle would leave the next owner to redo what was already done.
        for tp, offset in self._consumer.committed(partitions).items():
            if offset is not None:
                self._floor[tp] = offset

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        # The handler finishes what it holds of these partitions (and saves its state);
        # then their outputs are flushed and their offsets committed while still owned.
        logger.info("%s: revoked %s", self._service, _describe(partitions))
        if self._transaction is not None:
            # Everything sent so far is in one transaction: commit it (all partitions) while these
            # are still owned, then the handler persists their state, covering only what committed.
            self._flush()
            self._commit(None, force=True)
            self._handler.on_revoke(partitions)
            self._forget(partitions)
            return
        self._handler.on_revoke(partitions)
        self._flush()
        self._commit(set(partitions), force=True)
        self._forget(partitions)

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        # The group already gave these to another member: committing would be rejected
        # and writing on their behalf would race the new owner.
        logger.warning("%s: lost %s", self._service, _describe(partitions))
        self._handler.on_lost(partitions)
        self._forget(partitions)
        if self._transaction is not None and self._transaction.in_transaction:
            # Its commit would be refused (this member left the generation); what it holds came
            # from partitions still owned too, whose state in the handler is now ahead of the commit.
            self._transaction.abort_transaction()
            raise BusUnavailable(
                f"{self._service}: lost {_describe(partitions)} with a transaction open; it was aborted, "
                "so the service is built again from its last commit"
            )

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._consumed.pop(tp, None)
            self._committed.pop(tp, None)
            self._group_committed.pop(tp, None)
            self._floor.pop(tp, None)
        self._drop_lag(partitions)

    def run(self) -> None:
        """Process batches until ``stop()``; exceptions other than bad data propagate. A drain
        (``stop_when_idle``) below the disk floor stops too: what is left stays in the topics."""
        with service_context(self._service):  # log lines of this thread name the service
            if not self._subscribed:
                self.subscribe()
            logger.info("%s: consuming %s", self._service, ", ".join(self._topics))
            while not self._stop.is_set():
                if self.run_once() == 0 and self._stop_when_idle.is_set():
                    break
            while self._handler.unfinished():  # finish what was started, so nothing replays
                self._finish_batch()
                self._beat()
                time.sleep(self._busy_poll_timeout_s)
            self._finish_batch(force=True)
            logger.info("%s: stopped", self._service)

    def run_once(self) -> int:
        """One poll-handle-flush-commit iteration; returns the number of messages consumed."""
        if not self._subscribed:
            self.subscribe()
        if self._below_floor():
            self._idle_below_floor()
            return 0
        room = self._handler.room(self._batch_size)
        timeout_s = self._busy_poll_timeout_s if self._handler.unfinished() else self._poll_timeout_s
        if self._stop_when_idle.is_set():
            timeout_s = 0.0  # draining: what is left is already in the topics
        if self._consumed != self._committed:  # wake up in time for the deferred commit
            due_in_s = self._last_commit_s + self._commit_interval_s - time.monotonic()
            timeout_s = max(0.0, min(timeout_s, due_in_s))
        consumed = self._consume(room, timeout_s) if room > 0 else []
        if consumed is None:
            return 0
        messages = consumed
        for message in messages:
            self._process(message)
            self._consumed[TopicPartition(message.topic, message.partition)] = message.offset + 1
        # An idle loop commits at once: deferring saves nothing then, and the drain check
        # of `crawlstream run` waits for every group's commit.
        self._finish_batch(force=not messages and not self._handler.unfinished())
        self._sample()
        self._beat()
        return len(messages)

    def _consume(self, n: int, timeout_s: float) -> list[Message] | None:
        """Up to ``n`` messages; None when the bus found a corrupt record (the embedded log's CRC
        check) and has already moved past it: there are no bytes to dead-letter, so it is counted
        and the loop goes on."""
        try:
            return self._consumer.consume(n, timeout_s)
        except BadDataError as exc:
            self._metrics.dead_lettered.labels(self._service, "*", type(exc).__name__).inc()
            logger.error("%s: the bus skipped a corrupt record: %s", self._service, exc)
            return None

    def _below_floor(self) -> bool:
        """Check the floor (a cached reading); log and count the change when it flips."""
        floor = self._disk_floor
        if floor is None:
            return False
        below = floor.below()
        if below != self._paused:
            self._paused = below
            self._metrics.disk_floor_paused.labels(self._service).set(int(below))
            if below:
                self._metrics.disk_floor_pauses.labels(self._service).inc()
                logger.warning(
                    "%s: pausing, the data disk is below its floor: %d MB free under %s, the floor is %d MB "
                    "(CRAWLSTREAM_DATA_DIR_MIN_FREE_MB); consuming and writing nothing until it is back above",
                    self._service, floor.free() // MIB, floor.path, floor.min_free_bytes // MIB,
                )
            else:
                logger.info("%s: resuming, the data disk is above its floor again: %s", self._service, floor.describe())
        return below

    def _idle_below_floor(self) -> None:
        """One paused iteration: commit what earlier batches finished (their ``end_batch`` ran),
        poll once so the group keeps this member (librdkafka drops one that has not polled for
        ``max.poll.interval.ms``; rebalances run inside the poll), put back what it returned,
        and wait out the poll timeout."""
        started = time.monotonic()
        self._commit(None, force=False)
        for message in self._consume(1, self._poll_timeout_s) or []:
            self._consumer.seek(TopicPartition(message.topic, message.partition), message.offset)
        self._sample()
        self._beat()
        self._stop.wait(max(0.0, self._poll_timeout_s - (time.monotonic() - started)))

    def _sample(self) -> None:
        now_s = time.monotonic()
        if now_s < self._next_sample_s or (self._end_offsets is None and not self._samplers):
            return
        self._next_sample_s = now_s + self._lag_interval_s
        owned = self._consumer.assignment()
        if self._end_offsets is not None:
            self._sample_lag(owned, self._end_offsets)
        for sampler in self._samplers:
            sampler(owned)

    def _sample_lag(self, owned: list[TopicPartition], end_offsets: Callable[[str], Sequence[int]]) -> None:
        """One end-offsets request per topic (and, for owned partitions not committed by this loop
        yet, one read of the group's commits), then set the gauges."""
        as_of_ms = int(time.time() * 1000)  # before the ends are read: all produced earlier is below them
        try:
            ends = {topic: end_offsets(topic) for topic in sorted({tp.topic for tp in owned})}
            unknown = [tp for tp in owned if tp not in self._committed and tp not in self._group_committed]
            if unknown:
                for tp, offset in self._consumer.committed(unknown).items():
                    self._group_committed[tp] = offset or 0  # none yet: the group starts at the beginning
        except TransientError as exc:
            self._metrics.lag_sample_failures.labels(self._group).inc()
            logger.debug("%s: lag not sampled: %s", self._service, exc)
            return
        gauge = self._metrics.consumer_lag
        caught_up: list[TopicPartition] = []
        for tp in owned:
            end = ends[tp.topic][tp.partition]
            committed = self._committed.get(tp, self._group_committed.get(tp, 0))
            gauge.labels(self._group, tp.topic, str(tp.partition)).set(max(0, end - committed))
            if self._consumed.get(tp, committed) >= end:
                caught_up.append(tp)
        self._drop_lag(list(self._lag_reported - set(owned)))
        self._lag_reported = set(owned)
        if caught_up:
            self._handler.caught_up(caught_up, as_of_ms)

    def _drop_lag(self, partitions: Sequence[TopicPartition]) -> None:
        """Remove the lag series of partitions this member no longer owns (the new owner reports them)."""
        for tp in partitions:
            if tp in self._lag_reported:
                self._lag_reported.discard(tp)
                # KeyError: another member of the group in this process (one registry) dropped it
                with contextlib.suppress(KeyError):
                    self._metrics.consumer_lag.remove(self._group, tp.topic, str(tp.partition))

    def _beat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat()

    def _finish_batch(self, force: bool = False) -> None:
        self._handler.end_batch()
        self._flush()
        if self._commit(None, force=force):
            self._metrics.batches.labels(self._service).inc()

    def _flush(self) -> None:
        for flushable in self._flushables:
            flushable.flush(self._flush_timeout_s)

    def _commit(self, only: set[TopicPartition] | None, *, force: bool) -> bool:
        """Commit what is finished (of ``only``, or of every partition) if the commit interval
        has passed or ``force``; False if nothing was committed."""
        now_s = time.monotonic()
        if not force and now_s - self._last_commit_s < self._commit_interval_s:
            return False
        self._last_commit_s = now_s
        # Past what the bus skips (Kafka: the markers of a transactional producer's commits).
        self._consumed.update(self._consumer.positions())
        unfinished = self._handler.unfinished()
        offsets: dict[TopicPartition, int] = {}
        for tp, consumed in self._consumed.items():
            if only is not None and tp not in only:
                continue
            low = unfinished.get(tp)
            offset = consumed if low is None else min(consumed, low)
            if offset < self._floor.get(tp, 0):
                continue  # re-reading what the group had finished (``_on_assign``)
            if self._committed.get(tp) != offset:
                offsets[tp] = offset
        if self._transaction is not None:
            return self._commit_transaction(offsets, self._transaction)
        if not offsets:
            return False
        self._handler.before_commit()
        self._consumer.commit(offsets)
        self._committed.update(offsets)
        self._handler.after_commit(offsets)
        return True

    def _commit_transaction(self, offsets: dict[TopicPartition, int], transaction: TransactionalProducer) -> bool:
        """Commit the open transaction with ``offsets``; a failure (BusUnavailable: aborted, or
        the producer fenced) propagates, and the host builds the service again."""
        if not offsets and not transaction.in_transaction:
            return False
        self._handler.before_commit()
        transaction.commit_transaction(offsets, self._consumer)
        self._committed.update(offsets)
        self._handler.after_commit(offsets)
        return True

    def _process(self, message: Message) -> None:
        try:
            event = self._codec.decode(message.value, TOPIC_EVENTS.get(message.topic))
            self._handler.handle(event, message)
        except BadDataError as exc:
            self._dead_letter(message, exc)
            return
        counter = self._processed.get(message.topic)
        if counter is None:
            counter = self._processed[message.topic] = self._metrics.processed.labels(self._service, message.topic)
        counter.inc()

    def _dead_letter(self, message: Message, error: BadDataError) -> None:
        error_type = type(error).__name__
        self._metrics.dead_lettered.labels(self._service, message.topic, error_type).inc()
        where = log_fields(topic=message.topic, partition=message.partition, offset=message.offset)
        # The first of a kind per topic is a warning; the rest go to DEBUG (a flood of bad data
        # must not flood the log).
        first = (message.topic, error_type) not in self._warned
        self._warned.add((message.topic, error_type))
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "%s: dead-lettering %s[%d]@%d (%s: %s)%s",
            self._service,
            message.topic,
            message.partition,
            message.offset,
            error_type,
            error,
            f"; further {error_type} on this topic are logged at DEBUG" if first else "",
            extra=where,
        )
        if self._clock_ms is None:
            dead_letter(self._dlq, message, error)
        else:
            dead_letter(self._dlq, message, error, clock_ms=self._clock_ms)

    def close(self) -> None:
        """Leave the group (commits nothing: every handled batch is already committed)."""
        self._drop_lag(list(self._lag_reported))
        self._consumer.close()

    def __enter__(self) -> ServiceLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(partitions)) or "nothing"


class LoopService:
    """A built service around one ``ServiceLoop``: what ``crawlstream run`` and
    ``crawlstream service <name>`` drive (``run`` blocks until ``stop``; ``close`` releases).

    ``on_close`` runs after the loop has left its group, even if that failed: the place for
    final snapshots and closing the handler's resources.
    """

    def __init__(self, loop: ServiceLoop, handler: EventHandler, *, on_close: Callable[[], None] | None = None) -> None:
        self.loop = loop
        self.handler = handler
        self._on_close = on_close

    def run(self) -> None:
        self.loop.run()

    def stop(self) -> None:
        self.loop.stop()

    def stop_when_idle(self) -> None:
        self.loop.stop_when_idle()

    def close(self) -> None:
        try:
            self.loop.close()
        finally:
            if self._on_close is not None:
                self._on_close()
