"""``run_standalone``: an outage restarts the service in the same process; a signal ends it."""

from __future__ import annotations

import signal
from pathlib import Path

from crawlstream.errors import BusUnavailable
from crawlstream.runtime import Host, run_standalone
from crawlstream.settings import Settings
from crawlstream.settings._settings import BusSettings


class _Flaky:
    """Fails like a lost cluster on its first run; the second run asks for a stop (SIGTERM)."""

    runs = 0
    closed = 0
    stopped = 0

    def __init__(self, host: Host) -> None:
        self.host = host

    def run(self) -> None:
        type(self).runs += 1
        if type(self).runs == 1:
            raise BusUnavailable("flush failed: the cluster is gone")
        signal.raise_signal(signal.SIGTERM)

    def stop(self) -> None:
        type(self).stopped += 1

    def close(self) -> None:
        type(self).closed += 1


def test_an_outage_rebuilds_the_service_after_a_back_off_and_a_signal_stops_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, bus=BusSettings(partitions=2, fsync="never"))
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert run_standalone(settings, _Flaky, max_backoff_s=0.1) == 0
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert _Flaky.runs == 2, "built and run again after the outage"
    assert _Flaky.closed == 2, "closed after each run (without committing: close never commits)"
    assert _Flaky.stopped == 1, "the signal reached the running service"
