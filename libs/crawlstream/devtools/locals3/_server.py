"""A real S3 server on 127.0.0.1: versitygw (Apache-2.0) with its posix backend, objects kept as
plain files under ``<dir>/objects/<bucket>/``.

Built by ``make s3`` (``go install``) into the git-ignored ``.cache/versitygw/<version>/``;
nothing is downloaded here. The server binds 127.0.0.1 explicitly (its default is every
interface), answers requests with fresh random root credentials, and is stopped by its own
process handle (SIGTERM, then SIGKILL after a bound). ``stop``/``start`` keep the data
directory, so a test can take the server away for a while and bring it back on the same port.
Request logging (``access_log``) writes one line per request, which the benchmark counts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from crawlstream.devtools.localproc import PortReservation, die_with_parent, find_cached, stop_processes
from crawlstream.errors import StorageUnavailable

__all__ = ["VERSITYGW_VERSION", "LocalS3", "find_versitygw"]

logger = logging.getLogger(__name__)

VERSITYGW_VERSION: Final = "v1.8.0"  # what the Makefile's `s3` target builds
_BIN_ENV: Final = "CRAWLSTREAM_VERSITYGW"
_CACHE_REL: Final = Path(".cache") / "versitygw" / VERSITYGW_VERSION / "versitygw"
REGION: Final = "us-east-1"


def find_versitygw(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The versitygw binary: ``explicit``, ``$CRAWLSTREAM_VERSITYGW``, or ``.cache/versitygw/...``
    in the working directory or the checkout this package runs from."""
    return find_cached(
        explicit, _BIN_ENV, _CACHE_REL, lambda path: path.is_file() and os.access(path, os.X_OK),
        f"versitygw {VERSITYGW_VERSION} not found: run `make s3` in the checkout (builds it with `go install`)",
    )



class LocalS3:
    """``with LocalS3(buckets=("crawlstream",)) as s3: s3.env`` — one versitygw process."""

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        buckets: tuple[str, ...] = ("crawlstream",),
        binary: Path | None = None,
        access_log: bool = False,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.binary = binary if binary is not None else find_versitygw()
        self._given_dir = data_dir
        self.buckets = buckets
        self.access_log = access_log
        self.start_timeout_s = start_timeout_s
        self.root: Path | None = None
        self.port = 0
        self.access_key = "crawlstream"
        self.secret_key = secrets.token_hex(16)
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        # held from the first start until a stop that lets the data go, so the port an outage
        # test restarts on is still ours (ADR 034: PortReservation)
        self._reservation: PortReservation | None = None

    # -- facts ---------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        if not self.port:
            raise RuntimeError("LocalS3 is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def objects_dir(self) -> Path:
        assert self.root is not None, "LocalS3 is not started"
        return self.root / "objects"

    @property
    def log_file(self) -> Path:
        assert self.root is not None, "LocalS3 is not started"
        return self.root / "versitygw.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    @property
    def env(self) -> dict[str, str]:
        """What every crawlstream command reads to reach this server (``CRAWLSTREAM_S3_*``, ``AWS_*``)."""
        return {
            "CRAWLSTREAM_S3_ENDPOINT": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def path_of(self, bucket: str, key: str) -> Path:
        """The file versitygw keeps object ``key`` of ``bucket`` in (for fault injection)."""
        return self.objects_dir / bucket / key

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> LocalS3:
        if self.root is None:
            self.root = self._given_dir if self._given_dir is not None else Path(
                tempfile.mkdtemp(prefix="crawlstream-s3-"))
            self.objects_dir.mkdir(parents=True, exist_ok=True)
            for bucket in self.buckets:  # a directory at the top of the posix backend is a bucket
                (self.objects_dir / bucket).mkdir(exist_ok=True)
        if self._reservation is None:
            self._reservation = PortReservation(self.port)
            self.port = self._reservation.port
        self._spawn()
        return self

    def _spawn(self) -> None:
        args = [str(self.binary), "--port", f"127.0.0.1:{self.port}", "--region", REGION]
        if not self.access_log:
            args.append("--quiet")
        args += ["posix", str(self.objects_dir)]
        env = {**os.environ, "ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_SECRET_ACCESS_KEY": self.secret_key}
        self._log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while not _listening(self.port):
            if self._process.poll() is not None:
                tail = self.log_file.read_bytes()[-2000:].decode(errors="replace")
                self._process = None
                raise StorageUnavailable(f"versitygw exited at start-up; its log:\n{tail}")
            if time.monotonic() > deadline:
                self.stop(keep_data=True)
                raise StorageUnavailable(f"versitygw did not listen on 127.0.0.1:{self.port} in "
                                         f"{self.start_timeout_s:.0f}s; see {self.log_file}")
            time.sleep(0.02)
        logger.info("versitygw up on %s (pid %d, %s)", self.endpoint, self._process.pid, self.objects_dir)

    def restart(self) -> None:
        """Start the server again on the same port and data (after ``stop(keep_data=True)``)."""
        if self.pid is None:
            self._spawn()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the server (fault injection: SIGKILL, SIGSTOP, SIGCONT)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self._process.wait(timeout=10)

    def stop(self, *, keep_data: bool = False, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``timeout_s``); remove its temp dir unless
        ``keep_data`` or the directory was given."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                if self._process.poll() is None:
                    os.kill(self._process.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            stop_processes([self._process], timeout_s, "versitygw")
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if not keep_data and self._given_dir is None and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            self.port = 0
        if not keep_data and self._reservation is not None:
            self._reservation.release()
            self._reservation = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0
