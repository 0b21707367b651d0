"""A real Confluent-compatible Schema Registry on loopback, from what ``make schema-registry`` fetched.

The server is Apicurio Registry (Quarkus, in-memory H2 storage): its "ccompat" API at
``/apis/ccompat/v7`` is Confluent's REST API v1, so ``RegistrySchemaIds(registry.url)``
talks to it exactly as to Confluent's. Confluent's own registry is not on Maven Central
(docs/decisions/013-schema-registry.md).

Ownership, as ``crawlstream.devtools.localkafka``: the JVM is started by this process on free
127.0.0.1 ports, stopped by PID (SIGTERM, then SIGKILL after a bound), and dies with this
process even on SIGKILL (``PR_SET_PDEATHSIG``). Its state lives in memory: a stop forgets
every schema.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from crawlstream.devtools.localproc import PortReservation, die_with_parent, find_cached, stop_processes
from crawlstream.errors import BusUnavailable, ConfigError

__all__ = ["APICURIO_VERSION", "CCOMPAT_PATH", "LocalSchemaRegistry", "find_registry_java", "find_schema_registry"]

logger = logging.getLogger(__name__)

# What deploy/schema-registry/pom.xml pins; checked against the app jar so a stale cache is noticed.
APICURIO_VERSION: Final = "3.3.3"
CCOMPAT_PATH: Final = "/apis/ccompat/v7"
MIN_JAVA: Final = 21  # Apicurio 3.x is compiled for Java 21 (class file version 65)
_HOME_ENV: Final = "CRAWLSTREAM_SCHEMA_REGISTRY_HOME"
_JAVA_ENV: Final = "CRAWLSTREAM_SCHEMA_REGISTRY_JAVA"
_CACHE_REL: Final = Path(".cache") / "schema-registry" / "app"
_JVM_DIRS: Final = Path("/usr/lib/jvm")
# A test registry holds a few dozen schemas: a small heap, C1 only (start-up is most of its
# CPU time on 2 cores), serial GC (no GC threads beside Kafka's brokers).
_JVM_OPTIONS: Final = (
    "-Xms64m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


def find_schema_registry(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The unpacked Apicurio Registry app (the directory of ``quarkus-run.jar``): ``explicit``,
    ``$CRAWLSTREAM_SCHEMA_REGISTRY_HOME``, or ``.cache/schema-registry/app`` in the working
    directory or the checkout this package runs from."""
    return find_cached(
        explicit, _HOME_ENV, _CACHE_REL, lambda path: (path / "quarkus-run.jar").is_file()
        and (path / "app" / f"apicurio-registry-app-{APICURIO_VERSION}.jar").is_file(),
        f"Apicurio Registry {APICURIO_VERSION} not found: run `make schema-registry` in the checkout "
        "(fetches it with Maven)",
    )



def _java_major(java: Path) -> int | None:
    """The feature version of the JDK/JRE that ``java`` belongs to (``release`` file, else
    ``java -version``), or None if it cannot be told."""
    release = java.resolve().parents[1] / "release"
    text = ""
    try:
        text = release.read_text(encoding="utf-8", errors="replace")
    except OSError:
        try:
            result = subprocess.run([str(java), "-version"], capture_output=True, timeout=30, check=False)
            text = result.stderr.decode(errors="replace")
        except (OSError, subprocess.SubprocessError):
            return None
    match = re.search(r'(?:JAVA_VERSION="|version ")(?:1\.)?(\d+)', text)
    return int(match.group(1)) if match else None


def find_registry_java(explicit: str | os.PathLike[str] | None = None, min_version: int = MIN_JAVA) -> Path:
    """A ``java`` of version ``min_version`` or newer: ``explicit``, ``$CRAWLSTREAM_SCHEMA_REGISTRY_JAVA``,
    ``$JAVA_HOME/bin/java``, ``java`` on PATH, then the JDKs in /usr/lib/jvm (newest first).
    The machines' default Java is 17 (enough for Kafka); a second, newer JDK sits beside it."""
    if explicit or os.environ.get(_JAVA_ENV):
        candidates = [Path(explicit or os.environ[_JAVA_ENV])]
    else:
        candidates = []
        if os.environ.get("JAVA_HOME"):
            candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
        on_path = shutil.which("java")
        if on_path:
            candidates.append(Path(on_path))
        if _JVM_DIRS.is_dir():
            candidates.extend(sorted(_JVM_DIRS.glob("*/bin/java"), reverse=True))
    seen: dict[Path, int | None] = {}
    for java in candidates:
        if not java.is_file() or java.resolve() in seen:
            continue
        version = seen[java.resolve()] = _java_major(java)
        if version is not None and version >= min_version:
            return java
    found = ", ".join(f"{path} ({version or '?'})" for path, version in seen.items()) or "none"
    raise ConfigError(
        f"no Java {min_version}+ found for Apicurio Registry {APICURIO_VERSION} (found: {found}); "
        f"install one (e.g. a Temurin JDK) or set {_JAVA_ENV} to its bin/java"
    )


