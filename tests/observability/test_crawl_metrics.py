"""Every service's Prometheus endpoint after real work: a crawl of the synthetic web.

Embedded: ``crawlstream run``'s wiring in this process (``open_host`` serves the registry on
``metrics.port``). Kafka: each service its own ``crawlstream service NAME`` process on the real
broker, each on its own metrics port, logging JSON. Both are scraped over HTTP and parsed as
Prometheus does; the crawl is judged drained from the metrics alone (every lag 0, nothing ready
or in flight), then the numbers are checked against the topics and the web's request log.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from metrics_support import (
    FETCH_FAMILIES,
    INDEX_FAMILIES,
    LOOP_FAMILIES,
    POLITENESS_FAMILIES,
    STORE_FAMILIES,
    Scrape,
    scrape,
    wait_drained,
)

from crawlstream.bus import open_bus
from crawlstream.cli._run import DEFAULT_SERVICES, run_crawl
from crawlstream.devtools.demoweb import DemoWeb, RequestRecord
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.localproc import free_port
from crawlstream.events import EventCodec
from crawlstream.roles import role
from crawlstream.runtime import open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import CONTENT_STORED, FETCH_RESULTS
from crawlstream.urls import registered_domain_or_host
from tests.e2e.e2e_support import crawl_env

ROBOTS_PATHS = ("/robots.txt", "/robots-moved.txt")
_FIXED_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL")
# Outcomes that sent no request to the web: decided before (robots, the guard, the operator).
NOT_REQUESTED = ("robots_disallowed", "blocked_private", "excluded", "dns_error")
CRAWL_TIMEOUT_S = 150.0
GROUPS = {name: role(name).group for name in DEFAULT_SERVICES}


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    """tests/e2e's fast, polite crawl, with lag sampled often and store sizes on every scrape."""
    return crawl_env(
        data_dir,
        CRAWLSTREAM_SCHEDULER_MAX_RETRIES="1",
        CRAWLSTREAM_METRICS_LAG_INTERVAL_S="0.1",
        CRAWLSTREAM_METRICS_STORE_INTERVAL_S="0",
        **extra,
    )


def _web() -> DemoWeb:
    return DemoWeb(
        5,
        pages_per_domain=6,
        seed=11,
        crawl_delay_s=0.1,
        slow_s=2.0,
        huge_bytes=512 * 1024,
        bomb_bytes=4 * 1024 * 1024,
        sitemap_bomb_bytes=4 * 1024 * 1024,
    )


def _page_requests(log: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in log if r.path not in ROBOTS_PATHS]


def _read(settings: Settings, topic: str, expected_at_least: int = 0) -> list[Any]:
    """Every event of ``topic``, read by a fresh group (the crawl is stopped, its bus still up)."""
    codec = EventCodec.from_settings(settings)
    bus = open_bus(settings)
    try:
        consumer = bus.consumer(f"test-reader.{topic}")
        consumer.subscribe([topic])
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 1.0)
            out.extend(codec.decode(m.value) for m in batch)
            if not batch and len(out) >= max(1, expected_at_least):
                break
        consumer.close()
    finally:
        bus.close()
    return out


@dataclass
class Crawl:
    settings: Settings
    scrape: Scrape
    log: list[RequestRecord]
    results: list[Any]
    stored: list[Any]


def _crawl(settings: Settings) -> Crawl:
    """``crawlstream run``'s wiring in this process until the metrics say drained; then stopped."""
    port = settings.metrics.port
    assert port
    failures: list[BaseException] = []
    with _web() as web, open_host(settings) as host:

        def crawl() -> None:
            try:
                run_crawl(host, web.seed_urls(), resolve_map=web.resolve_map, progress_stream=io.StringIO())
            except BaseException as exc:  # reported by the test thread
                failures.append(exc)

        thread = threading.Thread(target=crawl, name="crawl", daemon=True)
        thread.start()
        try:
            final = wait_drained(
                lambda: scrape(f"http://127.0.0.1:{port}/metrics"),
                GROUPS.values(),
                timeout_s=CRAWL_TIMEOUT_S,
                on_timeout=lambda: repr(failures),
            )
        finally:
            host.stop_event.set()
            thread.join(60)
        assert not failures, failures
        log = web.requests()
    results = _read(settings, FETCH_RESULTS, int(final.total("crawlstream_events_produced_total", topic=FETCH_RESULTS)))
    stored = _read(
        settings, CONTENT_STORED, int(final.total("crawlstream_events_produced_total", topic=CONTENT_STORED))
    )
    return Crawl(settings, final, log, results, stored)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    data_dir = tmp_path_factory.mktemp("embedded") / "data"
    return _crawl(load(_env(data_dir, CRAWLSTREAM_METRICS_PORT=str(free_port()))))


