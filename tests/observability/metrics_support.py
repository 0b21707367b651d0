"""Scraping a Prometheus endpoint over HTTP and reading it the way Prometheus does.

``scrape`` parses with ``prometheus_client.parser.text_string_to_metric_families``; ``Scrape``
answers sums and samples by label, and the exposed sample names (``_total``, ``_bucket``...)
that a dashboard's PromQL may name.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Sample names each family type exposes besides its own (Prometheus' text format).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}

# The crawl services' own families (crawlstream_api_* come from the query API); each service
# process must expose the families of what it runs.
LOOP_FAMILIES = {
    "crawlstream_events_processed",
    "crawlstream_events_produced",
    "crawlstream_events_dead_lettered",
    "crawlstream_consumer_lag",
    "crawlstream_loop_batches",
}
FETCH_FAMILIES = {
    "crawlstream_fetch_outcomes",
    "crawlstream_fetch_duration_seconds",
    "crawlstream_fetch_body_bytes",
    "crawlstream_fetches_in_flight",
}
POLITENESS_FAMILIES = {
    "crawlstream_politeness_wait_seconds",
    "crawlstream_scheduler_events",
    "crawlstream_scheduler_domains_ready",
    "crawlstream_scheduler_requests_in_flight",
}
STORE_FAMILIES = {
    "crawlstream_store_pages_stored",
    "crawlstream_store_put_bytes",
    "crawlstream_store_tier_bytes",
    "crawlstream_store_tier_live_bytes",
    "crawlstream_store_tier_urls",
    "crawlstream_store_bytes",
    "crawlstream_store_raw_bytes",
    "crawlstream_store_ratio",
    "crawlstream_store_urls",
    "crawlstream_store_codec_cache_bytes",
    "crawlstream_store_codec_cache_entries",
    "crawlstream_store_codec_cache_budget_bytes",
    "crawlstream_store_codec_cache_evictions",
}
INDEX_FAMILIES = {
    "crawlstream_index_version",
    "crawlstream_index_builds",
    "crawlstream_index_build_duration_seconds",
    "crawlstream_index_domains",
}


@dataclass(frozen=True)
class Scrape:
    types: Mapping[str, str]  # family name -> type
    samples: tuple[Sample, ...]

    def names(self) -> set[str]:
        """Every sample name this endpoint may expose (from its families and their types)."""
        return {family + suffix for family, kind in self.types.items() for suffix in SUFFIXES.get(kind, ("",))}

    def select(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def total(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.select(name, **labels))

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.select(name, **labels):
            out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
        return out


def scrape(url: str, timeout_s: float = 10.0) -> Scrape:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return parse(resp.read().decode("utf-8"))


def parse(text: str) -> Scrape:
    """The text exposition format, read as Prometheus' own client parses it."""
    types: dict[str, str] = {}
    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        samples.extend(family.samples)
    return Scrape(types, tuple(samples))


def merged(scrapes: Iterable[Scrape]) -> Scrape:
    """Several processes' endpoints as one (what a Prometheus query over every target sees)."""
    types: dict[str, str] = {}
    samples: list[Sample] = []
    for s in scrapes:
        types.update(s.types)
        samples.extend(s.samples)
    return Scrape(types, tuple(samples))


def is_drained(s: Scrape, groups: Iterable[str]) -> bool:
    """What an operator reads off the dashboard: every group has lag samples and all are 0, no
    domain waits in a scheduler's ready queue, no request or fetch is in flight, and fetches ran."""
    lag = s.select("crawlstream_consumer_lag")
    return (
        {x.labels["group"] for x in lag} >= set(groups)
        and all(x.value == 0 for x in lag)
        and s.total("crawlstream_scheduler_domains_ready") == 0
        and s.total("crawlstream_scheduler_requests_in_flight") == 0
        and s.total("crawlstream_fetches_in_flight") == 0
        and s.total("crawlstream_fetch_outcomes_total") > 0
    )


def wait_drained(
    read: Callable[[], Scrape],
    groups: Iterable[str],
    *,
    timeout_s: float,
    checks: int = 3,
    interval_s: float = 0.3,
    on_timeout: Callable[[], str] = lambda: "",
) -> Scrape:
    """Scrape until ``checks`` scrapes in a row find the crawl drained with the same fetch count."""
    groups = list(groups)
    deadline = time.monotonic() + timeout_s
    streak, last_count = 0, -1.0
    while time.monotonic() < deadline:
        s = read()
        count = s.total("crawlstream_fetch_outcomes_total")
        streak = streak + 1 if is_drained(s, groups) and count == last_count else 0
        last_count = count
        if streak >= checks:
            return s
        time.sleep(interval_s)
    raise AssertionError(f"not drained per the metrics within {timeout_s:.0f} s\n{on_timeout()}")


def dashboard_path(repo: Path) -> Path:
    return repo / "deploy" / "grafana" / "crawlstream-dashboard.json"
