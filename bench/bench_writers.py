"""The writers scaled by the domain checksum (issue 25, ADR 028): the bucket compressor's and the
Parquet sink's events/s with 1 and 2 members on a busy topic, on a real Kafka broker, in one run.

Workload: one ``LocalKafka`` broker (KRaft, loopback) with ``PARTITIONS`` partitions per topic, and
for each service a batch of events built and encoded before anything is timed, by the project's
``EventProducer`` (keyed and partitioned by the domain checksum, as every producer of the crawl;
its ``Producer`` records instead of sending):

* ``fetch.results`` (bucket compressor): ``FetchResult`` events of the 957 real HTML pages of
  ../shared/data/html (128 KB on average), cycled; round r of the cycle moves each page to domains
  of their own (``www.wsj.com`` -> ``www.r<r>c0-wsj.com``, same path; a site's pages beyond
  ``PAGES_PER_DOMAIN`` go to ``c1``, ``c2``...: booksamillion.com's 260 pages do not pin one
  partition), ~610 domains per round; each body gets a unique comment (the store keeps a body
  seen under another URL once, as a reference: a repeated body would cost nothing). The body
  travels as the fetcher sends it: one zstd frame at ``TRANSIT_ZSTD_LEVEL``, with a response
  head, a request head and a peer address;
* ``content.stored`` (Parquet sink): ``ContentStored`` events of the same URLs (title, hash,
  location, status), as the bucket compressor emits them; ``urls.records`` stays empty.

Each run starts ``members`` real ``crawlstream service <name>`` OS processes together on a fresh
data directory, each in a session of its own as separate pods or containers would be (with
``kernel.sched_autogroup_enabled`` Linux shares the CPU between sessions first: members in one
session would share that session's slice of a machine other sessions load, whatever their
number; ``sched_autogroup_enabled`` is recorded), and waits until the broker describes the
consumer group as stable with all of them, together owning every partition of the service's
topics, and caught up (lag 0). Only then
does the bench produce the whole batch, pre-encoded, in one burst (``produce_s``), so the topic is
busy, and it samples the group's committed offsets every ``SAMPLE_S`` until they reach the topic's
end offsets again. Timed window: from the burst flushed (the whole batch on the topic) to lag 0;
``events_per_s`` = events committed in the window / its length (what the members committed during
the burst is subtracted). So process start-up, imports and the group join (with 2 members the
first member would otherwise consume alone until the second joins and the cooperative rebalance
completes) and the broker taking in the burst are outside the window, for 1 and 2 members alike,
and both consume the very same events. ``events_per_s_middle`` is the rate between 10 % and 90 %
of the batch (the tail, where the member with the last busy partitions works alone, left out);
``events_per_s_incl_burst`` counts from the burst's start. Runs go 1, 2, 2, 1 members
(``--quick``: 1, 2) on the same group (each run consumes a new batch), so a load that drifts
during the run weighs on both alike; ``members_1`` and ``members_2`` are the means of their runs,
``least_disturbed`` the run of each with the fewest cores taken by other processes.

CPU is user+sys per process with psutil over the window: each member, the broker JVM and this
bench process (sampling; the burst is before the window: ``produce_cpu_s``,
``broker_cpu_s_during_burst``); ``machine_busy_cores`` is the whole machine's non-idle CPU over the
window (/proc/stat through psutil, other users of the machine included), ``other_processes_cores``
the part of it that none of those used; ``members_runqueue_wait_cores`` the time the members'
threads were runnable but waited for a CPU (schedstat run_delay), per second of window: CPU they
wanted and the machine did not give. ``member_cpu_us_per_event`` staying flat from 1 to 2 members
shows that the service itself scales. ``cpu_ceiling_events_per_s`` is what the run's CPU cost per
event allows on this machine with nobody else on it (each member one Python process, at most one
core; members, broker and bench sharing ``cpus`` cores), and
``balance_bound`` what the broker's split of the partitions allows (total work / the busiest
member's; work = body bytes for the compressor, events for the sink).

Settings of the members: store maintenance off (``store.maintenance_interval_s`` 0: the ingest
path is measured; a maintenance step would land in some runs and not others);
``store.shard_lock_wait_s`` ``SHARD_LOCK_WAIT_S`` (see there); log level WARNING; everything else
is the default but the sink's publishing. The sink commits once a batch's rows are durable in its
staging log, and publishes lake files by rows or age; a publish writes one file per domain prefix
touched (up to 256) whatever its rows, so with a row threshold inside a short run each member
would stop with a different remainder unpublished (2 members: up to two publishes fewer). Here
the thresholds are out of reach (``SINK_FLUSH_ROWS``, ``SINK_FLUSH_INTERVAL_S``): the window
measures consuming and staging, and every staged row is published when the members stop.
``stop_s`` is SIGTERM to every member's exit (outside the window): for the sink it holds that
publish (``lake_files``, ``lake_rows`` counted after), and ``events_per_s_incl_publish`` = batch /
(window + stop_s).

``python -m bench writers [--quick]``
"""

