"""Start-up objects are frozen while a crawl runs (collections skip them) and unfrozen after.

Real parts: CPython's collector (weak references tell what it freed) and the crawl runner.
"""

from __future__ import annotations

import gc
import io
import threading
import weakref
from collections.abc import Iterator

import pytest

from crawlstream.crawl import CrawlRunner, CrawlStats, LagProbe, ProgressReporter, ServiceSpec
from crawlstream.runtime import startup_objects_frozen


class _Cycle:
    """Garbage only the cyclic collector frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_made_before_the_freeze_are_skipped_until_unfrozen() -> None:
    before = _Cycle()
    before_ref = weakref.ref(before)
    with startup_objects_frozen() as frozen:
        assert frozen > 0 and gc.get_freeze_count() > 0
        del before
        after = _Cycle()
        after_ref = weakref.ref(after)
        del after
        gc.collect()
        assert after_ref() is None  # made while frozen: collected as usual
        assert before_ref() is not None  # frozen: out of the collector's reach
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before_ref() is None  # unfrozen: collected again


class _FreezeWatcher:
    """A service that records, while it runs, how many objects are frozen."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.frozen_while_running = -1

    def run(self) -> None:
        self.frozen_while_running = gc.get_freeze_count()
        self.stopped.wait(10)

    def stop(self) -> None:
        self.stopped.set()

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fail", [False, True])
def test_the_crawl_runner_freezes_while_services_run_and_unfreezes_after(fail: bool) -> None:
    watcher = _FreezeWatcher()
    stop = threading.Event()

    class _Failing(_FreezeWatcher):
        def run(self) -> None:
            raise RuntimeError("boom")

    specs = [ServiceSpec("watcher", lambda: watcher, None, ())]
    if fail:
        specs.append(ServiceSpec("failing", _Failing, None, ()))
    else:
        threading.Timer(0.3, stop.set).start()
    runner = CrawlRunner(
        specs, stop_event=stop, stats=CrawlStats, probe=LagProbe({}, {}, lambda t: []),
        scheduler_pending=lambda: (0, 0), reporter=ProgressReporter(io.StringIO(), is_tty=False),
        check_interval_s=0.01,
    )  # fmt: skip
    if fail:
        with pytest.raises(RuntimeError, match="boom"):
            runner.run()
    else:
        assert runner.run().reason == "stopped"
    assert watcher.frozen_while_running > 0
    assert gc.get_freeze_count() == 0
