"""What the Kafka backend's producer, consumer and bus share: error classification, retries
while the cluster recovers, warn-once error counting and partition counts from metadata."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from confluent_kafka import KafkaError, KafkaException

from crawlstream.errors import BusUnavailable, ClientWedged

__all__ = ["METADATA_TIMEOUT_S", "WarnOnce", "call_within", "partitions_in_metadata", "retrying"]

logger = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 10.0
_PROPAGATION_S = 3.0


# Errors after which the same request succeeds once the cluster recovers (a broker restarted,
# leadership or the group coordinator moved), besides those librdkafka marks retriable.
_TRANSIENT_ERRORS = frozenset(
    {
        KafkaError._WAIT_COORD,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.UNSTABLE_OFFSET_COMMIT,  # an open transaction holds offsets: it ends or times out
    }
)
_COMMIT_RETRY_S = 60.0
T = TypeVar("T")


def serving_callbacks(call: Callable[..., T], what: str, *args: Any) -> T:
    """``call(*args)``, a producer's poll or flush (which run its delivery callbacks), failing only
    as ``BusUnavailable``: a ``KafkaException`` (a fatal error, such as a transactional producer
    fenced), or the ``SystemError`` confluent-kafka raises when a callback ran while such an
    exception was already set (session 23's soak: the deduper's process died of one twice).
    Arguments rather than a closure, and a fixed ``what``: every produce polls."""
    try:
        return call(*args)
    except KafkaException as exc:
        raise BusUnavailable(f"{what} failed: {exc}") from exc
    except SystemError as exc:
        cause = exc.__cause__ or exc.__context__
        if not isinstance(cause, KafkaException):
            raise
        raise BusUnavailable(f"{what} failed: {cause}") from cause


def _retriable(err: Any) -> bool:
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _TRANSIENT_ERRORS)


def retrying(
    call: Callable[[], T],
    what: str,
    timeout_s: float = _COMMIT_RETRY_S,
    on_retry: Callable[[KafkaError, str], None] | None = None,
) -> T:
    """``call()``, asked again while the cluster answers with a transient error (a partition
    between leaders, the group coordinator moving or still loading its offsets: both seen on
    a fresh cluster and during a broker failover), up to ``timeout_s``. ``on_retry(err,
    what)`` hears of each retry (a consumer's warn-once counter)."""
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not _retriable(err) or time.monotonic() > deadline:
                raise BusUnavailable(f"{what} failed: {exc}") from exc
            if on_retry is not None and isinstance(err, KafkaError):
                on_retry(err, f"{what} (retried while the cluster recovers)")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


class WarnOnce:
    """Warn once per error code, count always: one dead broker must not flood the logs."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, err: KafkaError, context: str) -> None:
        name = err.name()
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.counts[name] == 1:
            logger.warning("kafka %s: %s (further %s errors counted, not logged)", context, err.str(), name)


def partitions_in_metadata(client: Any, topic: str) -> int:
    """Partition count of ``topic`` from cluster metadata.

    Right after CreateTopics the broker a client asks may not know the topic yet (metadata
    propagates from the controller): "unknown topic" or "leader not available" is retried
    for a few seconds before it is believed.
    """
    started = time.monotonic()
    deadline = started + METADATA_TIMEOUT_S
    last_error: Any = None
    while True:
        try:
            metadata = client.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise BusUnavailable(f"metadata for topic {topic!r} unavailable: {exc}") from exc
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        last_error = found.error if found is not None else "not in the answer"
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            # Propagation takes milliseconds; past a few seconds the topic does not exist.
            deadline = min(deadline, started + _PROPAGATION_S)
        if time.monotonic() > deadline:
            raise BusUnavailable(
                f"topic {topic!r} has no usable metadata after {METADATA_TIMEOUT_S:.0f}s (last error: "
                f"{last_error}); does it exist? (services create their topics at start-up)"
            )
        time.sleep(0.1)


def call_within(call: Callable[[], T], deadline_s: float, what: str, setting: str) -> T:
    """``call()`` on a daemon thread of its own; ``ClientWedged`` if it has not returned after
    ``deadline_s`` (the thread is left in the stuck C call: the handle can be neither used nor
    closed, only dropped with the process). librdkafka's blocking calls take a timeout, but some
    do not keep it (a commit after a broker failover; ``send_offsets_to_transaction`` while its
    group coordinator's broker was replaced: confluentinc/librdkafka#5456, #5511). ``setting``
    names the deadline's setting in the message."""
    done = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=work, name=f"kafka-{what.split()[0]}", daemon=True).start()
    if not done.wait(deadline_s):
        raise ClientWedged(f"{what} did not return in {deadline_s:g} s ({setting}): the Kafka client is stuck")
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)