from __future__ import annotations

import csv
import gzip
import itertools
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import confluent_kafka
import psutil
import pyarrow.parquet as pq
import xxhash
import zstandard
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from bench._harness import main, process_cpu_s, shared_data
from crawlstream.bus import KafkaBus, Producer, TopicPartition
from crawlstream.devtools.deployment import ServiceProcess, poll_until
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.events import ContentLocation, ContentStored, Event, EventCodec, EventProducer, FetchResult
from crawlstream.fetch.service import TRANSIT_ZSTD_LEVEL
from crawlstream.lake import service as parquet_sink
from crawlstream.links import extract_title
from crawlstream.settings import load
from crawlstream.store import service as bucket_compressor
from crawlstream.topics import CONTENT_STORED, FETCH_RESULTS, URLS_RECORDS, dlq_topic
from crawlstream.urls import CanonicalUrl, canonicalize, domain_checksum, url_key

PARTITIONS = 16
MEMBERS = (1, 2)
TARGET_RATIO = 1.6  # issue 25: 2 members at least 1.6x one, or the limit named and measured
SAMPLE_S = 0.2  # the poll interval of the waits
START_TIMEOUT_S = 120.0  # members started and the group stable with all of them
# A bucket-compressor member's close counts the whole store for the status page and waits up to
# store.shard_lock_wait_s for each shard another member still holds: with the default 30 s, stopping 2
# members took 31 s. Partitions (and so shards) move only while the group forms, before any event:
# the setting does not touch the window, and a lower one keeps the runs short.
SHARD_LOCK_WAIT_S = 5.0
STOP_TIMEOUT_S = 60.0  # SIGTERM to exit, every member
# The sink publishes its staged rows only when it stops (SIGTERM), in ``stop_s``: a publish writes a file
# per domain prefix touched (up to 256) whatever its rows, so a row threshold within a short run would
# leave each member a different remainder unpublished at lag 0 (see the module docstring).
SINK_FLUSH_ROWS = 1_000_000
SINK_FLUSH_INTERVAL_S = 3600.0
PAGES_PER_DOMAIN = 8  # a site's pages beyond this go to further domains in each round (booksamillion.com has 260)
_INHERITED_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL")
_AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")
# service -> (consumer group, topics it consumes, the topic this bench fills)
SERVICES = {
    "bucket-compressor": (bucket_compressor.GROUP, bucket_compressor.TOPICS, FETCH_RESULTS),
    "parquet-sink": (parquet_sink.GROUP, parquet_sink.TOPICS, CONTENT_STORED),
}
_RESPONSE_HEAD = (
    "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sat, 21 Nov 2026 10:00:00 GMT\r\n"
    "Content-Type: text/html; charset=utf-8\r\nContent-Length: {length}\r\nConnection: keep-alive\r\n"
    "Cache-Control: max-age=600\r\nVary: Accept-Encoding\r\nContent-Encoding: gzip\r\n\r\n"
)
_REQUEST_HEAD = (
    "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: crawlstream/0.1 (+https://example.invalid/crawlstream)\r\n"
    "Accept: text/html,application/xhtml+xml;q=0.9,*/*;q=0.8\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n\r\n"
)


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Page:
    url: str  # canonical
    domain: str  # registered domain
    body: bytes
    title: str | None
    chunk: int  # the page's rank within its site // PAGES_PER_DOMAIN: which of the site's domains it goes to


