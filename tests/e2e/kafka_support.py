"""The distributed crawl on a real Apache Kafka cluster, the parts its test files share (issue 11):
the crawl driven to its drain on a deployment (``crawlstream.devtools.deployment``: every service
its own OS process, Kafka, Redis, the demo web), the embedded reference crawl it is judged
against, and the checks.

Once every consumer group has its partitions, ``crawlstream seed`` starts the crawl; the crawl
is over at the drain check ``crawlstream run`` uses (every group's lag 0 and the scheduler's
Redis state idle, several checks in a row); the processes are stopped, the index is built over
the lake the Parquet sink members wrote, and the query API's answers read.

Test files: ``test_kafka_crawl.py`` (one crawl judged against the embedded one, members killed
and added), ``test_kafka_faults.py`` (brokers killed, a cluster outage, a seeded kill -9 of every
service). Two files so the two pytest workers of ``make test`` share them.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient
from e2e_support import (
    api_answers,
    content_answers,
    crawl_env,
    demo_web,
    page_requests,
)
from fastavro import schemaless_writer
from redis import Redis

from crawlstream.bus import KafkaBus, Message, TopicPartition
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord
from crawlstream.devtools.deployment import (
    MEMBERS,
    PARTITIONS,
    Deployment,
    DeploymentError,
    ServiceProcess,
    deploy,
    drained_check,
    groups_assigned,
    process_env,
    wait_until,
    web_inputs,
)
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.events import EventCodec, FetchResult
from crawlstream.index import IndexBuilder
from crawlstream.politeness import Scheduler
from crawlstream.settings import Settings, load
from crawlstream.store import open_store
from crawlstream.topics import (
    FETCH_REQUESTS,
    FETCH_RESULTS,
    URLS_DISCOVERED,
    URLS_FRONTIER,
)
from crawlstream.urls import canonicalize, partition_for, registered_domain_or_host

pytestmark = pytest.mark.kafka

CRAWL_TIMEOUT_S = 300.0  # seeded to drained (under load; an unloaded crawl drains in well under a minute)
START_TIMEOUT_S = 180.0  # processes started, every group assigned (a loaded machine ran out of 90 s)
DEPLOYMENT = MEMBERS
logger = logging.getLogger(__name__)


def wait_for(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float,
    processes: Sequence[ServiceProcess],
    kafka: LocalKafka | None = None,
) -> None:
    """``wait_until``, failing the test (with the processes' logs) instead of raising; with
    ``kafka``, its brokers' last warnings and the offsets open transactions hold come first (CI
    keeps the head of a long failure)."""
    try:
        wait_until(condition, what, timeout_s, processes)
    except DeploymentError as exc:
        pytest.fail((broker_warnings(kafka) + held_offsets(kafka) if kafka is not None else "") + str(exc))


_BROKER_NEWS = re.compile(r"\] (WARN|ERROR) |Initialized transactionalId|[Aa]bort|[Rr]ollback|[Tt]imed out|Fencing")
_BROKER_NOISE = "Auto topic creation failed"  # every client's first metadata request on a fresh cluster


def broker_warnings(kafka: LocalKafka, lines: int = 12, width: int = 240) -> str:
    """Each broker's last warnings and transaction events (server.log), cut to ``width``: what
    the brokers saw (a producer fenced, a transaction aborted) when the services stopped moving."""
    out = []
    for node in kafka.node_ids:
        path = kafka.log_file(node)
        text = path.read_text(errors="replace") if path.exists() else ""
        found = [
            line[:width]
            for line in text.splitlines()  # a logged line starts with its time; a config dump's are indented
            if line.startswith("[") and _BROKER_NEWS.search(line) and _BROKER_NOISE not in line
        ]
        out.append(f"--- broker {node}: last {min(lines, len(found))} of {len(found)} warnings and txn events ---\n")
        out.extend(f"{line}\n" for line in found[-lines:])
    return "".join(out)


def held_offsets(kafka: LocalKafka, timeout_s: float = 10.0) -> str:
    """Each consumer group's partitions whose committed offset an open transaction holds
    (UNSTABLE_OFFSET_COMMIT, the brokers' answer with ``require_stable``). A member reading such
    an offset waits until the transaction ends, and librdkafka reports only "Timed out": the CI
    outage failure's deduper sat there for minutes. Asked here, after the fact, not by the
    services: this admin call aborted a process when a broker restarted under it (librdkafka
    #4605)."""
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout_s)
        groups = sorted(g.group_id for g in listed.valid)
        lines = []
        for group in groups:
            futures = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=timeout_s
            )
            try:
                answer = futures[group].result(timeout_s)
            except KafkaException as exc:  # the whole group held: the broker answers with one error
                lines.append(f"{group}: {exc.args[0].name() if exc.args else exc}\n")
                continue
            held = [tp for tp in answer.topic_partitions if tp.error is not None]
            lines.extend(f"{group}: {tp.topic}[{tp.partition}] {tp.error.name()}\n" for tp in held)
    except Exception as exc:  # a diagnosis: it must not hide the failure it explains
        return f"--- offsets held by open transactions: not read ({type(exc).__name__}: {exc}) ---\n"
    return f"--- offsets held by open transactions: {len(lines)} in {len(groups)} groups ---\n" + "".join(lines)


