"""RegistrySchemaIds against a real Confluent-compatible Schema Registry (Apicurio Registry's
ccompat API, ``make schema-registry``), where test_schema_registry.py uses a stand-in.

One registry serves the module (start-up ~3 s). Its compatibility is set to BACKWARD,
Confluent's default (Apicurio's is NONE). Tests that register new versions write to topics
of their own, so the order of the tests does not matter.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from event_samples import sample_events

from crawlstream import topics
from crawlstream.bus import Message
from crawlstream.bus._embedded import EmbeddedBus
from crawlstream.devtools.localregistry import LocalSchemaRegistry, find_registry_java, find_schema_registry
from crawlstream.errors import ConfigError, EventDecodeError
from crawlstream.events import (
    DiscoveredUrl,
    EventCodec,
    EventProducer,
    FetchResult,
    RegistrySchemaIds,
    Schema,
    bundled_schemas,
    schema_id_of,
)
from crawlstream.settings import load

EVOLVED = Path(__file__).parent / "evolved"
DISCOVERED = "crawlstream.v1.DiscoveredUrl"
FETCH_RESULT = "crawlstream.v1.FetchResult"


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalSchemaRegistry]:
    try:
        find_schema_registry()
        find_registry_java()
    except ConfigError as exc:
        pytest.skip(f"no real schema registry here: {exc}")
    with LocalSchemaRegistry() as server:
        server.set_compatibility("BACKWARD")
        yield server


def _get(registry: LocalSchemaRegistry, path: str) -> Any:
    with urllib.request.urlopen(registry.url + path, timeout=10) as response:
        return json.loads(response.read())


def _versions(registry: LocalSchemaRegistry, subject: str) -> list[dict[str, Any]]:
    quoted = urllib.parse.quote(subject, safe="")
    return [_get(registry, f"/subjects/{quoted}/versions/{v}") for v in _get(registry, f"/subjects/{quoted}/versions")]


def _evolved(file_name: str) -> Schema:
    schema: Schema = json.loads((EVOLVED / file_name).read_text())
    return schema


def _codec(registry: LocalSchemaRegistry, **evolved: Schema) -> EventCodec:
    """A process's codec: a fresh client (empty caches), the bundled readers plus ``evolved``."""
    readers = dict(bundled_schemas())
    readers.update(evolved)
    return EventCodec(RegistrySchemaIds(registry.url), readers)


def _read_all(bus: EmbeddedBus, topic_names: list[str], count: int) -> list[Message]:
    consumer = bus.consumer("reader")
    consumer.subscribe(topic_names)
    out: list[Message] = []
    deadline = time.monotonic() + 10
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.consume(1000, 0.1))
    consumer.close()
    return out


def test_producer_registers_topic_subjects_and_consumer_resolves_ids_from_the_registry(
    registry: LocalSchemaRegistry, tmp_path: Path
) -> None:
    settings = load({"SCHEMA_REGISTRY_URL": registry.url, "CRAWLSTREAM_DATA_DIR": str(tmp_path)})
    samples = sample_events()
    with EmbeddedBus(tmp_path / "bus", default_partitions=2, fsync="never") as bus:
        producer = EventProducer(bus.producer(), EventCodec.from_settings(settings))
        for topic, event in samples.items():
            producer.send(topic, event)  # type: ignore[arg-type]
        producer.flush()
        messages = _read_all(bus, list(samples), len(samples))
    assert len(messages) == len(samples)

    consumer_codec = EventCodec.from_settings(settings)  # another process: knows no id yet
    for message in messages:
        assert consumer_codec.decode(message.value) == samples[message.topic]
        versions = _versions(registry, f"{message.topic}-value")
        assert [(v["version"], v["id"]) for v in versions] == [(1, schema_id_of(message.value))]
        name = type(samples[message.topic]).AVRO_NAME  # type: ignore[attr-defined]
        assert json.loads(versions[0]["schema"]) == bundled_schemas()[name]
        assert (
            json.loads(_get(registry, f"/schemas/ids/{schema_id_of(message.value)}")["schema"])
            == bundled_schemas()[name]
        )
    assert {f"{topic}-value" for topic in samples} <= set(_get(registry, "/subjects"))
    ids = {message.topic: schema_id_of(message.value) for message in messages}
    if topics.URLS_FRONTIER in ids:  # one schema in two subjects: one id, as in Confluent's registry
        assert ids[topics.URLS_FRONTIER] == ids[topics.URLS_DISCOVERED]

    # A producer restarted later registers again: same id, no new version.
    again = EventCodec.from_settings(settings).encode(samples[topics.FETCH_RESULTS], topics.FETCH_RESULTS)  # type: ignore[arg-type]
    assert schema_id_of(again) == ids[topics.FETCH_RESULTS]
    assert _get(registry, f"/subjects/{topics.FETCH_RESULTS}-value/versions") == [1]