def load_pages() -> list[Page]:
    """The 957 real pages of shared/data/html (a page without a URL gets one under no-url.example.com)."""
    base = shared_data() / "html"
    pages: list[Page] = []
    seen: set[str] = set()
    per_site: dict[str, int] = {}
    with open(base / "manifest.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            url = canonicalize(row["url"] or f"https://no-url.example.com/{row['file']}").url
            if url in seen:
                url = canonicalize(f"{url}{'&' if '?' in url else '?'}copy={len(pages)}").url
            seen.add(url)
            body = gzip.decompress((base / row["file"]).read_bytes())
            canon = canonicalize(url)
            rank = per_site[canon.domain] = per_site.get(canon.domain, -1) + 1
            pages.append(
                Page(canon.url, canon.domain, body, extract_title(body, "text/html"), rank // PAGES_PER_DOMAIN)
            )
    return pages


def _moved(page: Page, round_: int) -> CanonicalUrl:
    """``page``'s URL on its domain of round ``round_`` (``www.wsj.com`` -> ``www.r<round>c<chunk>-wsj.com``)."""
    label, _, suffix = page.domain.partition(".")
    parts = urlsplit(page.url)
    host = parts.hostname or page.domain
    host = f"{host[: len(host) - len(page.domain)]}r{round_}c{page.chunk}-{label}.{suffix}"
    return canonicalize(urlunsplit((parts.scheme, host, parts.path, parts.query, "")))


def fetch_results(pages: Sequence[Page], count: int) -> Iterable[FetchResult]:
    """``count`` results as the fetcher emits them (see the module docstring)."""
    compressor = zstandard.ZstdCompressor(level=TRANSIT_ZSTD_LEVEL)
    now_ms = int(time.time() * 1000)
    for i in range(count):
        page = pages[i % len(pages)]
        canon = _moved(page, i // len(pages))
        body = page.body + f"\n<!-- crawlstream bench {i} -->\n".encode()
        parts = urlsplit(canon.url)
        yield FetchResult(
            url=canon.url,
            url_key=url_key(canon),
            domain=canon.domain,
            depth=1,
            status=200,
            outcome="ok",
            fetched_at_ms=now_ms + i,
            elapsed_ms=120,
            attempt=0,
            content_type="text/html; charset=utf-8",
            headers={"content-type": "text/html; charset=utf-8", "server": "nginx", "cache-control": "max-age=600"},
            body_zstd=compressor.compress(body),
            body_size_bytes=len(body),
            content_hash=xxhash.xxh3_128_hexdigest(body),
            response_head=_RESPONSE_HEAD.format(length=len(body) // 4).encode(),
            ip_address="203.0.113.7",
            request_head=_REQUEST_HEAD.format(path=parts.path or "/", host=parts.hostname).encode(),
        )


def content_stored(pages: Sequence[Page], count: int) -> Iterable[ContentStored]:
    """``count`` events as the bucket compressor emits them for the same URLs."""
    now_ms = int(time.time() * 1000)
    offset = 0
    for i in range(count):
        page = pages[i % len(pages)]
        canon = _moved(page, i // len(pages))
        stored = len(page.body) // 5
        yield ContentStored(
            url=canon.url,
            url_key=url_key(canon),
            domain=canon.domain,
            content_hash=xxhash.xxh3_128_hexdigest(f"{i}".encode() + page.body[:64]),
            location=ContentLocation("00000001.seg", offset, stored, 0, "hot", domain_checksum(canon.domain)),
            size_bytes=len(page.body),
            stored_bytes=stored,
            status=200,
            fetched_at_ms=now_ms + i,
            content_type="text/html; charset=utf-8",
            title=page.title,
            robots_directives={},
        )
        offset += stored


@dataclass(frozen=True)
class Produced:
    partition: int
    key: bytes | None
    value: bytes


@dataclass
class Batch:
    """Encoded events of one topic, ready to produce; ``work`` per partition (see the module docstring)."""

    topic: str
    messages: list[Produced]
    work: list[int]
    encode_s: float


class _Recorder(Producer):
    """The ``Producer`` under an ``EventProducer`` that keeps what it would send."""

    def __init__(self) -> None:
        self.sent: list[Produced] = []

    def produce(
        self,
        topic: str,
        value: bytes,
        *,
        partition: int,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        timestamp_ms: int | None = None,
    ) -> None:
        self.sent.append(Produced(partition, key, value))

    def flush(self, timeout_s: float = 30.0) -> None:
        pass

    def partition_count(self, topic: str) -> int:
        return PARTITIONS

    def close(self) -> None:
        pass


def encode(codec: EventCodec, topic: str, events: Iterable[Event]) -> Batch:
    """``events`` as ``EventProducer.send`` puts them on ``topic`` (value, key, partition)."""
    started = time.perf_counter()
    recorder = _Recorder()
    out = EventProducer(recorder, codec)
    work = [0] * PARTITIONS
    for event in events:
        out.send(topic, event)
        work[recorder.sent[-1].partition] += event.body_size_bytes if isinstance(event, FetchResult) else 1
    return Batch(topic, recorder.sent, work, time.perf_counter() - started)


def _produce(producer: confluent_kafka.Producer, batch: Batch) -> None:
    """Send ``batch`` and wait for every acknowledgement (a librdkafka producer with the project's
    producer settings, called directly: the burst is over sooner than through ``KafkaProducer``)."""
    failed: list[str] = []

    def delivered(err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for m in batch.messages:
        while True:
            try:
                producer.produce(batch.topic, m.value, m.key, partition=m.partition, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: serve delivery reports
                producer.poll(0.05)
    if producer.flush(120.0) or failed:
        raise RuntimeError(f"burst to {batch.topic}: not delivered ({failed[:3]})")


# --------------------------------------------------------------------------- measurement


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _machine_cpu() -> tuple[float, float]:
    """(busy, iowait) seconds of the whole machine, all cores, since boot."""
    t = psutil.cpu_times()
    iowait = getattr(t, "iowait", 0.0)
    return sum(t) - t.idle - iowait, iowait


def _run_delay_s(pid: int) -> float:
    """Seconds the threads of ``pid`` spent runnable but waiting for a CPU (schedstat's run_delay)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that just ended
            continue
    return total / 1e9


@dataclass
class Sample:
    t: float
    committed: int
    members_cpu: list[float]
    members_wait: float  # run_delay of every member thread
    broker_wait: float
    broker_cpu: float
    self_cpu: float
    machine: tuple[float, float]


class GroupProbe:
    """The broker's view of one consumer group: its state and members (admin client), and its
    committed offsets (read by a consumer of the group that never joins it, as ``LagProbe`` does:
    librdkafka 2.16's admin ListConsumerGroupOffsets crashed this process when the coordinator
    answered with an error)."""

    def __init__(self, bus: KafkaBus, group: str, topics: Sequence[str], input_topic: str) -> None:
        self._admin = AdminClient({"bootstrap.servers": bus.bootstrap_servers})
        self._reader = bus.consumer(group)
        self._bus = bus
        self._group = group
        self._everything = {(t, p) for t in topics for p in range(PARTITIONS)}
        self._input_topic = input_topic
        self._input = [TopicPartition(input_topic, p) for p in range(PARTITIONS)]
        self.assignment: list[list[int]] = []  # the input topic's partitions of each member, once stable

    def stable_with(self, members: int) -> bool:
        """The group stable with ``members`` members owning every partition, and caught up."""
        try:
            description = self._admin.describe_consumer_groups([self._group], request_timeout=5)[self._group].result()
        except KafkaException:
            return False
        owned = [(tp.topic, tp.partition) for m in description.members for tp in m.assignment.topic_partitions]
        if (
            description.state != ConsumerGroupState.STABLE
            or len(description.members) != members
            or len(owned) != len(set(owned))
            or set(owned) != self._everything
            or self.committed() < self.end()
        ):
            return False
        self.assignment = [
            sorted(tp.partition for tp in m.assignment.topic_partitions if tp.topic == self._input_topic)
            for m in description.members
        ]
        return True

    def committed(self) -> int:
        return sum(offset or 0 for offset in self._reader.committed(self._input).values())

    def end(self) -> int:
        return sum(self._bus.end_offsets(self._input_topic))

    def close(self) -> None:
        self._reader.close()


def _time_at(samples: Sequence[Sample], committed: float) -> float:
    """When the committed count reached ``committed`` (linear between two samples)."""
    for a, b in itertools.pairwise(samples):
        if b.committed >= committed:
            if b.committed == a.committed:
                return b.t
            return a.t + (b.t - a.t) * (committed - a.committed) / (b.committed - a.committed)
    return samples[-1].t


def _window(
    samples: Sequence[Sample], burst: int, members: int, work: Sequence[int], assignment: Sequence[Sequence[int]]
) -> dict[str, Any]:
    """Rates and CPU from ``samples[burst]`` (the burst flushed: the whole batch on the topic) to the
    last sample (lag 0); ``samples[0]`` is the burst's start."""
    first, start, end = samples[0], samples[burst], samples[-1]
    wall = end.t - start.t
    events = end.committed - start.committed
    batch = end.committed - first.committed
    members_cpu = [round(b - a, 2) for a, b in zip(start.members_cpu, end.members_cpu, strict=True)]
    broker_cpu = end.broker_cpu - start.broker_cpu
    self_cpu = end.self_cpu - start.self_cpu
    busy = end.machine[0] - start.machine[0]
    iowait = end.machine[1] - start.machine[1]
    low, high = first.committed + 0.1 * batch, first.committed + 0.9 * batch
    middle_s = _time_at(samples, high) - _time_at(samples, low)
    ours = sum(members_cpu) + broker_cpu + self_cpu
    member_work = [sum(work[p] for p in partitions) for partitions in assignment]

    def per_event_us(cpu: float) -> float | None:
        return round(1e6 * cpu / events, 1) if events else None

    def cores(cpu: float) -> float | None:
        return round(cpu / wall, 2) if wall > 0 else None

    return {
        "members": members,
        "input_partitions_per_member": [list(a) for a in assignment],
        "work_share_per_member": [round(w / sum(work), 3) for w in member_work],
        "balance_bound": round(sum(work) / max(member_work), 3),
        "events": batch,
        "events_committed_during_burst": start.committed - first.committed,
        "events_in_window": events,
        "window_s": round(wall, 2),
        "events_per_s": round(events / wall, 1) if wall > 0 else None,
        "events_per_s_middle": round(0.8 * batch / middle_s, 1) if middle_s > 0 else None,
        "events_per_s_incl_burst": round(batch / (end.t - first.t), 1),
        "members_cpu_s": members_cpu,
        "member_cpu_us_per_event": per_event_us(sum(members_cpu)),
        "member_cores_busy": [cores(c) for c in members_cpu],
        "broker_cpu_s": round(broker_cpu, 2),
        "broker_cpu_us_per_event": per_event_us(broker_cpu),
        "bench_cpu_s": round(self_cpu, 2),
        "cores_busy_members_broker_bench": cores(ours),
        # runnable, waiting for a CPU: the CPU a busy machine did not give them (Linux schedstat)
        "members_runqueue_wait_cores": cores(end.members_wait - start.members_wait),
        "broker_runqueue_wait_cores": cores(end.broker_wait - start.broker_wait),
        "machine_busy_cores": cores(busy),
        "machine_iowait_cores": cores(iowait),
        "other_processes_cores": cores(busy - ours),
    }


def _stop(processes: Sequence[ServiceProcess]) -> dict[str, int]:
    """SIGTERM every member at once, wait ``STOP_TIMEOUT_S`` for each to exit, SIGKILL the rest."""
    for p in processes:
        p.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    exits = {}
    for p in processes:
        try:
            exits[p.log.stem] = p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.process.kill()
            exits[p.log.stem] = p.process.wait(timeout=10)
    return exits


def start_members(service: str, members: int, env: Mapping[str, str], log_dir: Path) -> list[ServiceProcess]:
    """``members`` processes of ``crawlstream service <service>``, each in a session of its own."""
    started = []
    for i in range(members):
        started.append(ServiceProcess.start(service, env, log_dir / f"{service}-{i}.log", new_session=True))
    return started


def _outputs(service: str) -> list[str]:
    """Topics whose growth a run reports: the input's dead letters, the compressor's events out."""
    _, _, input_topic = SERVICES[service]
    return [dlq_topic(input_topic)] + ([CONTENT_STORED] if service == "bucket-compressor" else [])


def measure(
    kafka: LocalKafka, env: Mapping[str, str], service: str, members: int, batch: Batch, timeout_s: float
) -> dict[str, Any]:
    """Start ``members`` processes of ``service`` together; once the group is stable and caught up,
    produce ``batch`` and sample until the group's lag is 0 again."""
    group, topics, input_topic = SERVICES[service]
    bus = KafkaBus.from_settings(load(dict(env)))
    probe = GroupProbe(bus, group, topics, input_topic)
    producer = confluent_kafka.Producer(bus.producer_config())
    producer.list_topics(input_topic, timeout=10)  # connected, metadata known: not in the window
    [node] = kafka.node_ids
    broker_pid = kafka.pid_of(node)
    assert broker_pid is not None
    broker = psutil.Process(broker_pid)
    log_dir = Path(env["CRAWLSTREAM_DATA_DIR"]) / "logs"
    log_dir.mkdir(parents=True)
    started = time.perf_counter()
    processes = start_members(service, members, env, log_dir)
    members_ps = [psutil.Process(p.pid) for p in processes]
    samples: list[Sample] = []

    def sample(committed: int | None = None) -> Sample:
        s = Sample(
            t=time.perf_counter(),
            committed=probe.committed() if committed is None else committed,
            members_cpu=[process_cpu_s(m) for m in members_ps],
            members_wait=sum(_run_delay_s(p.process.pid) for p in processes),
            broker_wait=_run_delay_s(broker.pid),
            broker_cpu=process_cpu_s(broker),
            self_cpu=_self_cpu_s(),
            machine=_machine_cpu(),
        )
        samples.append(s)
        return s

    try:
        try:
            stable = poll_until(
                lambda: probe.stable_with(members), f"{service} x{members} stable", START_TIMEOUT_S, processes,
                SAMPLE_S,
            )
            if not stable:
                raise RuntimeError(f"{service}: group not stable with {members} members after {START_TIMEOUT_S}s")
            startup_s = time.perf_counter() - started
            base = probe.committed()
            target = base + len(batch.messages)
            outputs = {t: sum(bus.end_offsets(t)) for t in _outputs(service)}
            first = sample(base)
            _produce(producer, batch)
            flushed = sample()
            produce_s = flushed.t - first.t
            done = poll_until(
                lambda: sample().committed >= target, f"{service} x{members} drained", timeout_s, processes,
                SAMPLE_S,
            )
        finally:
            stopping = time.perf_counter()
            exits = _stop(processes)
            stop_s = time.perf_counter() - stopping
        result = _window(samples, 1, members, batch.work, probe.assignment)
        # every event handled, none dead-lettered (a misrouted or undecodable one would be, lag 0 all the same)
        result["dead_letters"] = sum(bus.end_offsets(dlq_topic(input_topic))) - outputs[dlq_topic(input_topic)]
        if service == "bucket-compressor":
            result["content_stored_events_out"] = sum(bus.end_offsets(CONTENT_STORED)) - outputs[CONTENT_STORED]
    finally:
        producer.flush(10)
        probe.close()
        bus.close()
    data_dir = Path(env["CRAWLSTREAM_DATA_DIR"])
    lake = [p for p in data_dir.rglob("*.parquet") if "staging" not in p.parts]
    if service == "parquet-sink":
        result["lake_files"] = len(lake)
        result["lake_rows"] = sum(pq.read_metadata(p).num_rows for p in lake)
        result["events_per_s_incl_publish"] = round(result["events"] / (result["window_s"] + stop_s), 1)
    return result | {
        "drained": done,
        "startup_to_stable_s": round(startup_s, 2),
        "produce_s": round(produce_s, 2),
        "produce_cpu_s": round(flushed.self_cpu - first.self_cpu, 2),
        "broker_cpu_s_during_burst": round(flushed.broker_cpu - first.broker_cpu, 2),
        "stop_s": round(stop_s, 2),
        # SIGTERM'd members exit 0 once they committed, left the group and closed their store / staging
        "exits_not_0": {name: code for name, code in exits.items() if code != 0},
        "log_tails": {p.log.stem: p.tail(800) for p in processes if p.log.stat().st_size},
    }


# --------------------------------------------------------------------------- run


def _env(root: Path, bootstrap_servers: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_VARS}
    env.update(
        {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
            "CRAWLSTREAM_DATA_DIR": str(root),
            "CRAWLSTREAM_BUS_PARTITIONS": str(PARTITIONS),
            "CRAWLSTREAM_LOG_LEVEL": "WARNING",
            "CRAWLSTREAM_METRICS_PORT": "0",
            "CRAWLSTREAM_STORE_MAINTENANCE_INTERVAL_S": "0",
            "CRAWLSTREAM_STORE_SHARD_LOCK_WAIT_S": str(SHARD_LOCK_WAIT_S),
            "CRAWLSTREAM_LAKE_SINK_FLUSH_ROWS": str(SINK_FLUSH_ROWS),
            "CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S": str(SINK_FLUSH_INTERVAL_S),
        }
    )
    return env


def _cpu_ceiling(run: Mapping[str, Any]) -> float | None:
    """The events/s this run's CPU cost per event allows on this machine with nobody else on it: each
    member is one Python process (one core at most for its loop), and the members, the broker and
    the bench share ``cpus`` cores."""
    events = run["events_in_window"]
    if not events or not run["member_cpu_us_per_event"]:
        return None
    member_s = sum(run["members_cpu_s"]) / events
    all_s = member_s + (run["broker_cpu_s"] + run["bench_cpu_s"]) / events
    return round(min(run["members"] / member_s, (os.cpu_count() or 1) / all_s), 1)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


_AVERAGED = (
    "events_per_s",
    "events_per_s_middle",
    "events_per_s_incl_burst",
    "events_per_s_incl_publish",
    "member_cpu_us_per_event",
    "broker_cpu_us_per_event",
    "cores_busy_members_broker_bench",
    "machine_busy_cores",
    "other_processes_cores",
    "members_runqueue_wait_cores",
    "balance_bound",
    "cpu_ceiling_events_per_s",
)


def _mean(runs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(sum(values) / len(values), 3 if key == "balance_bound" else 1) if values else None


def _service(
    kafka: LocalKafka, root: Path, service: str, batch: Batch, order: Sequence[int], timeout_s: float
) -> dict[str, Any]:
    """Run ``order`` (member counts, one run each, each on a fresh data directory) on ``batch``."""
    runs: list[dict[str, Any]] = []
    for n, members in enumerate(order):
        env = _env(root / f"{service}-{n}-x{members}", kafka.bootstrap_servers)
        run_ = measure(kafka, env, service, members, batch, timeout_s)
        run_["cpu_ceiling_events_per_s"] = _cpu_ceiling(run_)
        run_["loadavg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
        runs.append(run_)
    by_members = {m: [r for r in runs if r["members"] == m] for m in MEMBERS}
    summary = {m: {key: _mean(rs, key) for key in _AVERAGED} | {"runs": len(rs)} for m, rs in by_members.items()}
    one, two = summary[1], summary[2]
    ratio = _ratio(two["events_per_s"], one["events_per_s"])
    # the run of each member count that other processes on the machine disturbed least
    calm = {m: min(rs, key=lambda r: r["other_processes_cores"] or 0.0) for m, rs in by_members.items()}
    return {
        "batch": {
            "topic": batch.topic,
            "events": len(batch.messages),
            "MB_encoded": round(sum(len(m.value) for m in batch.messages) / 1e6, 1),
            "events_per_partition_min_max": [
                min(sum(1 for m in batch.messages if m.partition == p) for p in range(PARTITIONS)),
                max(sum(1 for m in batch.messages if m.partition == p) for p in range(PARTITIONS)),
            ],
            "encode_s": round(batch.encode_s, 1),
        },
        "order": list(order),
        "members_1": one,
        "members_2": two,
        "ratio_2_over_1": {
            "events_per_s": ratio,
            "events_per_s_middle": _ratio(two["events_per_s_middle"], one["events_per_s_middle"]),
            "events_per_s_incl_burst": _ratio(two["events_per_s_incl_burst"], one["events_per_s_incl_burst"]),
            "events_per_s_incl_publish": _ratio(two["events_per_s_incl_publish"], one["events_per_s_incl_publish"]),
            "member_cpu_us_per_event": _ratio(two["member_cpu_us_per_event"], one["member_cpu_us_per_event"]),
        },
        "least_disturbed": {
            "events_per_s_1_2": [calm[1]["events_per_s"], calm[2]["events_per_s"]],
            "other_processes_cores_1_2": [calm[1]["other_processes_cores"], calm[2]["other_processes_cores"]],
            "ratio": _ratio(calm[2]["events_per_s"], calm[1]["events_per_s"]),
        },
        "limit": {
            "target_ratio": TARGET_RATIO,
            "met": bool(ratio and ratio >= TARGET_RATIO),
            # every core of the machine busy while 2 members ran (whoever used them)
            "machine_saturated_with_2_members": bool(
                two["machine_busy_cores"] and two["machine_busy_cores"] >= 0.9 * (os.cpu_count() or 1)
            ),
            "cores_used_by_other_processes_with_2_members": two["other_processes_cores"],
            "members_runqueue_wait_cores_1_2": [one["members_runqueue_wait_cores"], two["members_runqueue_wait_cores"]],
            "cpu_ceiling_ratio": _ratio(two["cpu_ceiling_events_per_s"], one["cpu_ceiling_events_per_s"]),
            "balance_bound_2_members": two["balance_bound"],
        },
        "runs": runs,
    }


def run(quick: bool) -> dict[str, Any]:
    # 1, 2, 2, 1: a load that drifts during the run weighs on both member counts alike
    order = (1, 2) if quick else (1, 2, 2, 1)
    fetch_count, stored_count = (1_200, 30_000) if quick else (16_000, 200_000)
    timeout_s = 120.0 if quick else 240.0
    pages = load_pages()
    results: dict[str, Any] = {
        "workload": {
            "partitions": PARTITIONS,
            "pages": len(pages),
            "page_bytes_mean": round(sum(len(p.body) for p in pages) / len(pages)),
            "fetch_results": fetch_count,
            "content_stored": stored_count,
            "sink_publishes": "at stop only (in stop_s)",
            "cpus": os.cpu_count(),
            "sched_autogroup_enabled": _AUTOGROUP.read_text().strip() if _AUTOGROUP.exists() else None,
            "loadavg_1_5_15_before": [round(x, 2) for x in os.getloadavg()],
            "window": "members started and the group stable with all of them and caught up, then the batch "
            "produced in one burst; window = burst flushed (the whole batch on the topic) to lag 0 (committed = "
            f"end offsets), sampled every {SAMPLE_S} s; _middle: 10%..90% of the batch; _incl_burst: from the "
            "burst's start; members_1/members_2: means over the runs",
        }
    }
    with tempfile.TemporaryDirectory(prefix="bench-writers-") as tmp, LocalKafka(partitions=PARTITIONS) as kafka:
        root = Path(tmp)
        settings = load(_env(root / "encode", kafka.bootstrap_servers))
        codec = EventCodec.from_settings(settings)
        bus = KafkaBus.from_settings(settings)
        try:
            topics = [FETCH_RESULTS, CONTENT_STORED, URLS_RECORDS]
            bus.create_topics(topics + [dlq_topic(t) for t in topics], PARTITIONS)
        finally:
            bus.close()
        sink_batch = encode(codec, CONTENT_STORED, content_stored(pages, stored_count))
        results["parquet-sink"] = _service(kafka, root, "parquet-sink", sink_batch, order, timeout_s)
        del sink_batch
        compressor_batch = encode(codec, FETCH_RESULTS, fetch_results(pages, fetch_count))
        results["bucket-compressor"] = _service(kafka, root, "bucket-compressor", compressor_batch, order, timeout_s)
    results["loadavg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    return results


if __name__ == "__main__":
    main(run)
