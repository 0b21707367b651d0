"""Ids from a Confluent Schema Registry over HTTP, against a small fake on 127.0.0.1.

The fake implements the three REST endpoints the client uses, with the registry's real
semantics: ids are global per schema text, a subject lookup of an unregistered schema is 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest
from event_samples import sample_events

from crawlstream import topics
from crawlstream.errors import BusUnavailable, ConfigError, EventDecodeError
from crawlstream.events import EventCodec, RegistrySchemaIds, schema_id_of, schema_ids_from_url


class FakeRegistry(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.ids_by_text: dict[str, int] = {}
        self.subjects: dict[str, set[int]] = {}
        self.requests: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeRegistry

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.server.requests.append(("POST", self.path))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        parts = [unquote(p) for p in self.path.strip("/").split("/")]
        text = json.dumps(json.loads(body["schema"]), sort_keys=True)
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            schema_id = self.server.ids_by_text.setdefault(text, len(self.server.ids_by_text) + 1)
            self.server.subjects.setdefault(parts[1], set()).add(schema_id)
            self._reply(200, {"id": schema_id})
        elif len(parts) == 2 and parts[0] == "subjects":
            schema_id = self.server.ids_by_text.get(text)
            if schema_id is None or schema_id not in self.server.subjects.get(parts[1], set()):
                self._reply(404, {"error_code": 40403, "message": "Schema not found"})
            else:
                self._reply(200, {"subject": parts[1], "id": schema_id, "version": 1, "schema": body["schema"]})
        else:
            self._reply(404, {"error_code": 404, "message": "no such endpoint"})

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path))
        parts = self.path.strip("/").split("/")
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
            for text, schema_id in self.server.ids_by_text.items():
                if schema_id == int(parts[2]):
                    self._reply(200, {"schema": text})
                    return
        self._reply(404, {"error_code": 40403, "message": "Schema not found"})


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    server = FakeRegistry()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_writer_registers_under_topic_subject_and_reader_fetches_by_id(registry: FakeRegistry) -> None:
    event = sample_events()[topics.FETCH_RESULTS]
    value = EventCodec(RegistrySchemaIds(registry.url)).encode(event, topics.FETCH_RESULTS)  # type: ignore[arg-type]
    assert schema_id_of(value) == 1
    assert registry.subjects == {"fetch.results-value": {1}}
    reader = EventCodec(RegistrySchemaIds(registry.url))
    assert reader.decode(value) == event
    assert ("GET", "/schemas/ids/1") in registry.requests


def test_registry_calls_are_cached_after_the_first_use(registry: FakeRegistry) -> None:
    codec = EventCodec(RegistrySchemaIds(registry.url))
    event = sample_events()[topics.URLS_DISCOVERED]
    values = [codec.encode(event, topics.URLS_DISCOVERED) for _ in range(50)]  # type: ignore[arg-type]
    for value in values:
        codec.decode(value)
    assert len(registry.requests) == 1  # one registration; decoding reuses the registered schema


def test_same_schema_in_two_topics_gets_one_id(registry: FakeRegistry) -> None:
    codec = EventCodec(RegistrySchemaIds(registry.url))
    event = sample_events()[topics.URLS_DISCOVERED]
    first = codec.encode(event, topics.URLS_DISCOVERED)  # type: ignore[arg-type]
    second = codec.encode(event, topics.URLS_FRONTIER)  # type: ignore[arg-type]
    assert schema_id_of(first) == schema_id_of(second)
    assert set(registry.subjects) == {"urls.discovered-value", "urls.frontier-value"}


def test_id_unknown_to_the_registry_is_a_decode_error(registry: FakeRegistry) -> None:
    codec = EventCodec(RegistrySchemaIds(registry.url))
    for _ in range(3):
        with pytest.raises(EventDecodeError, match="unknown schema id 77"):
            codec.decode(b"\x00\x00\x00\x00\x4d\x00")
    assert registry.requests.count(("GET", "/schemas/ids/77")) == 1  # unknown ids are remembered


def test_lookup_only_mode_refuses_an_unregistered_schema(registry: FakeRegistry) -> None:
    codec = EventCodec(RegistrySchemaIds(registry.url, auto_register=False))
    with pytest.raises(ConfigError, match=r"refused schema crawlstream\.v1\.UrlRecord"):
        codec.encode(sample_events()[topics.URLS_RECORDS], topics.URLS_RECORDS)  # type: ignore[arg-type]


def test_unreachable_registry_is_transient_not_bad_data() -> None:
    server = FakeRegistry()
    url = server.url
    server.server_close()  # nothing listens on the port any more
    codec = EventCodec(RegistrySchemaIds(url, timeout_s=1.0))
    with pytest.raises(BusUnavailable, match="unreachable"):
        codec.decode(b"\x00\x00\x00\x00\x01\x00")


def test_registry_url_selects_the_http_ids_and_none_the_bundled_file(registry: FakeRegistry) -> None:
    assert isinstance(schema_ids_from_url(registry.url), RegistrySchemaIds)
    assert schema_ids_from_url(None).schema_for(1)["name"] == "DiscoveredUrl"