@dataclass
class LocalSchemaRegistry:
    """``with LocalSchemaRegistry() as registry: RegistrySchemaIds(registry.url)``.

    ``url`` is the Confluent-compatible base URL (what ``SCHEMA_REGISTRY_URL`` takes).
    Compatibility starts as Apicurio's default, NONE; Confluent's default is BACKWARD, which a
    caller sets with ``set_compatibility("BACKWARD")`` (``PUT /config``).
    """

    home: Path | None = None
    java: Path | None = None
    start_timeout_s: float = 90.0
    stop_timeout_s: float = 30.0
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _port: int = field(default=0, init=False)
    _temp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}{CCOMPAT_PATH}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    @property
    def log_file(self) -> Path:
        if self._temp is None:
            raise ConfigError("the schema registry is not started")
        return Path(self._temp.name) / "registry.log"

    def start(self) -> LocalSchemaRegistry:
        """Start the JVM on free loopback ports; return once the ccompat API answers."""
        home = find_schema_registry(self.home)
        java = find_registry_java(self.java)
        self._temp = tempfile.TemporaryDirectory(prefix="crawlstream-schema-registry-")
        work = Path(self._temp.name)
        # held until the JVM listens: its start takes long enough for another server to be given them
        reservations = [PortReservation(), PortReservation()]
        self._port, management_port = (r.port for r in reservations)
        self._log = open(work / "registry.log", "ab")  # noqa: SIM115 (closed in stop())
        started = time.monotonic()
        try:
            self._process = subprocess.Popen(
                [
                    str(java),
                    *_JVM_OPTIONS,
                    f"-Djava.io.tmpdir={work}",
                    "-Dquarkus.http.host=127.0.0.1",
                    f"-Dquarkus.http.port={self._port}",
                    # The management interface (health, metrics) is on at build time: keep it
                    # on loopback too, on a port of its own.
                    "-Dquarkus.management.host=127.0.0.1",
                    f"-Dquarkus.management.port={management_port}",
                    f"-Dapicurio.storage.snapshot.location={work}",
                    f"-Dapicurio.import.work-dir={work}",
                    "-jar",
                    str(home / "quarkus-run.jar"),
                ],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
            logger.info("schema registry: pid %d, %s (java %s)", self._process.pid, self.url, java)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        finally:
            for reservation in reservations:
                reservation.release()
        logger.info("Apicurio Registry %s ready in %.1fs at %s", APICURIO_VERSION, time.monotonic() - started, self.url)
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Until ``GET /subjects`` answers 200 (storage initialized, API up)."""
        limit = timeout_s or self.start_timeout_s
        deadline = time.monotonic() + limit
        while True:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise BusUnavailable(
                    f"the schema registry exited with {code} while starting; its output ends:\n{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise BusUnavailable(
                    f"the schema registry did not answer {self.url}/subjects within {limit:.0f}s; "
                    f"its output ends:\n{self._log_tail()}"
                )
            time.sleep(0.2)

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        """``PUT /config[/subject]``: the compatibility check registrations must pass."""
        path = "/config" if subject is None else f"/config/{urllib.parse.quote(subject, safe='')}"
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps({"compatibility": level}).encode(),
            method="PUT",
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def stop(self) -> None:
        """SIGTERM the JVM, SIGKILL it after the bound; remove the work dir. Safe to call twice."""
        process, self._process = self._process, None
        if process is not None:
            stop_processes([process], self.stop_timeout_s, "schema registry")
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    def __enter__(self) -> LocalSchemaRegistry:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_bytes()[-3000:].decode(errors="replace")
        except (OSError, ConfigError):
            return "(no output)"
