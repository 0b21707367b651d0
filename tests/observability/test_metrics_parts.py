"""The pieces behind each endpoint: ports, the server, one metrics object per registry, the
politeness waits' reasons, the store and index families, the count of events sent."""

from __future__ import annotations

import logging
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from metrics_support import parse, scrape
from prometheus_client import CollectorRegistry, generate_latest

from crawlstream.frontier import FrontierEntry
from crawlstream.metrics import (
    SERVICE_METRICS_PORTS,
    WAIT_REASONS,
    FetchMetrics,
    IndexMetrics,
    MetricsServer,
    PolitenessMetrics,
    StoreMetrics,
    metrics_port,
    per_registry,
    serve_metrics,
    status_class,
    version_number,
)
from crawlstream.politeness import Controls, DomainOverride, FetchOutcome, Scheduler
from crawlstream.roles import SERVICE_NAMES
from crawlstream.runtime import open_host
from crawlstream.settings import load
from crawlstream.store import ContentStore, StoreStats
from crawlstream.store._codec_cache import CodecCache


def test_every_service_has_its_own_default_port_and_run_has_none() -> None:
    assert set(SERVICE_METRICS_PORTS) == set(SERVICE_NAMES)
    assert len(set(SERVICE_METRICS_PORTS.values())) == len(SERVICE_NAMES)
    assert metrics_port(None, "fetcher") == 9403
    assert metrics_port(None, None) == 0, "crawlstream run serves none unless asked"
    assert metrics_port(9500, "fetcher") == 9500
    assert metrics_port(0, "fetcher") == 0


def test_the_port_setting_reads_the_environment() -> None:
    settings = load({"CRAWLSTREAM_METRICS_PORT": "9999", "CRAWLSTREAM_METRICS_HOST": "0.0.0.0"})
    assert (settings.metrics.port, settings.metrics.host) == (9999, "0.0.0.0")
    assert load({}).metrics.port is None


def test_a_port_in_use_is_logged_and_the_process_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR), serve_metrics(CollectorRegistry(), "127.0.0.1", port) as server:
            assert server is None
    assert "CRAWLSTREAM_METRICS_PORT" in caplog.text


def test_the_server_serves_the_registry_until_stopped() -> None:
    registry = CollectorRegistry()
    per_registry(FetchMetrics, registry).observe("ok", 200, 12.0, 1000)
    with serve_metrics(registry, "127.0.0.1", 0) as none:
        assert none is None  # port 0 in the settings: no endpoint
    server = MetricsServer(registry, "127.0.0.1", 0)
    try:
        s = scrape(server.url)
        assert s.total("crawlstream_fetch_outcomes_total", outcome="ok", status="2xx") == 1
        assert s.total("crawlstream_fetch_body_bytes_total") == 1000
    finally:
        server.stop()
    with pytest.raises(OSError):
        scrape(server.url, timeout_s=2)


def test_one_metrics_object_per_registry() -> None:
    registry = CollectorRegistry()
    assert per_registry(StoreMetrics, registry) is per_registry(StoreMetrics, registry)
    assert per_registry(StoreMetrics, CollectorRegistry()) is not per_registry(StoreMetrics, registry)


def test_status_classes_and_version_numbers() -> None:
    assert [status_class(s) for s in (0, 200, 304, 404, 503, 999)] == ["none", "2xx", "3xx", "4xx", "5xx", "none"]
    assert version_number("000012-20250101T000000Z") == 12
    assert version_number("weird") == 0


def _waits(registry: CollectorRegistry) -> dict[str, float]:
    s = parse(generate_latest(registry).decode())
    return {k: v for k, v in s.by("crawlstream_politeness_wait_seconds_count", "reason").items() if v}


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.mark.parametrize(
    ("outcome", "override_s", "reason", "wait_s"),
    [
        (FetchOutcome(200, elapsed_ms=100), None, "min_delay", 1.0),
        (FetchOutcome(200, elapsed_ms=100), 3.0, "override", 3.0),
        (FetchOutcome(200, elapsed_ms=100, crawl_delay_s=5), None, "crawl_delay", 5.0),
        (FetchOutcome(200, elapsed_ms=900), None, "response_time", 1.8),
        (FetchOutcome(503, elapsed_ms=100), None, "backoff", 2.0),
        (FetchOutcome(200, elapsed_ms=100, retry_after_s=30), None, "retry_after", 30.0),
    ],
)
def test_each_wait_is_observed_with_what_decided_it(
    redis_client: redis.Redis,
    tmp_path: Path,
    outcome: FetchOutcome,
    override_s: float | None,
    reason: str,
    wait_s: float,
) -> None:
    registry = CollectorRegistry()
    metrics = per_registry(PolitenessMetrics, registry)
    clock = Clock()
    scheduler = Scheduler(
        redis_client, tmp_path / "frontier", clock, min_delay_s=1.0, response_time_factor=2.0, metrics=metrics
    )
    metrics.watch_events(scheduler.stats)
    if override_s is not None:
        Controls(redis_client).set_override("a.example", DomainOverride(delay_s=override_s))
    scheduler.load_partition(0)
    scheduler.enqueue(0, [FrontierEntry("a.example", f"https://a.example/{i}", i) for i in range(2)])
    (ticket,) = scheduler.due(0)
    scheduler.complete(0, "a.example", ticket.url, outcome)

    assert reason in WAIT_REASONS
    assert _waits(registry) == {reason: 1.0}
    assert registry.get_sample_value("crawlstream_politeness_wait_seconds_sum", {"reason": reason}) == pytest.approx(
        wait_s
    )
    s = parse(generate_latest(registry).decode())
    assert s.by("crawlstream_scheduler_events_total", "event").items() >= {"completed": 1.0, "dispatched": 1.0}.items()


