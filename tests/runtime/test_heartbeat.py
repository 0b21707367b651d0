"""The heartbeat file the liveness probes of non-HTTP services read (deploy/k8s)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from crawlstream import topics
from crawlstream.bus import Bus
from crawlstream.errors import ConfigError
from crawlstream.events import EventCodec
from crawlstream.runtime import EventHandler, Heartbeat, Host, ServiceLoop, run_standalone
from crawlstream.settings import Settings
from crawlstream.settings._settings import BusSettings


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_beat_creates_the_file(tmp_path: Path) -> None:
    heartbeat = Heartbeat(tmp_path / "run" / "heartbeat")
    heartbeat.start()
    assert not (tmp_path / "run" / "heartbeat").exists(), "not live before the loop turned once"
    heartbeat.beat()
    assert (tmp_path / "run" / "heartbeat").exists()


def test_beats_touch_the_file_at_most_once_per_interval(tmp_path: Path) -> None:
    """A busy loop iterates hundreds of times a second; the probe needs seconds."""
    path, clock = tmp_path / "heartbeat", _Clock()
    heartbeat = Heartbeat(path, min_interval_s=5.0, clock_s=clock)
    heartbeat.beat()
    os.utime(path, (0, 0))
    clock.now_s += 4.9
    heartbeat.beat()
    assert path.stat().st_mtime == 0
    clock.now_s += 0.2
    heartbeat.beat()
    assert path.stat().st_mtime > 0


def test_start_and_stop_remove_a_file_that_would_look_live(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    path.touch()
    heartbeat = Heartbeat(path)
    heartbeat.start()
    assert not path.exists(), "a file left by the previous container is not this process's heartbeat"
    heartbeat.beat()
    heartbeat.stop()
    assert not path.exists()


def test_an_unwritable_location_fails_at_start_naming_the_variable(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="CRAWLSTREAM_HEARTBEAT_FILE"):
        Heartbeat(tmp_path / "a-file" / "heartbeat").start()


def test_without_a_path_nothing_is_written(tmp_path: Path) -> None:
    heartbeat = Heartbeat(None)
    heartbeat.start()
    heartbeat.beat()
    heartbeat.stop()
    assert list(tmp_path.iterdir()) == []


def test_the_service_loop_beats_on_every_iteration_even_an_empty_one(bus: Bus, codec: EventCodec) -> None:
    bus.create_topics([topics.URLS_DISCOVERED], 2)
    beats: list[int] = []
    loop = ServiceLoop(
        service="test",
        consumer=bus.consumer("heartbeat"),
        topics=[topics.URLS_DISCOVERED],
        codec=codec,
        handler=EventHandler(),
        dlq_producer=bus.producer(),
        poll_timeout_s=0.05,
        heartbeat=lambda: beats.append(1),
    )
    with loop:
        loop.run_once()
        loop.run_once()
    assert len(beats) == 2


class _Beating:
    """Beats through its host like a service loop, checks the file, then asks for a stop."""

    seen_live = False

    def __init__(self, host: Host) -> None:
        self.host = host

    def run(self) -> None:
        self.host.heartbeat.beat()
        assert self.host.settings.heartbeat_file is not None
        type(self).seen_live = self.host.settings.heartbeat_file.exists()
        signal.raise_signal(signal.SIGTERM)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_standalone_service_beats_while_it_runs_and_removes_the_file_on_exit(tmp_path: Path) -> None:
    path = tmp_path / "tmp" / "heartbeat"
    settings = Settings(data_dir=tmp_path, heartbeat_file=path, bus=BusSettings(partitions=2, fsync="never"))
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert run_standalone(settings, _Beating) == 0
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert _Beating.seen_live
    assert not path.exists()
