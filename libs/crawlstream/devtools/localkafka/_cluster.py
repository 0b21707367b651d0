"""A real Apache Kafka cluster (KRaft, no ZooKeeper) on loopback, from the jars ``make kafka`` fetched.

Each node is one JVM running ``kafka.Kafka`` in combined mode (broker and controller), so a
3-node cluster has a 3-voter controller quorum that survives the loss of any one node, the
shape the fault tests need. Ports are picked free on 127.0.0.1 at first start and kept in
``<data_dir>/cluster.json`` so a restart of the same data dir finds its brokers where
clients left them; they stay reserved (:class:`PortReservation`) from the pick until ``stop()``,
so neither a slow start nor a killed broker's downtime lets another server take one.

Ownership: every JVM is started by this process and stopped by PID (SIGTERM, then SIGKILL
after a bound). A JVM also dies if this process dies, even by SIGKILL (``PR_SET_PDEATHSIG``),
so a crashed test never leaves brokers behind.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from crawlstream.devtools.localproc import PortReservation, die_with_parent, find_cached, stop_processes
from crawlstream.durable import write_atomically
from crawlstream.errors import BusUnavailable, ConfigError

__all__ = ["KAFKA_VERSION", "LocalKafka", "find_kafka_libs"]

logger = logging.getLogger(__name__)
# librdkafka's "connection refused" lines while a broker is still starting are expected.
_quiet = logging.getLogger(f"{__name__}.probe")
_quiet.setLevel(logging.CRITICAL)

# What deploy/kafka/pom.xml pins; checked against the jar names so a stale cache is noticed.
KAFKA_VERSION: Final = "4.4.0"
_LIBS_ENV: Final = "CRAWLSTREAM_KAFKA_LIBS"
_CACHE_REL: Final = Path(".cache") / "kafka" / "libs"
_MAIN_CLASS: Final = "kafka.Kafka"
_STORAGE_TOOL: Final = "kafka.tools.StorageTool"
# Sized for a laptop and for CI (2 cores, three brokers beside the crawl): the heap a test
# broker needs is small; G1 with a short pause target keeps produce latency even.
_HEAP: Final = "512m"
_JVM_OPTIONS: Final = (
    "-Xms128m",
    f"-Xmx{_HEAP}",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# ``resident_heap``: the whole heap committed and touched at launch, so the broker's RSS is at
# its heap's bound from the start and what grows after is only what is not heap (ADR 034,
# "Session 21"). The last -Xms on a command line wins.
_RESIDENT_HEAP_OPTIONS: Final = (f"-Xms{_HEAP}", "-XX:+AlwaysPreTouch")

_LOG4J2: Final = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def find_kafka_libs(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory of Kafka's jars: ``explicit``, ``$CRAWLSTREAM_KAFKA_LIBS``, or
    ``.cache/kafka/libs`` in the working directory or the checkout this package runs from."""
    return find_cached(
        explicit,
        _LIBS_ENV,
        _CACHE_REL,
        lambda path: (path / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file(),
        f"Apache Kafka {KAFKA_VERSION} jars not found: run `make kafka` in the checkout (fetches them with Maven)",
    )


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ConfigError("`java` not found: Kafka needs Java 17 or newer (install a JDK or set JAVA_HOME)")
    return java


def _port_is_free(port: int) -> bool:
    """Whether a listener could bind ``port`` now. SO_REUSEADDR as the JVM sets it (a reservation
    does): a restarted broker's port still has connections in TIME_WAIT, and our own reservation
    holds it, neither of which stops it listening again."""
    try:
        PortReservation(port).release()
    except OSError:
        return False
    return True


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    stdout: Any = None
    killed: bool = False  # stopped by kill(), not by a failed start

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class LocalKafka:
    """``with LocalKafka(brokers=3) as kafka: KafkaBus(kafka.bootstrap_servers)``.

    ``data_dir`` keeps the cluster (logs, metadata, ports) across runs; without it a temp dir
    is used and removed on ``stop()``. ``partitions`` is the brokers' ``num.partitions``.
    ``broker_config`` overrides or adds ``server.properties`` keys for every node.
    ``resident_heap``: start each JVM with its whole heap committed and touched (-Xms = -Xmx,
    ``AlwaysPreTouch``): RSS ~670 MB a broker from launch instead of ~300 MB that climbs
    towards ~730 MB as the heap fills, so a soak's memory curve shows what is not heap; off
    for the tests, whose clusters are many and short.
    """

    brokers: int = 1
    data_dir: Path | None = None
    partitions: int = 8
    broker_config: Mapping[str, str] = field(default_factory=dict)
    libs: Path | None = None
    start_timeout_s: float = 180.0  # a 3-broker KRaft start on a busy 2-core machine outlasted 90 s (sessions 14-15)
    stop_timeout_s: float = 30.0
    log_level: str = "INFO"
    resident_heap: bool = False
    _nodes: list[_Node] = field(default_factory=list, init=False)
    _temp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)
    _classpath: str = field(default="", init=False)
    _cluster_id: str = field(default="", init=False)
    _reservations: list[PortReservation] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ConfigError(f"--brokers: expected 1 or more, found {self.brokers}")
        if self.partitions < 1:
            raise ConfigError(f"--partitions: expected 1 or more, found {self.partitions}")

    # -- addresses ---------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self._nodes)

    @property
    def node_ids(self) -> list[int]:
        return [node.node_id for node in self._nodes]

    def address_of(self, node_id: int) -> str:
        return self._node(node_id).address

    def pid_of(self, node_id: int) -> int | None:
        node = self._node(node_id)
        return node.process.pid if node.running and node.process is not None else None

    def log_file(self, node_id: int) -> Path:
        return self._node(node_id).directory / "server.log"

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> LocalKafka:
        """Format storage where it is new, start every node, wait until each answers metadata
        naming every broker."""
        self._classpath = str(find_kafka_libs(self.libs) / "*")
        root = self._root()
        self._nodes = self._layout(root)
        try:
            for node in self._nodes:
                self._configure(node)
                self._format(node)
            for node in self._nodes:
                self._launch(node)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        logger.info("Kafka %s: %d broker(s) at %s", KAFKA_VERSION, self.brokers, self.bootstrap_servers)
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Until every running node answers a metadata request that lists every running broker."""
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        pending = [node for node in self._nodes if node.running]
        while pending:
            for node in list(pending):
                if node.killed:  # by a fault injector while we waited (the soak's overlapping faults)
                    pending.remove(node)
                    continue
                self._check_alive(node)
                if self._answers_metadata(node):
                    pending.remove(node)
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"node {n.node_id} ({n.address})" for n in pending)
                raise BusUnavailable(
                    f"Kafka did not become ready within {timeout_s or self.start_timeout_s:.0f}s: {names}; "
                    f"see {pending[0].directory / 'server.log'}"
                )
            if pending:
                time.sleep(0.25)

    def _answers_metadata(self, node: _Node) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        running = {n.node_id for n in self._nodes if n.running}
        config: dict[str, Any] = {"bootstrap.servers": node.address, "socket.timeout.ms": 2000, "logger": _quiet}
        admin = AdminClient(config)
        try:
            metadata = admin.list_topics(timeout=2)
        except KafkaException:
            return False
        return running <= set(metadata.brokers)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one node and wait for it to exit (a crash when SIGKILL)."""
        node = self._node(node_id)
        if not node.running or node.process is None:
            return
        node.killed = True
        stop_processes([node.process], self.stop_timeout_s, f"Kafka node {node_id}", sig)
        logger.info("Kafka node %d stopped (signal %s)", node_id, signal.Signals(sig).name)

    def restart(self, node_id: int) -> None:
        """Start a stopped node again on its storage and ports; wait until it is back."""
        node = self._node(node_id)
        if node.running:
            return
        self._launch(node)
        self.wait_ready()

    def stop(self) -> None:
        """SIGTERM every node at once (a clean shutdown), SIGKILL any still running after the
        bound; remove the temp dir if this object made one. Safe to call twice."""
        stop_processes([n.process for n in self._nodes if n.process is not None], self.stop_timeout_s, "Kafka node")
        for node in self._nodes:
            if node.stdout is not None:
                node.stdout.close()
                node.stdout = None
        for reservation in self._reservations:
            reservation.release()
        self._reservations.clear()
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no Kafka node {node_id} (nodes: {self.node_ids})")

    def _root(self) -> Path:
        if self.data_dir is None:
            self._temp = tempfile.TemporaryDirectory(prefix="crawlstream-kafka-")
            return Path(self._temp.name)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir

    def _layout(self, root: Path) -> list[_Node]:
        """Node ids and ports: those recorded in ``cluster.json`` if still free, else new ones."""
        state_file = root / "cluster.json"
        recorded: dict[str, Any] = json.loads(state_file.read_text()) if state_file.exists() else {}
        if recorded and recorded.get("brokers") != self.brokers:
            raise ConfigError(
                f"{root} holds a {recorded.get('brokers')}-broker cluster; asked for {self.brokers}: "
                "use another --data-dir or the same --brokers"
            )
        nodes = []
        for i, node_id in enumerate(range(1, self.brokers + 1)):
            ports = recorded.get("ports", [])[i] if recorded else None
            held = self._reserve(ports) if ports else None
            held = held or [PortReservation(), PortReservation()]
            self._reservations += held
            nodes.append(_Node(node_id, held[0].port, held[1].port, root / f"node-{node_id}"))
        cluster_id = recorded.get("cluster_id") or self._random_cluster_id()
        ports = [[n.port, n.controller_port] for n in nodes]
        state = {"brokers": self.brokers, "cluster_id": cluster_id, "ports": ports}
        write_atomically(state_file, json.dumps(state).encode())  # a kill mid-write must not leave half of it
        self._cluster_id = cluster_id
        return nodes

    @staticmethod
    def _reserve(ports: list[int]) -> list[PortReservation] | None:
        """Reservations of every one of ``ports``, or None (none kept) if another socket holds one."""
        held: list[PortReservation] = []
        try:
            for port in ports:
                held.append(PortReservation(port))
        except OSError:
            for reservation in held:
                reservation.release()
            return None
        return held

    @staticmethod
    def _random_cluster_id() -> str:
        """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as
        ``kafka-storage random-uuid`` prints), without starting a JVM for it. Like Kafka's own
        ``Uuid.randomUuid`` it never starts with "-": the storage tool would read such an id
        as an option (seen once in 64 formats: "argument --cluster-id: expected one argument")."""
        while True:
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            if not cluster_id.startswith("-"):
                return cluster_id

    def _configure(self, node: _Node) -> None:
        n = self.brokers
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self._nodes)
        internal_replicas = str(min(3, n))
        config = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.directory / "logs"),
            "num.partitions": str(self.partitions),
            # Topics are created explicitly by the services (ADR 011): a typo'd topic name
            # must fail, not appear.
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": internal_replicas,
            "offsets.topic.num.partitions": "16",
            "transaction.state.log.replication.factor": internal_replicas,
            "transaction.state.log.min.isr": str(min(2, n)),
            "share.coordinator.state.topic.replication.factor": internal_replicas,
            "share.coordinator.state.topic.min.isr": str(min(2, n)),
            "default.replication.factor": internal_replicas,
            # A local cluster serves one user: no wait for more members before a group's first
            # assignment, few threads on a laptop's cores.
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "log.segment.bytes": str(64 * 1024 * 1024),
            **self.broker_config,
        }
        node.directory.mkdir(parents=True, exist_ok=True)
        (node.directory / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (node.directory / "log4j2.properties").write_text(
            _LOG4J2.format(log_file=node.directory / "server.log", level=self.log_level)
        )

    def _format(self, node: _Node) -> None:
        if (node.directory / "logs" / "meta.properties").exists():
            return
        result = subprocess.run(
            [
                _java(),
                "-Xmx256m",
                "-cp",
                self._classpath,
                _STORAGE_TOOL,
                "format",
                "--ignore-formatted",
                "-t",
                self._cluster_id,
                "-c",
                str(node.directory / "server.properties"),
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise BusUnavailable(
                f"formatting Kafka storage of node {node.node_id} in {node.directory} failed "
                f"(exit {result.returncode}): {result.stderr.decode(errors='replace')[-2000:]}"
            )

    def jvm_options(self) -> tuple[str, ...]:
        """The options every broker JVM of this cluster is started with (before its own paths)."""
        return _JVM_OPTIONS + (_RESIDENT_HEAP_OPTIONS if self.resident_heap else ())

    def _launch(self, node: _Node) -> None:
        for port in (node.port, node.controller_port):
            if not _port_is_free(port):
                raise BusUnavailable(f"port {port} of Kafka node {node.node_id} is taken by another process")
        if node.stdout is not None:
            node.stdout.close()
        node.killed = False
        node.stdout = open(node.directory / "stdout.log", "ab")  # noqa: SIM115 (closed in stop())
        node.process = subprocess.Popen(
            [
                _java(),
                *self.jvm_options(),
                # a broker once ran out of its heap a minute after start (session 15): keep the evidence
                "-XX:+HeapDumpOnOutOfMemoryError",
                f"-XX:HeapDumpPath={node.directory / 'heap.hprof'}",
                f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node.directory}",
                "-cp",
                self._classpath,
                _MAIN_CLASS,
                str(node.directory / "server.properties"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=node.stdout,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        logger.info("Kafka node %d: pid %d, %s", node.node_id, node.process.pid, node.address)

    def _check_alive(self, node: _Node) -> None:
        if node.process is not None and node.process.poll() is not None:
            tail = (node.directory / "stdout.log").read_bytes()[-2000:].decode(errors="replace")
            raise BusUnavailable(
                f"Kafka node {node.node_id} exited with {node.process.returncode} while starting; "
                f"see {node.directory / 'server.log'}; its output ends:\n{tail}"
            )