def test_old_and_new_schema_versions_share_a_subject_and_read_each_other(registry: LocalSchemaRegistry) -> None:
    topic = "evolution.discovered"
    old_event = sample_events()[topics.URLS_DISCOVERED]
    assert isinstance(old_event, DiscoveredUrl)
    old_value = _codec(registry).encode(old_event, topic)
    new_record = {**dataclasses.asdict(old_event), "language": "de"}
    new_value = _codec(registry, **{DISCOVERED: _evolved("discovered_url.avsc")}).encode_record(
        DISCOVERED, new_record, topic
    )

    versions = _versions(registry, f"{topic}-value")
    assert [(v["version"], v["id"]) for v in versions] == [(1, schema_id_of(old_value)), (2, schema_id_of(new_value))]
    assert json.loads(versions[1]["schema"]) == _evolved("discovered_url.avsc")

    old_reader = _codec(registry)
    assert old_reader.decode(old_value) == old_event
    assert old_reader.decode(new_value, DiscoveredUrl) == old_event  # the new field is skipped
    new_reader = _codec(registry, **{DISCOVERED: _evolved("discovered_url.avsc")})
    assert new_reader.decode_record(old_value) == (DISCOVERED, {**dataclasses.asdict(old_event), "language": None})
    assert new_reader.decode_record(new_value) == (DISCOVERED, new_record)


def test_backward_check_admits_a_defaulted_field_and_refuses_a_required_one(registry: LocalSchemaRegistry) -> None:
    topic = "evolution.fetch"
    old_event = sample_events()[topics.FETCH_RESULTS]
    assert isinstance(old_event, FetchResult)
    old_value = _codec(registry).encode(old_event, topic)

    new = _codec(registry, **{FETCH_RESULT: _evolved("fetch_result.avsc")})
    new_value = new.encode_record(FETCH_RESULT, {**dataclasses.asdict(old_event), "http_version": "2"}, topic)
    assert new.decode_record(old_value)[1]["http_version"] == "1.1"  # the default fills old messages
    assert _codec(registry).decode(new_value, FetchResult) == old_event

    incompatible = _codec(registry, **{FETCH_RESULT: _evolved("fetch_result_incompatible.avsc")})
    record = {**dataclasses.asdict(old_event), "http_version": "2", "server_ip": "192.0.2.1"}
    with pytest.raises(ConfigError, match=r"refused schema crawlstream\.v1\.FetchResult .*HTTP 409.*server_ip"):
        incompatible.encode_record(FETCH_RESULT, record, topic)
    assert _get(registry, f"/subjects/{topic}-value/versions") == [1, 2]


def test_lookup_only_mode_finds_registered_schemas_and_refuses_others(registry: LocalSchemaRegistry) -> None:
    event = sample_events()[topics.URLS_RECORDS]
    registered = _codec(registry).encode(event, "lookup.records")  # type: ignore[arg-type]
    lookup = EventCodec(RegistrySchemaIds(registry.url, auto_register=False))
    assert schema_id_of(lookup.encode(event, "lookup.records")) == schema_id_of(registered)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"refused schema crawlstream\.v1\.UrlRecord .*HTTP 404"):
        lookup.encode(event, "lookup.unregistered")  # type: ignore[arg-type]
    assert "lookup.unregistered-value" not in _get(registry, "/subjects")


def test_an_id_the_registry_never_issued_is_a_decode_error(registry: LocalSchemaRegistry) -> None:
    with pytest.raises(EventDecodeError, match="unknown schema id 999999"):
        _codec(registry).decode(b"\x00\x00\x0f\x42\x3f\x00")