def _store_sizes(registry: CollectorRegistry) -> Any:
    return parse(generate_latest(registry).decode())


def test_store_sizes_are_read_at_most_once_per_interval_and_not_after_the_store_closes(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = per_registry(StoreMetrics, registry)
    store = ContentStore(tmp_path / "store")
    reads = []

    def stats() -> Any:
        reads.append(time.monotonic())
        return store.stats()

    try:
        metrics.watch(stats, min_interval_s=3600)
        store.put("https://a.example/", b"<html>" + b"hello " * 500 + b"</html>", content_type="text/html")
        first = _store_sizes(registry)
        store.put("https://a.example/2", b"<html>" + b"again " * 500 + b"</html>", content_type="text/html")
        second = _store_sizes(registry)
        assert len(reads) == 1, "the second scrape served the first read"
        assert first.total("crawlstream_store_urls") == second.total("crawlstream_store_urls") == 1
        assert first.total("crawlstream_store_tier_urls", tier="hot") == 1
        assert first.total("crawlstream_store_ratio") > 0
        metrics.watch(stats, min_interval_s=0)
        assert _store_sizes(registry).total("crawlstream_store_urls") == 2
    finally:
        metrics.watch(None)
        store.close()
    assert not _store_sizes(registry).select("crawlstream_store_urls")


def test_the_codec_cache_is_served_as_held_bytes_entries_budget_and_evictions() -> None:
    """A bucket compressor's codec cache fills towards its budget as domains get dictionaries:
    served, so a memory curve that climbs can be read against it (a cache filling, or not)."""
    registry = CollectorRegistry()
    metrics = per_registry(StoreMetrics, registry)
    cache = CodecCache(budget_bytes=1000)
    metrics.watch_codec_cache(cache)
    for domain in ("a.example", "b.example", "c.example"):
        cache.get(domain, lambda: (object(), 400))
    s = parse(generate_latest(registry).decode())
    assert s.total("crawlstream_store_codec_cache_bytes") == 800  # the third pushed the first out
    assert s.total("crawlstream_store_codec_cache_entries") == 2
    assert s.total("crawlstream_store_codec_cache_budget_bytes") == 1000
    assert s.total("crawlstream_store_codec_cache_evictions_total") == 1
    metrics.watch_codec_cache(None)
    assert not parse(generate_latest(registry).decode()).select("crawlstream_store_codec_cache_bytes")


def test_the_ratio_per_tier_is_raw_bytes_over_live_segment_bytes() -> None:
    registry = CollectorRegistry()
    rows = {
        "hot": {"urls": 2, "bytes": 1000, "live_bytes": 800, "raw_bytes": 4000},
        "cold": {"urls": 1, "bytes": 100, "live_bytes": 0, "raw_bytes": 0},
    }
    stats = StoreStats(
        urls=3, bodies=3, raw_bytes=4000, segment_bytes=1100, dict_bytes=0, index_bytes=100,
        dictionaries=0, quarantined_regions=0, by_tier=rows,
    )  # fmt: skip
    per_registry(StoreMetrics, registry).watch(lambda: stats, 0)
    s = parse(generate_latest(registry).decode())
    assert s.by("crawlstream_store_tier_ratio", "tier") == {"hot": 5.0}  # no live bytes: no ratio
    assert s.by("crawlstream_store_tier_raw_bytes", "tier") == {"cold": 0.0, "hot": 4000.0}
    assert s.total("crawlstream_store_ratio") == pytest.approx(4000 / 1200)
    assert s.total("crawlstream_store_bytes") == 1200


def test_index_builds_set_the_version_and_count_by_kind() -> None:
    registry = CollectorRegistry()
    metrics = per_registry(IndexMetrics, registry)
    metrics.observe_build("full", 2.5, "000003-20250101T000000Z", domains=10, pairs=12, now_s=1000.0)
    metrics.observe_build("incremental", 0.1, None, domains=0, pairs=0, now_s=1001.0)
    s = parse(generate_latest(registry).decode())
    assert s.total("crawlstream_index_version") == 3
    assert s.total("crawlstream_index_version_flipped_timestamp_seconds") == 1000.0
    assert s.by("crawlstream_index_builds_total", "kind") == {"full": 1.0, "nothing_new": 1.0}
    assert s.total("crawlstream_index_domains") == 10


def test_events_sent_through_a_host_producer_are_counted_per_topic(tmp_path: Path) -> None:
    from crawlstream.events import DiscoveredUrl
    from crawlstream.topics import URLS_DISCOVERED

    settings = load({"CRAWLSTREAM_DATA_DIR": str(tmp_path / "data"), "CRAWLSTREAM_BUS_FSYNC": "never"})
    with open_host(settings) as host:
        out = host.event_producer()
        for n in range(3):
            out.send(URLS_DISCOVERED, DiscoveredUrl(f"https://a.example/{n}", "a.example", n, 0, 1, "seed"))
        out.flush()
        value = host.registry.get_sample_value("crawlstream_events_produced_total", {"topic": URLS_DISCOVERED})
    assert value == 3


def test_the_readme_and_the_k8s_readme_name_each_service_port() -> None:
    repo = Path(__file__).resolve().parents[2]
    section = (repo / "README.md").read_text(encoding="utf-8").split("## Metrics and logs", 1)[1].split("\n## ", 1)[0]
    table = dict(re.findall(r"\| `([a-z-]+)` \| (\d+)", section))
    assert {name: int(port) for name, port in table.items()} == SERVICE_METRICS_PORTS
    k8s = (repo / "deploy" / "k8s" / "README.md").read_text(encoding="utf-8")
    for name, port in SERVICE_METRICS_PORTS.items():
        assert f"{name} {port}" in " ".join(k8s.split()), name
