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

__all__ = ["die_with_parent", "find_cached", "free_port", "stop_processes"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
