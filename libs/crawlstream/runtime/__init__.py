"""The service runtime: the consume-decode-handle-flush-commit loop every service runs."""

from crawlstream.runtime._heartbeat import Heartbeat
from crawlstream.runtime._loop import EventHandler, Flushable, LoopMetrics, LoopService, ServiceLoop

__all__ = ["EventHandler", "Flushable", "Heartbeat", "LoopMetrics", "LoopService", "ServiceLoop"]
