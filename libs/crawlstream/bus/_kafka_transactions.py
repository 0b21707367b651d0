"""The Kafka backend's transactional producer: messages and consumer offsets commit together.

librdkafka's transaction calls, with its error classes mapped to what the caller can do
(confluent-kafka's ``examples/eos-transactions.py``): a retriable error is retried within
``timeout_s``; one that requires an abort is answered by aborting, then ``BusUnavailable``;
a fatal one (fenced by a newer producer with the same ``transactional.id``) is
``BusUnavailable`` at once. Either way the caller rebuilds from its last commit (ADR 038).

``transaction.timeout.ms`` bounds how long a transaction left open by a member that died stalls
read_committed readers of the partitions it wrote to: the broker aborts it then, or sooner when a
producer with the same ``transactional.id`` calls ``init_transactions``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

from crawlstream.bus._base import Consumer, TopicPartition, TransactionalProducer
from crawlstream.bus._kafka import KafkaProducer
from crawlstream.bus._kafka_consumer import KafkaConsumer
from crawlstream.bus._kafka_support import call_within
from crawlstream.errors import BusUnavailable, ClientWedged, ConfigError

if TYPE_CHECKING:
    from crawlstream.bus._kafka import KafkaBus

__all__ = ["KafkaTransactionalProducer"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
_WEDGED_AFTER_S = 15.0  # past a transaction call's own timeout: the client is stuck


class KafkaTransactionalProducer(KafkaProducer, TransactionalProducer):
    """A ``KafkaProducer`` with ``transactional.id`` (so idempotent) whose sends are grouped in
    transactions, opened by the first ``produce`` after a commit or abort.

    ``init_transactions`` runs here: it fences an older producer with the same id and aborts
    its open transaction. ``timeout_s`` bounds each transaction call (and is the transaction
    timeout); past it, a call still failing with a retriable error raises ``BusUnavailable``.
    """

    def __init__(
        self, config: Mapping[str, Any], bus: KafkaBus | None, transactional_id: str, timeout_s: float = 30.0
    ) -> None:
        if not transactional_id:
            raise ConfigError("a transactional producer needs a transactional.id, found an empty one")
        super().__init__(
            {**config, "transactional.id": transactional_id, "transaction.timeout.ms": int(timeout_s * 1000)}, bus
        )
        self.transactional_id = transactional_id
        self._timeout_s = timeout_s
        self._open = False
        self._wedged = False
        try:
            self._call(lambda t: self._producer.init_transactions(t), "init_transactions", abortable=False)
        except BusUnavailable:
            # librdkafka goes on initialising after the call times out ("retry call to resume"):
            # a client left alive (an exception's frames keep it in a cycle until a collection)
            # could take its epoch after the successor built with the same id, and fence it
            # (session 23's soak, twice). ``ClientWedged`` passes: releasing would wait on the call.
            self._release()
            raise

    @property
    def in_transaction(self) -> bool:
        return self._open

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
        self._begin()
        super().produce(topic, value, partition=partition, key=key, headers=headers, timestamp_ms=timestamp_ms)

    def _begin(self) -> None:
        if self._open:
            return
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise BusUnavailable(f"begin_transaction ({self.transactional_id}) failed: {exc}") from exc
        self._open = True

    def commit_transaction(self, offsets: Mapping[TopicPartition, int], consumer: Consumer) -> None:
        if not isinstance(consumer, KafkaConsumer):
            raise TypeError(f"offsets of a Kafka transaction need a KafkaConsumer, found {type(consumer).__name__}")
        if not offsets and not self._open:
            return
        self._begin()
        if offsets:
            request = [confluent_kafka.TopicPartition(tp.topic, tp.partition, pos) for tp, pos in offsets.items()]
            metadata = consumer.group_metadata()
            self._call(lambda t: self._producer.send_offsets_to_transaction(request, metadata, t),
                       f"send_offsets_to_transaction of {dict(offsets)}")
        self._call(lambda t: self._producer.commit_transaction(t), "commit_transaction")
        self._open = False

    def abort_transaction(self) -> None:
        if not self._open:
            return
        try:
            self._call(lambda t: self._producer.abort_transaction(t), "abort_transaction", abortable=False)
        finally:
            self._open = False

    def _call(self, call: Callable[[float], T], what: str, *, abortable: bool = True) -> T:
        """``call(timeout_s)``, again while librdkafka says the error is retriable (the coordinator
        moving) and time is left; an error that requires an abort aborts first (``abortable``)."""
        if self._wedged:
            raise ClientWedged(f"{what} ({self.transactional_id}): an earlier call of this producer is stuck")
        deadline = time.monotonic() + self._timeout_s
        pause = 0.05
        while True:
            budget = max(1.0, deadline - time.monotonic())
            try:
                # librdkafka does not always keep the timeout it is given (its send_offsets waits
                # for ever on a group coordinator whose broker was replaced: #5456, #5511; the
                # 3-broker kill e2e test left a deduper there for good): past it and a margin,
                # the process is given up (ClientWedged: exit 75, a fresh one takes over).
                return call_within(functools.partial(call, budget), budget + _WEDGED_AFTER_S, what,
                                   "bus.transaction_timeout_s")
            except ClientWedged:
                self._wedged = True
                raise
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError):
                    raise BusUnavailable(f"{what} ({self.transactional_id}) failed: {exc}") from exc
                if abortable and err.txn_requires_abort():
                    self._abort_after(err, what)
                    raise BusUnavailable(
                        f"{what} ({self.transactional_id}) failed and the transaction was aborted: {err.str()}; "
                        "rebuild from the last commit"
                    ) from exc
                if err.retriable() and not err.fatal() and time.monotonic() < deadline:
                    time.sleep(pause)
                    pause = min(pause * 2, 1.0)
                    continue
                raise BusUnavailable(f"{what} ({self.transactional_id}) failed: {err.str()}") from exc

    def _abort_after(self, err: KafkaError, what: str) -> None:
        logger.warning("%s (%s): %s; aborting the transaction", what, self.transactional_id, err.str())
        try:
            self.abort_transaction()
        except BusUnavailable as exc:  # the caller rebuilds the producer either way
            logger.warning("aborting the transaction of %s failed too: %s", self.transactional_id, exc)

    def close(self, timeout_s: float = 30.0) -> None:
        """Abort an open transaction (what it holds was never committed: it must not be either),
        then release. Nothing is flushed: every message is in a transaction, and a committed one
        was flushed by its commit. Safe to call twice; raises nothing (a fenced producer cannot
        abort: the broker has aborted its transaction already)."""
        if self._closed:
            return
        self._closed = True
        if self._wedged:  # aborting or releasing would wait on the stuck call: the process exit drops it
            return
        if self._open:
            try:
                self.abort_transaction()
            except BusUnavailable as exc:
                logger.warning("closing %s: its open transaction was not aborted: %s", self.transactional_id, exc)
        with contextlib.suppress(KafkaException):  # a fenced producer reports its fatal error again
            self._producer.purge()
            self._producer.poll(0)
        self._release()

    def _on_delivery(self, err: KafkaError | None, msg: confluent_kafka.Message) -> None:
        # An abort purges what was not sent yet: those messages are rolled back with their
        # transaction's offsets, not lost (a failure ``flush`` must report).
        if err is not None and err.code() in _PURGED:
            return
        super()._on_delivery(err, msg)