@pytest.fixture(scope="module")
def on_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    """A broker of its own: the topics and groups have the deployment's fixed names."""
    root = tmp_path_factory.mktemp("kafka")
    with LocalKafka(brokers=1, partitions=4, data_dir=root / "kafka") as kafka:
        env = _env(
            root / "data",
            CRAWLSTREAM_METRICS_PORT=str(free_port()),
            KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
            CRAWLSTREAM_BUS_KAFKA_EXTRA_CONFIG="consumer.session.timeout.ms=6000,consumer.heartbeat.interval.ms=500",
        )
        yield _crawl(load(env))


@pytest.fixture(params=["embedded", pytest.param("on_kafka", marks=pytest.mark.kafka)])
def crawl(request: pytest.FixtureRequest) -> Crawl:
    """The same crawl, scraped the same way, on each bus."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_the_crawl_exposes_every_family_of_its_services(crawl: Crawl) -> None:
    missing = (LOOP_FAMILIES | FETCH_FAMILIES | POLITENESS_FAMILIES | STORE_FAMILIES) - set(crawl.scrape.types)
    assert not missing
    assert all(name.startswith("crawlstream_") for name in crawl.scrape.types)


def test_fetch_outcomes_count_every_result_and_every_request_the_web_saw(crawl: Crawl) -> None:
    s = crawl.scrape
    by_outcome = s.by("crawlstream_fetch_outcomes_total", "outcome")
    assert by_outcome == {k: float(v) for k, v in Counter(r.outcome for r in crawl.results).items()}
    requested = sum(v for k, v in by_outcome.items() if k not in NOT_REQUESTED)
    assert requested == len(_page_requests(crawl.log))
    assert by_outcome["ok"] > 20 and by_outcome.get("robots_disallowed", 0) > 0
    assert s.total("crawlstream_fetch_duration_seconds_count") == len(crawl.results)
    assert s.total("crawlstream_fetch_duration_seconds_bucket", le="+Inf") == len(crawl.results)
    statuses = s.by("crawlstream_fetch_outcomes_total", "status")
    assert statuses["2xx"] == sum(1 for r in crawl.results if 200 <= r.status < 300)
    assert s.total("crawlstream_fetch_body_bytes_total") == sum(r.body_size_bytes for r in crawl.results)


def test_every_consumed_event_was_produced_and_nothing_was_dead_lettered(crawl: Crawl) -> None:
    """Drained: each service consumed everything its topics received (in = out, per topic)."""
    s = crawl.scrape
    produced = s.by("crawlstream_events_produced_total", "topic")
    assert produced[FETCH_RESULTS] == len(crawl.results)
    assert produced[CONTENT_STORED] == len(crawl.stored)
    consumed = s.select("crawlstream_events_processed_total")
    assert {x.labels["service"] for x in consumed} >= set(GROUPS)
    for sample in consumed:
        assert sample.value == produced.get(sample.labels["topic"], 0.0), sample
    assert s.total("crawlstream_events_dead_lettered_total") == 0


def test_lag_is_zero_on_every_partition_of_every_group_once_drained(crawl: Crawl) -> None:
    lag = crawl.scrape.select("crawlstream_consumer_lag")
    assert {(x.labels["group"], x.labels["partition"]) for x in lag} >= {
        (g, str(p)) for g in GROUPS.values() for p in range(4)
    }
    assert {x.value for x in lag} == {0.0}


def test_politeness_waits_are_observed_once_per_completed_fetch(crawl: Crawl) -> None:
    s = crawl.scrape
    events = s.by("crawlstream_scheduler_events_total", "event")
    waits = s.by("crawlstream_politeness_wait_seconds_count", "reason")
    assert sum(waits.values()) == events["completed"] == len(crawl.results)
    assert waits["crawl_delay"] > 0 and waits["min_delay"] + waits["response_time"] > 0
    assert events["dispatched"] == events["completed"]
    assert s.total("crawlstream_scheduler_domains_ready") == 0


def test_store_sizes_and_ratio_per_tier_describe_the_pages_stored(crawl: Crawl) -> None:
    s = crawl.scrape
    stored = crawl.stored
    assert s.total("crawlstream_store_pages_stored_total") == len(stored) > 20
    assert s.total("crawlstream_store_put_bytes_total", kind="raw") == sum(e.size_bytes for e in stored)
    assert s.total("crawlstream_store_urls") == len({e.url for e in stored})
    tiers = s.by("crawlstream_store_tier_bytes", "tier")
    assert set(tiers) >= {"hot", "warm", "cold", "archive"} and tiers["hot"] > 0
    assert s.total("crawlstream_store_tier_urls", tier="hot") == len({e.url for e in stored})
    assert s.total("crawlstream_store_raw_bytes") == sum(e.size_bytes for e in {e.url: e for e in stored}.values())
    assert s.total("crawlstream_store_ratio") > 1.0
    tier_ratio = s.by("crawlstream_store_tier_ratio", "tier")  # when the store reports raw bytes per tier
    assert not tier_ratio or tier_ratio["hot"] > 1.0


# -- every service its own process, on the real broker ----------------------------------------


@dataclass
class Process:
    name: str
    port: int
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def tail(self) -> str:
        return f"--- {self.name} ---\n" + self.log.read_text(errors="replace")[-3000:]


def _start(name: str, env: dict[str, str], root: Path) -> Process:
    port = free_port()
    log = root / f"{name}.log"
    with log.open("wb") as err:
        popen = subprocess.Popen(
            [sys.executable, "-m", "crawlstream", "service", name],
            env={**env, "CRAWLSTREAM_METRICS_PORT": str(port)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return Process(name, port, log, popen)


def test_each_service_process_serves_its_families_and_logs_json_lines(embedded: Crawl, tmp_path: Path) -> None:
    """``crawlstream service NAME`` over the crawl's data dir: a consumer on the embedded bus (its
    lag per partition, 0: the crawl consumed everything), the index compactor building over the
    crawl's lake, the query API answering; each on its own metrics port, each line of its log JSON."""
    data_dir = embedded.settings.data_dir
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k not in _FIXED_VARS},
        **_env(data_dir),
        "CRAWLSTREAM_INDEX_BUILD_INTERVAL_S": "0.5",
        "CRAWLSTREAM_API_PORT": str(free_port()),
        "CRAWLSTREAM_LOG_FORMAT": "json",
    }
    names = ["deduper", "index-compactor", "query-api"]
    processes = {name: _start(name, env, tmp_path) for name in names}
    try:
        deduper = _scrape_until(processes["deduper"], lambda s: len(s.select("crawlstream_consumer_lag")) == 4)
        index = _scrape_until(processes["index-compactor"], lambda s: s.total("crawlstream_index_version") >= 1)
        api = processes["query-api"]
        domain = registered_domain_or_host(embedded.log[0].host)
        assert _get_when_up(f"http://127.0.0.1:{env['CRAWLSTREAM_API_PORT']}/v1/domain/{domain}", api) == 200
        api_scrape = scrape(api.url)
    finally:
        for process in processes.values():
            process.popen.send_signal(signal.SIGTERM)
        codes = {name: process.popen.wait(60) for name, process in processes.items()}
    assert codes == dict.fromkeys(names, 0), "\n".join(p.tail() for p in processes.values())

    assert set(deduper.types) >= LOOP_FAMILIES
    assert deduper.by("crawlstream_consumer_lag", "partition", group=GROUPS["deduper"]) == {
        str(p): 0.0 for p in range(4)
    }
    assert "process_resident_memory_bytes" in deduper.types  # the process's default collectors too
    assert set(index.types) >= INDEX_FAMILIES
    assert index.total("crawlstream_index_build_duration_seconds_count") >= 1
    assert index.total("crawlstream_index_domains") == len({registered_domain_or_host(r.host) for r in embedded.log})
    routes = api_scrape.by("crawlstream_api_request_duration_seconds_count", "route")
    assert routes.get("/v1/domain/{domain}") == 1, routes

    for name, process in processes.items():  # CRAWLSTREAM_LOG_FORMAT=json: every stderr line is one object
        records = [json.loads(line) for line in process.log.read_text(encoding="utf-8").splitlines()]
        assert records and {r["service"] for r in records} == {name}, process.tail()
        assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
        assert any(r["logger"] == "crawlstream.metrics._server" for r in records)  # "metrics: http://..."


def _get_when_up(url: str, process: Process, timeout_s: float = 60.0) -> int:
    """The status of GET ``url`` once the process listens (its metrics endpoint opens first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.popen.poll() is None, process.tail()
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.URLError as exc:
            if isinstance(exc, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _scrape_until(process: Process, done: Callable[[Scrape], bool], timeout_s: float = 60.0) -> Scrape:
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.popen.poll() is None, process.tail()
        try:
            s = scrape(process.url, timeout_s=5)
            if done(s):
                return s
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{process.name}: not there within {timeout_s:.0f} s\n{process.tail()}")
        time.sleep(0.2)
