"""One worker process of ``crawlstream run --processes N`` (started by ``WorkerPool``; see
``crawlstream.crawl._processes``). Not a command: it reads its ``WorkerPayload`` from stdin."""

from __future__ import annotations

import signal
import threading
from types import FrameType

# First of all, before the slow imports: a Ctrl-C or SIGTERM while this worker starts asks it to
# stop once built, instead of a KeyboardInterrupt traceback on the terminal.
_STOP = threading.Event()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _STOP.set()


if __name__ == "__main__":  # the worker process only: importing this module changes nothing
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

import logging  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from crawlstream.crawl._processes import WorkerPayload, open_crawl_host  # noqa: E402
from crawlstream.logs import configure_logging, set_default_service  # noqa: E402
from crawlstream.roles import role  # noqa: E402
from crawlstream.runtime import freeze_startup_objects  # noqa: E402

logger = logging.getLogger(__name__)

_PARENT_CHECK_S = 0.2


def main() -> int:
    payload: WorkerPayload = pickle.load(sys.stdin.buffer)
    settings = payload.settings
    configure_logging(settings.log_level, fmt=settings.log_format, file=payload.log_file)
    set_default_service(f"worker-{payload.index}")
    stop = _STOP
    member = (payload.index, payload.count)
    with open_crawl_host(settings, member=member, attach=True, stop_event=stop) as host:
        services: list[tuple[str, Any]] = []
        try:
            for name in payload.services:
                module = role(name).module()
                kwargs: dict[str, Any] = {}
                if name == "fetcher" and payload.resolve_map is not None:
                    kwargs["resolve_map"] = dict(payload.resolve_map)
                services.append((name, module.build(host, **kwargs)))
        except BaseException:
            for _, built in services:
                built.close()
            raise
        freeze_startup_objects()  # built: what start-up made lives to the end (ADR 009)
        failed = _run(services, stop, payload.parent_pid)
    logger.info("worker %d of %d stopped", payload.index, payload.count)
    return 1 if failed else 0


def _run(services: list[tuple[str, Any]], stop: threading.Event, parent_pid: int) -> bool:
    """Run each service on a thread until ``stop`` (or the parent is gone, or one fails)."""
    errors: list[BaseException] = []

    def body(name: str, service: Any) -> None:
        try:
            service.run()
        except BaseException as exc:
            errors.append(exc)
            logger.error("service %s failed: %s", name, exc, exc_info=True)
            stop.set()
        finally:
            try:
                service.close()
            except BaseException as exc:
                errors.append(exc)
                logger.error("service %s failed to close: %s", name, exc, exc_info=True)

    threads = [threading.Thread(target=body, args=(n, s), name=f"crawl-{n}", daemon=True) for n, s in services]
    for t in threads:
        t.start()
    while not stop.wait(_PARENT_CHECK_S):
        if os.getppid() != parent_pid:
            logger.warning("the crawl's parent process is gone: stopping")
            stop.set()
        elif not all(t.is_alive() for t in threads):
            stop.set()
    for _, service in services:
        service.stop()
    for t in threads:
        t.join(60)
    return bool(errors)


if __name__ == "__main__":
    sys.exit(main())
