"""Local server processes this process starts (Kafka, the schema registry, PostgreSQL, test
servers): a free loopback port, a child that dies with its parent, and a bounded stop.

Only processes we started are stopped, and only by their own handle or PID.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crawlstream.errors import ConfigError

__all__ = ["PortReservation", "die_with_parent", "find_cached", "free_port", "stop_processes"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PortReservation:
    """A loopback port kept from everyone else until :meth:`release`, for a server that binds it later.

    :func:`free_port` lets go of its port at once, so the kernel may hand it to the next bind to
    port 0 anywhere on the machine before our server listens. A 3-broker Kafka cluster takes
    30-60 s from picking its ports to listening, and once a parallel test's server got one of
    them in that window: every broker's Raft client read that server's reply as a Kafka response
    size and died out of heap (ADR 034). Held as a bound, non-listening ``SO_REUSEADDR`` socket,
    the port is skipped by every bind to port 0 and every outgoing connection, while a server that
    sets ``SO_REUSEADDR`` (the JVM, Redis, uvicorn and ``http.server`` do) binds and listens on it.
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Reserve ``port`` (``OSError`` if another socket holds it), or a free one when 0."""
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
        except OSError:
            self._sock.close()
            raise
        self.port = int(self._sock.getsockname()[1])

    def release(self) -> None:
        """Let others have the port again (its server, if running, keeps listening). Idempotent."""
        self._sock.close()

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def die_with_parent() -> None:
    """``preexec_fn`` of a child server: the kernel sends it SIGKILL when its parent dies, so a
    killed test run leaves no JVM behind (Linux; a no-op where prctl is missing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def stop_processes(
    processes: Sequence[subprocess.Popen[Any]], timeout_s: float, what: str, sig: int = signal.SIGTERM
) -> None:
    """Send ``sig`` to every still-running process at once (they shut down in parallel), wait up
    to ``timeout_s`` in all, then SIGKILL whichever is left. ``what`` names them in the warning."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        process.send_signal(sig)
    deadline = time.monotonic() + timeout_s
    for process in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            name = signal.Signals(sig).name
            logger.warning("%s (pid %d) ignored %s for %.0fs; killing it", what, process.pid, name, timeout_s)
            process.kill()
            process.wait(timeout=10)


def find_cached(
    explicit: str | os.PathLike[str] | None,
    env_var: str,
    cache_rel: Path,
    complete: Callable[[Path], bool],
    missing: str,
) -> Path:
    """A tool a Makefile target put in the git-ignored ``.cache``: ``explicit``, ``$env_var``, or
    ``cache_rel`` under the working directory or the checkout this package runs from; the first
    that is ``complete``. ``ConfigError`` otherwise: ``missing`` (what, and the make target), the
    places looked in and the variable."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get(env_var):
        candidates.append(Path(os.environ[env_var]))
    else:
        candidates.append(Path.cwd() / cache_rel)
        candidates.extend(parent / cache_rel for parent in Path(__file__).resolve().parents)
    for path in candidates:
        if complete(path):
            return path
    raise ConfigError(f"{missing} (looked in {', '.join(map(str, candidates[:2]))}); or set {env_var}")
