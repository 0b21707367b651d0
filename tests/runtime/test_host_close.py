"""A host closes every client it made, even when closing one fails (issue 28).

Session 18's soak: a standalone service rebuilt after an outage ("N message(s) not
acknowledged within 30 s") left Kafka clients behind, a librdkafka main thread, a thread per
broker and their pipes each time (link-extractor-0: 5 clients at the start, 12 after four
rebuilds). The failing producer's ``close`` raised and the host skipped the clients after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlstream.bus import Producer
from crawlstream.errors import BusUnavailable
from crawlstream.runtime import open_host
from crawlstream.settings import load


def test_a_producer_that_fails_to_close_does_not_leave_the_others_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load({"CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"), "CRAWLSTREAM_BUS_FSYNC": "never"})
    made: list[Producer] = []
    with pytest.raises(BusUnavailable, match="not acknowledged"), open_host(settings) as host:
        real = host.bus.producer

        def producer() -> Producer:
            p = real()
            if not made:  # the first one's flush fails, as in an outage

                def close(*_: object, **__: object) -> None:
                    raise BusUnavailable("3 message(s) not acknowledged within 30.0s")

                monkeypatch.setattr(p, "close", close)
            made.append(p)
            return p

        monkeypatch.setattr(host.bus, "producer", producer)
        host.event_producer()
        host.event_producer()
        host.service_loop("t", "t-group", ["urls.discovered"], handler=object())  # type: ignore[arg-type]
    assert len(made) == 3  # two event producers and the loop's dead-letter producer
    for p in made[1:]:
        with pytest.raises(BusUnavailable, match="closed"):
            p.produce("urls.discovered", b"x", partition=0)
