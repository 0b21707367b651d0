"""``/openapi.json`` is a valid OpenAPI 3 document and the server holds to it (schemathesis)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import schemathesis
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from prometheus_client import CollectorRegistry
from schemathesis import GenerationMode

from crawlstream.api import Acl, create_app, openapi_document
from crawlstream.index import IndexReader
from crawlstream.settings import ApiSettings
from crawlstream.status import StatusCollector
from crawlstream.store import ContentStore
from tests.api._lake import run_client

Client = TestClient[Any, Any]

EXAMPLES_PER_OPERATION = 50
# `{domain}` and `url` are free-form strings whose validity is the URL rules of
# schemas/URL_KEYS.md (IDNA 2008, PSL), which no JSON-schema pattern expresses: a
# schema-valid string may rightly be a 400, so "positive data must be accepted" cannot hold.
EXCLUDED_CHECKS = [schemathesis.checks.positive_data_acceptance]


def _base(c: Client) -> str:
    return str(c.make_url("")).rstrip("/")


def test_openapi_document_loads_and_describes_every_route(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        doc = await (await c.get("/openapi.json")).json()
        schema = await asyncio.to_thread(schemathesis.openapi.from_url, _base(c) + "/openapi.json")
        return doc, schema

    doc, schema = run_client(reader, go, max_limit=50)
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == {
        "/v1/domain/{domain}",
        "/v1/domain/{domain}/datasets/{dataset_id}/urls",
        "/v1/url",
        "/healthz",
        "/metrics",
        "/openapi.json",
    }
    limit = next(
        p
        for p in doc["paths"]["/v1/domain/{domain}/datasets/{dataset_id}/urls"]["get"]["parameters"]
        if p["name"] == "limit"
    )
    assert limit["schema"]["maximum"] == 50  # the document states the cap the server enforces
    labels = {op.ok().label for op in schema.get_all_operations()}
    assert labels >= {  # schemathesis leaves out the document's own path
        "GET /v1/domain/{domain}",
        "GET /v1/domain/{domain}/datasets/{dataset_id}/urls",
        "GET /v1/url",
        "GET /healthz",
        "GET /metrics",
    }
    assert doc["security"] == [{"bearer": []}, {}]  # anonymous reads: a token is optional


def test_the_documents_operations_are_the_apps_routes(reader: IndexReader, tmp_path: Path) -> None:
    """Every route ``create_app`` registers (with a store and a status collector) is an operation
    of the document and the other way round; only the status page's script and style are not."""
    with ContentStore(tmp_path / "store") as store:
        app = create_app(
            reader, config=ApiSettings(max_limit=50, executor_threads=0), acl=None, registry=CollectorRegistry(),
            store=store, status=StatusCollector(tmp_path, bus=None, bus_backend=None),
        )
        routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    doc = openapi_document(max_limit=50, default_limit=20, anonymous_reads=True, content=True, status=True)
    operations = {(method, path) for path, item in doc["paths"].items() for method in item}
    static = {("get", "/status/status.js"), ("get", "/status/status.css")}
    assert {r for r in routes if r[0] != "head"} - static == operations


def _fuzz(base_url: str, headers: dict[str, str]) -> tuple[list[str], dict[int, int]]:
    """Every operation, positive and negative data: no 5xx, responses match the document and
    invalid data is rejected with a 4xx.

    Returns the 5xx seen and how many responses of each status came back."""
    schema = schemathesis.openapi.from_url(base_url + "/openapi.json")
    # A request with an unknown query parameter (negative data: the API ignores those) whose valid
    # `version` names an index version no longer kept is answered 410 before anything else looks
    # at it: the documented answer to the valid part, so a rejection too.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "410"]
    failures: list[str] = []
    statuses: dict[int, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        has_parameters = bool(list(operation.iter_parameters()))
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.NEGATIVE and not has_parameters:
                continue  # nothing to make invalid

            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: Any) -> None:
                response = case.call(base_url=base_url, headers=headers)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    failures.append(f"{case.method} {response.request.url} -> {response.status_code}")
                # every default check (schema, status codes, headers, negative data -> 4xx, ...)
                case.validate_response(response, headers=headers, excluded_checks=EXCLUDED_CHECKS)

            try:
                check()
            except Unsatisfiable:
                # A lone free-form path string has no invalid value a URL can carry
                # (the empty string cannot be a path segment): nothing to test.
                assert mode is GenerationMode.NEGATIVE, operation.label
    return failures, statuses


def test_schemathesis_finds_no_server_error_and_no_schema_violation(reader: IndexReader) -> None:
    async def go(c: Client) -> tuple[list[str], dict[int, int]]:
        return await asyncio.to_thread(_fuzz, _base(c), {})

    failures, statuses = run_client(reader, go, max_limit=50)
    assert failures == []
    assert sum(statuses.values()) >= 5 * EXAMPLES_PER_OPERATION // 2  # it really exercised the server
    assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > 0, statuses


def test_schemathesis_with_an_acl_finds_no_server_error(reader: IndexReader) -> None:
    token = "fuzz-token-1"

    async def go(c: Client) -> tuple[list[str], dict[int, int]]:
        return await asyncio.to_thread(_fuzz, _base(c), {"Authorization": f"Bearer {token}"})

    failures, statuses = run_client(reader, go, max_limit=50, acl=Acl.from_mapping({token: [1, 2]}))
    assert failures == []
    assert statuses.get(200, 0) > 0


def test_with_a_status_collector_the_status_routes_are_documented_and_fuzzed_without_server_error(
    reader: IndexReader, tmp_path: Path
) -> None:
    collector = StatusCollector(tmp_path, bus=None, bus_backend=None)  # an empty data dir: every part n/a

    async def go(c: Client) -> tuple[dict[str, Any], list[str], dict[int, int]]:
        doc = await (await c.get("/openapi.json")).json()
        return (doc, *await asyncio.to_thread(_fuzz, _base(c), {}))

    doc, failures, statuses = run_client(reader, go, max_limit=50, status=collector)
    assert {"/v1/status", "/status"} <= set(doc["paths"])
    assert failures == [] and statuses.get(200, 0) > 0
