"""The service runtime: the consume-decode-handle-flush-commit loop every service runs, and the
process host it runs on (bus, Redis, codec, metrics, signals) for one service or many."""

from crawlstream.runtime._aio import EVENT_LOOPS, event_loop_name, new_event_loop
from crawlstream.runtime._gc import freeze_startup_objects, startup_objects_frozen
from crawlstream.runtime._heartbeat import Heartbeat
from crawlstream.runtime._host import (
    EXIT_CLIENT_WEDGED,
    Host,
    Runnable,
    install_stop_signals,
    open_host,
    run_standalone,
)
from crawlstream.runtime._loop import EventHandler, Flushable, LoopMetrics, LoopService, ServiceLoop
from crawlstream.runtime._memory import limit_malloc_arenas

__all__ = [
    "EVENT_LOOPS",
    "EXIT_CLIENT_WEDGED",
    "EventHandler",
    "Flushable",
    "Heartbeat",
    "Host",
    "LoopMetrics",
    "LoopService",
    "Runnable",
    "ServiceLoop",
    "event_loop_name",
    "freeze_startup_objects",
    "install_stop_signals",
    "limit_malloc_arenas",
    "new_event_loop",
    "open_host",
    "run_standalone",
    "startup_objects_frozen",
]
