"""A crawlstream Kafka consumer that falls behind, in its own OS process, for
tests/bus/test_kafka_backend.py's prefetch test.

``python tests/bus/_prefetch_worker.py BOOTSTRAP TOPIC GROUP EXPECTED [EXTRA_CONFIG]``

It takes one message, then stops polling for a few seconds as a member behind on its input
would (librdkafka keeps fetching on its own threads meanwhile), then reads the rest. Prints one
JSON line: the RSS growth from its subscription to the end of its lag (what was prefetched)
and the sizes of what it read.
"""

from __future__ import annotations

import json
import sys
import time

import psutil

from crawlstream.bus import KafkaBus
from crawlstream.bus._kafka_config import parse_kafka_extra_config

_LAG_S = 6.0
_MAX_RUN_S = 90.0


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def main(bootstrap: str, topic: str, group: str, expected: int, extra: str = "") -> None:
    bus = KafkaBus(bootstrap, extra_config=parse_kafka_extra_config(extra))
    consumer = bus.consumer(group)
    consumer.subscribe([topic])
    before = _rss()
    deadline = time.monotonic() + _MAX_RUN_S
    first = []
    while not first and time.monotonic() < deadline:
        first = consumer.consume(1, 0.5)
    time.sleep(_LAG_S)
    lagged = _rss()
    sizes = [len(m.value) for m in first]
    while len(sizes) < expected and time.monotonic() < deadline:
        sizes += [len(m.value) for m in consumer.consume(100, 0.5)]
    consumer.close()
    bus.close()
    print(json.dumps({"prefetched_bytes": lagged - before, "sizes": sizes}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:6])
