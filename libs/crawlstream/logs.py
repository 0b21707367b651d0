"""Process logging: the one place handlers and the line format are set (STYLE: only the entry point).

``configure_logging`` is called once by each entry point (``crawlstream``'s ``main``; a test may
call it again: each call replaces the handler the previous one installed). Two formats:

- ``text``: ``2025-01-01 12:00:00,000 INFO crawlstream.cli: message`` (the default, for terminals);
- ``json``: one JSON object per line, for log shippers: ``ts`` (UTC, ISO 8601, ms), ``level``,
  ``logger``, ``message``, ``service``, then whichever of ``topic``, ``partition``, ``offset``,
  ``domain``, ``url_key`` the call site passed with ``extra=`` (``log_fields`` builds that dict),
  and ``exc`` with the traceback when there is one.

``service`` is the service the logging thread works for: set per thread by the service loop
(``service_context``; ``crawlstream run`` runs every service on threads of one process), else the
process's (``set_default_service``: ``crawlstream service NAME``), else null.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "CONTEXT_FIELDS",
    "LOG_FORMATS",
    "JsonFormatter",
    "configure_logging",
    "current_service",
    "log_fields",
    "service_context",
    "set_default_service",
]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What a call site may attach with extra= (in this order in a JSON line); nothing else is copied,
# so a record's arbitrary attributes never leak into the output.
CONTEXT_FIELDS = ("topic", "partition", "offset", "domain", "url_key")

_local = threading.local()
_default_service: str | None = None
_installed: logging.Handler | None = None  # the handler the last configure_logging installed
_install_lock = threading.Lock()


def set_default_service(name: str | None) -> None:
    """The service every thread of this process logs for unless ``service_context`` says otherwise."""
    global _default_service
    _default_service = name


def current_service() -> str | None:
    return getattr(_local, "service", None) or _default_service


@contextmanager
def service_context(name: str) -> Iterator[None]:
    """Log lines of this thread name ``name`` as their service until the block ends."""
    previous = getattr(_local, "service", None)
    _local.service = name
    try:
        yield
    finally:
        _local.service = previous


def log_fields(**fields: Any) -> dict[str, Any]:
    """``extra=`` for a log call: the context fields given, None values left out."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise TypeError(f"not a log context field: {sorted(unknown)} (known: {', '.join(CONTEXT_FIELDS)})")
    return {k: v for k, v in fields.items() if v is not None}


class _ServiceFilter(logging.Filter):
    """Stamps ``record.service`` (unless the call site set it) on the thread that logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "service", None) is None:
            record.service = current_service()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in the message are escaped by JSON)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _iso_utc_ms(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "service": getattr(record, "service", None),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _iso_utc_ms(created: float) -> str:
    seconds = int(created)
    ms = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ms:03d}Z"


class _StderrHandler(logging.StreamHandler[Any]):
    """Writes to whatever ``sys.stderr`` is when a record arrives (a test's capture is replaced and
    closed after the test; a handler holding the old stream would then fail)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str, *, fmt: str = "text", file: Path | None = None) -> None:
    """Send this process's log records at ``level`` and above to stderr, or to ``file``.

    ``fmt``: ``text`` or ``json`` (see the module docstring). ``file``: appended to (its directory
    is created), instead of stderr: ``crawlstream run`` keeps the terminal for its progress display.
    Calling it again replaces the handler the previous call installed. Handlers installed by
    anyone else are left alone, and while there are some, stderr is left to them as
    ``logging.basicConfig`` does (an application embedding ``main``, pytest's capture): only a
    ``file`` is then added.
    """
    global _installed
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    with _install_lock:
        if _installed is not None:
            root.removeHandler(_installed)
            _installed.close()
            _installed = None
        if file is None and root.handlers:
            return
        handler: logging.Handler
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(file, encoding="utf-8")
        else:
            handler = _StderrHandler()
        handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
        handler.addFilter(_ServiceFilter())
        root.addHandler(handler)
        _installed = handler
        root.setLevel(getattr(logging, level.upper()))
    logging.captureWarnings(True)  # warnings become records (logger py.warnings): JSON lines stay JSON
