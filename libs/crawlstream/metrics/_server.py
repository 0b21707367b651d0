"""A process's Prometheus endpoint: the text exposition of one registry over HTTP, stoppable.

Every ``crawlstream service NAME`` process serves one (on NAME's port of ``SERVICE_METRICS_PORTS``
unless ``metrics.port`` says otherwise); ``crawlstream run`` serves one only when ``metrics.port``
is set. A port that cannot be bound is logged as an error and the process goes on without the
endpoint: a crawl does not stop for its metrics (the scraper shows the target down).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["SERVICE_METRICS_PORTS", "MetricsServer", "metrics_port", "serve_metrics"]

logger = logging.getLogger(__name__)

# Each service's default port, so the services of one machine (a dev box, the tests) do not
# collide; the k8s manifests and docker-compose.yml name the same numbers (README: Metrics and logs).
SERVICE_METRICS_PORTS: Final = {
    "deduper": 9401,
    "scheduler": 9402,
    "fetcher": 9403,
    "link-extractor": 9404,
    "bucket-compressor": 9405,
    "parquet-sink": 9406,
    "index-compactor": 9407,
    "query-api": 9408,
}


def metrics_port(configured: int | None, service: str | None) -> int:
    """The port to serve on: ``metrics.port`` when set, else ``service``'s own, else 0 (none)."""
    if configured is not None:
        return configured
    return SERVICE_METRICS_PORTS.get(service or "", 0)


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` on a daemon thread until ``stop``.

    ``port`` 0 binds a free port (tests); ``bound_port`` says which. Raises ``OSError`` when the
    address cannot be bound.
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._httpd: WSGIServer
        self._thread: threading.Thread
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self._thread.name = "metrics-http"
        self.host = host
        self.bound_port: int = self._httpd.server_port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.bound_port}/metrics"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> Iterator[MetricsServer | None]:
    """A ``MetricsServer`` for the block (None when ``port`` is 0, or cannot be bound)."""
    if port == 0:
        yield None
        return
    try:
        server = MetricsServer(registry, host, port)
    except OSError as exc:
        logger.error(
            "metrics endpoint not started: cannot listen on %s:%d (%s); set CRAWLSTREAM_METRICS_PORT "
            "to a free port (0: none)",
            host,
            port,
            exc,
        )
        yield None
        return
    logger.info("metrics: %s", server.url)
    try:
        yield server
    finally:
        server.stop()
