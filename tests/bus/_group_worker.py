"""A consumer-group member in its own OS process, for tests/bus/test_kafka_group_processes.py.

``python tests/bus/_group_worker.py BOOTSTRAP TOPIC GROUP OUT_FILE [DELAY_S]``

It processes each message by appending ``M <partition> <offset> <value>`` to OUT_FILE and
fsyncing, and only then commits, writing ``C`` once the commit returned. It also records
``A``/``R``/``L`` lines for partitions assigned, revoked and lost. SIGTERM ends it cleanly
(commit what was processed, leave the group); SIGKILL is what the crash test sends.
A ``DELAY_S`` per message keeps it busy long enough to be killed mid-way.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from crawlstream.bus import KafkaBus, TopicPartition

# A killed member's partitions move after its session times out: keep it short (6 s is a
# broker's default group.min.session.timeout.ms).
_GROUP_CONFIG = {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "500"}
_MAX_RUN_S = 120.0


def _record(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()
    os.fsync(out.fileno())


def _names(partitions: list[TopicPartition]) -> str:
    return " ".join(str(tp.partition) for tp in partitions)


def main(argv: list[str]) -> int:
    bootstrap, topic, group, out_path = argv[:4]
    delay_s = float(argv[4]) if len(argv) > 4 else 0.0
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    stopping = False

    def _stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    bus = KafkaBus(bootstrap, client_id=f"worker-{os.getpid()}", extra_config=_GROUP_CONFIG)
    consumer = bus.consumer(group)
    with Path(out_path).open("a", encoding="utf-8") as out:

        def on_revoke(partitions: list[TopicPartition]) -> None:
            # Everything returned so far is processed (the loop commits after each batch),
            # so committing here hands the partitions over with nothing to replay.
            consumer.commit()
            _record(out, f"R {_names(partitions)}")

        consumer.subscribe(
            [topic],
            on_assign=lambda parts: _record(out, f"A {_names(parts)}"),
            on_revoke=on_revoke,
            on_lost=lambda parts: _record(out, f"L {_names(parts)}"),
        )
        deadline = time.monotonic() + _MAX_RUN_S
        try:
            while not stopping and time.monotonic() < deadline:
                batch = consumer.consume(10, 0.2)
                if not batch:
                    continue
                for message in batch:
                    # 1. process: the effect is durable before anything is committed
                    out.write(f"M {message.partition} {message.offset} {message.value.decode()}\n")
                    out.flush()  # visible to the test at once, so it can kill mid-batch
                    if delay_s:
                        time.sleep(delay_s)
                out.flush()
                os.fsync(out.fileno())
                # 2. commit: a crash before this line replays the batch to the next owner
                consumer.commit()
                _record(out, "C")
        finally:
            consumer.close()
            bus.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
