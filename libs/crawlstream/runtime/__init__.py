"""The service runtime: the consume-decode-handle-flush-commit loop every service runs."""

from crawlstream.runtime._aio import EVENT_LOOPS, event_loop_name, new_event_loop
from crawlstream.runtime._gc import freeze_startup_objects, startup_objects_frozen
from crawlstream.runtime._heartbeat import Heartbeat
from crawlstream.runtime._loop import EventHandler, Flushable, LoopMetrics, LoopService, ServiceLoop

__all__ = [
    "EVENT_LOOPS",
    "EventHandler",
    "Flushable",
    "Heartbeat",
    "LoopMetrics",
    "LoopService",
    "ServiceLoop",
    "event_loop_name",
    "freeze_startup_objects",
    "new_event_loop",
    "startup_objects_frozen",
]
