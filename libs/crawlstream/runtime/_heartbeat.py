"""A file whose modification time says the service loop is still turning.

What a container's liveness and readiness probes read for services that serve no HTTP:
the loop calls ``beat()`` once per iteration, and the probe checks the file's age
(deploy/k8s: ``sh -c 'test $(( $(date +%s) - $(stat -c %Y FILE) )) -lt MAX_AGE_S'``). A loop
stuck in one batch stops beating and the probe restarts the container; a process waiting
out a broker outage keeps beating (it is healthy and resumes by itself).

Owns the file only: creating it, touching it at most every ``min_interval_s`` (a busy loop
iterates hundreds of times a second; the probe needs seconds), removing it on stop so a
restarted container is not taken for live before its loop runs. No path: does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from crawlstream.errors import ConfigError

__all__ = ["Heartbeat"]

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(
        self,
        path: Path | None,
        *,
        min_interval_s: float = 5.0,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._min_interval_s = min_interval_s
        self._clock_s = clock_s
        self._last_s: float | None = None
        self._warned = False

    def start(self) -> None:
        """Remove a file left by an earlier process and create the parent directory; an
        unwritable location is a startup error that names the variable."""
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"CRAWLSTREAM_HEARTBEAT_FILE={self.path}: expected a writable location, found {exc.strerror}; "
                "point it at a writable volume (deploy/k8s mounts an emptyDir at /tmp) or unset it"
            ) from exc
        self._last_s = None

    def beat(self) -> None:
        """The loop made progress: touch the file unless that was done < ``min_interval_s`` ago."""
        if self.path is None:
            return
        now_s = self._clock_s()
        if self._last_s is not None and now_s - self._last_s < self._min_interval_s:
            return
        self._last_s = now_s
        try:
            self.path.touch()  # creates it, or sets its mtime to now
        except OSError as exc:
            # The probe will notice; the service itself is not harmed, so it goes on.
            if not self._warned:
                self._warned = True
                logger.warning("heartbeat file %s not updated (%s); the liveness probe will fail", self.path, exc)

    def stop(self) -> None:
        """The process is leaving: a stale file must not look live to the next container."""
        if self.path is None:
            return
        self._last_s = None
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("heartbeat file %s not removed: %s", self.path, exc)
