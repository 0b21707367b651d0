"""A throw-away PostgreSQL server on loopback, from the ``initdb``/``pg_ctl`` on this machine.

For tests and benchmarks of ``crawlstream migrate postgres`` (``make test`` installs Debian's
``postgresql`` when ``initdb`` is missing). Everything lives in one temporary directory: the
cluster, its log and its unix socket. The server listens on a free 127.0.0.1 port, trusts
local connections (user ``crawlstream``), and runs without fsync: it holds test data only.

PostgreSQL refuses to run as root; as root the directory is handed to the ``postgres`` user
(Debian's package creates it) and every binary runs as that user. Ownership: the server is
started here and stopped by the PID in its ``postmaster.pid`` (SIGINT, PostgreSQL's fast
shutdown, then SIGKILL after a bound); the directory is removed afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from crawlstream.devtools.localproc import free_port
from crawlstream.errors import ConfigError, StorageUnavailable

__all__ = ["LocalPostgres", "find_pg_bin"]

logger = logging.getLogger(__name__)

SUPERUSER = "crawlstream"
_RUN_AS_WHEN_ROOT = "postgres"
_SETTINGS = (
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "shared_buffers=64MB",
    "max_connections=20",
)


def find_pg_bin() -> Path:
    """The directory of ``initdb`` and ``pg_ctl``: Debian's newest ``/usr/lib/postgresql/*/bin``,
    else wherever ``PATH`` has ``initdb``. ``ConfigError`` naming the fix when there is none."""
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if versions:
        return Path(versions[-1]).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise ConfigError(
        "PostgreSQL's initdb was not found: run `make postgres` (apt-get install postgresql) or put it on PATH"
    )


class LocalPostgres:
    """One PostgreSQL cluster in a temporary directory; ``with LocalPostgres() as pg: pg.dsn``."""

    def __init__(self, *, bin_dir: Path | None = None, start_timeout_s: float = 60.0) -> None:
        self.bin_dir = bin_dir if bin_dir is not None else find_pg_bin()
        self.start_timeout_s = start_timeout_s
        self.root: Path | None = None
        self.port = 0
        self.pid: int | None = None
        self._user: str | None = None

    # -- facts ---------------------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        assert self.root is not None, "LocalPostgres is not started"
        return self.root / "socket"

    @property
    def dsn(self) -> str:
        """A libpq connection string to the ``postgres`` database over TCP loopback."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        if not self.port:
            raise RuntimeError("LocalPostgres is not started")
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname}"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> LocalPostgres:
        self._user = _RUN_AS_WHEN_ROOT if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="crawlstream-pg-"))
        data = self.root / "data"
        self.socket_dir.mkdir()
        if self._user is not None:
            try:
                shutil.chown(self.root, self._user, self._user)
                shutil.chown(self.socket_dir, self._user, self._user)
            except LookupError as exc:
                self._cleanup()
                raise ConfigError(
                    f"running as root, PostgreSQL needs the user {self._user!r} (apt-get install postgresql "
                    "creates it)"
                ) from exc
        self.port = free_port()
        try:
            self._run("initdb", "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
                      "--locale=C", "--no-sync")
            options = " ".join(
                [f"-p {self.port}", "-h 127.0.0.1", f"-k {self.socket_dir}"] + [f"-c {s}" for s in _SETTINGS]
            )
            self._run("pg_ctl", "start", "-w", "-t", str(int(self.start_timeout_s)), "-D", str(data),
                      "-l", str(self.root / "server.log"), "-o", options)
            self.pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        except BaseException:
            self.stop()
            raise
        logger.info("PostgreSQL up on 127.0.0.1:%d (pid %d, %s)", self.port, self.pid, self.root)
        return self

    def _run(self, tool: str, *args: str) -> None:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs["user"] = self._user
        proc = subprocess.run(
            [str(self.bin_dir / tool), *args],
            capture_output=True,
            text=True,
            cwd=self.root,
            check=False,
            **kwargs,
        )
        if proc.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").exists():
                log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise StorageUnavailable(
                f"{tool} failed with exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}\n{log}"
            )

    def stop(self, timeout_s: float = 15.0) -> None:
        """Fast shutdown by PID (SIGINT), SIGKILL after ``timeout_s``; then remove the directory."""
        pid, self.pid = self.pid, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + timeout_s
            while _alive(pid):
                if time.monotonic() > deadline:
                    logger.warning("PostgreSQL pid %d did not stop in %.0f s: killing it", pid, timeout_s)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    break
                time.sleep(0.02)
        self._cleanup()

    def _cleanup(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self.port = 0

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie child of ours counts as gone: it is reaped here)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child (pg_ctl started it): ask the kernel
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
