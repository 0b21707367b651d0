"""deploy/grafana/crawlstream-dashboard.json: a well-formed Grafana dashboard whose every PromQL
expression names only series the real services expose (their registries, built by their own
wiring: no panel over a metric nobody emits)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from metrics_support import SUFFIXES, Scrape, dashboard_path, parse
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from crawlstream.api import from_settings as api_from_settings
from crawlstream.roles import SERVICE_NAMES, role
from crawlstream.runtime import open_host
from crawlstream.settings import load

REPO = Path(__file__).resolve().parents[2]
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "inf", "nan",
}  # fmt: skip


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(dashboard_path(REPO).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return out


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (functions, keywords, labels and ranges removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery selectors
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
    names = set()
    for match in re.finditer(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", expr):  # not the unit of 5m
        word = match.group(0)
        rest = expr[match.end() :].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:  # a function call or a keyword
            continue
        names.add(word)
    return names


def test_metric_names_are_read_out_of_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(crawlstream_api_request_duration_seconds_bucket{route="/x"}'
        "[$__rate_interval]))) / on (route) group_left sum(up offset 5m) > bool 0"
    )
    assert metric_names(expr) == {"crawlstream_api_request_duration_seconds_bucket", "up"}


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Scrape:
    """Every family the services can expose: each one built by its own wiring on one host (the
    query API by its app factory), plus the process collector `crawlstream service` serves."""
    settings = load({"CRAWLSTREAM_DATA_DIR": str(tmp_path_factory.mktemp("dashboard") / "data")})
    registry = CollectorRegistry()
    with open_host(settings, registry=registry) as host:
        built = []
        try:
            for name in SERVICE_NAMES:
                module = role(name).module()
                if hasattr(module, "build"):
                    built.append(module.build(host))
        finally:
            for service in built:
                service.close()
    assert len(built) == len(SERVICE_NAMES) - 1  # all but the query API, which is its app
    api_from_settings(settings, registry=registry)
    ProcessCollector(registry=registry)
    return parse(generate_latest(registry).decode())


def _used(dashboard: dict[str, Any]) -> dict[str, str]:
    """Series name -> the title of the first panel that queries it."""
    used: dict[str, str] = {}
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                used.setdefault(name, panel["title"])
    return used


def test_every_expression_names_only_series_the_services_expose(dashboard: dict[str, Any], exposed: Scrape) -> None:
    used = _used(dashboard)
    missing = {name: title for name, title in used.items() if name not in exposed.names()}
    assert missing == {}
    assert len(used) >= 25


def test_the_dashboard_covers_every_area_of_the_issue(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in _panels(dashboard) for t in p.get("targets", []))
    for needle in (
        "crawlstream_events_processed_total",  # throughput
        "sum by (group) (crawlstream_consumer_lag)",  # lag per service
        "crawlstream_events_dead_lettered_total",  # DLQ
        "crawlstream_fetch_outcomes_total",
        "histogram_quantile(0.5, sum by (le) (rate(crawlstream_fetch_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(crawlstream_fetch_duration_seconds_bucket",
        "crawlstream_politeness_wait_seconds_bucket",
        "crawlstream_store_tier_ratio",
        "crawlstream_index_version",
        "crawlstream_index_build_duration_seconds",
        "histogram_quantile(0.99, sum by (le, route) (rate(crawlstream_api_request_duration_seconds_bucket",
    ):
        assert needle in exprs, needle


def test_every_family_of_the_pipeline_is_on_some_panel(dashboard: dict[str, Any], exposed: Scrape) -> None:
    """The converse, for the families crawlstream.metrics and the service loop define (the query
    API has more than its panels show): each is shown, or listed here as counted for alerts and
    ad-hoc queries only."""
    used = set(_used(dashboard))
    shown = {f for f, kind in exposed.types.items() if any(f + suffix in used for suffix in SUFFIXES[kind])}
    pipeline = {
        f
        for f in exposed.types
        if f.startswith("crawlstream_")
        and not f.startswith("crawlstream_api_")
        and not f.endswith("_created")  # the text format's creation times of counters and histograms
    }
    off_dashboard = {"crawlstream_loop_batches", "crawlstream_consumer_lag_sample_failures"}
    assert pipeline - shown == off_dashboard


def test_panels_have_unique_ids_a_grid_position_and_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"
    datasource = {"type": "prometheus", "uid": "${" + variable["name"] + "}"}
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        grid = p["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"} and all(isinstance(v, int) for v in grid.values()), p["title"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["w"] > 0 and grid["h"] > 0, p["title"]
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == datasource, p["title"]
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]
        for target in p["targets"]:
            assert target["datasource"] == datasource and target["expr"].strip(), p["title"]


def test_sample_suffixes_cover_the_types_prometheus_client_emits() -> None:
    assert {"counter", "gauge", "histogram"} <= set(SUFFIXES)