@contextmanager
def deployment_of(root: Path, web: DemoWeb, *, brokers: int = 1, **extra_env: str) -> Iterator[Deployment]:
    """The test crawl's settings (``crawl_env``) on a deployment under ``root``."""
    with deploy(root, web, crawl_env(root / "data", **extra_env), brokers=brokers) as where:
        yield where


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
class MidCrawl:
    """What a fault test does once the crawl is seeded: ``act(deployment, processes)`` returns
    the processes it ended and the ones it started."""

    act: Callable[[Deployment, list[ServiceProcess]], tuple[list[ServiceProcess], list[ServiceProcess]]]
    ended: list[ServiceProcess] = field(default_factory=list)


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
            wait_for(lambda: groups_assigned(processes), "each group owns its partitions", START_TIMEOUT_S, processes,
                     where.kafka)
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
                wait_for(drained, "the crawl drained", CRAWL_TIMEOUT_S, alive, where.kafka)
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



def make_reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
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
        env = process_env(crawl_vars)
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


def read_topic(bus: KafkaBus, topic: str) -> list[Message]:
    """Every message of ``topic``, through a fresh group from the first offset to the end. Read
    until each partition's position reaches its end, not until as many messages as offsets came:
    a transactional producer's commit markers take offsets no consumer is given (ADR 038)."""
    ends = bus.end_offsets(topic)
    wanted = {TopicPartition(topic, p): end for p, end in enumerate(ends) if end}
    consumer = bus.consumer(f"contract-check-{topic}-{time.monotonic_ns()}")
    got: list[Message] = []
    at: dict[TopicPartition, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.5)
            got.extend(batch)
            for m in batch:  # past each message read; ``positions`` adds the markers skipped
                at[m.topic_partition] = max(at.get(m.topic_partition, 0), m.offset + 1)
            for tp, offset in consumer.positions().items():
                at[tp] = max(at.get(tp, 0), offset)
            if all(at.get(tp, 0) >= end for tp, end in wanted.items()):
                break
    finally:
        consumer.close()
    assert all(at.get(tp, 0) >= end for tp, end in wanted.items()), (topic, len(got), ends, at)
    assert len(got) <= sum(ends) and len({(m.partition, m.offset) for m in got}) == len(got), (topic, len(got), ends)
    return got


def wait_for_pages(where: Deployment, processes: Sequence[ServiceProcess], count: int, what: str) -> None:
    """Until the web has served ``count`` pages (robots.txt aside)."""
    wait_for(lambda: len(page_requests(where.web.requests())) >= count, what, CRAWL_TIMEOUT_S, processes, where.kafka)
