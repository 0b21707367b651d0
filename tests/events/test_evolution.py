"""Schema evolution: readers and writers on different versions of a schema still agree.

The "new" versions are test fixtures in tests/events/evolved/ (schemas/ holds only what is
published); the ids 101-103 play the registry ids those versions would get.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from event_samples import sample_events

from crawlstream import topics
from crawlstream.errors import EventDecodeError
from crawlstream.events import (
    ContentStored,
    DiscoveredUrl,
    EventCodec,
    FetchResult,
    LocalSchemaIds,
    Schema,
    bundled_schemas,
    schema_id_of,
)

EVOLVED = Path(__file__).parent / "evolved"
DISCOVERED = "crawlstream.v1.DiscoveredUrl"
FETCH_RESULT = "crawlstream.v1.FetchResult"


def _evolved(file_name: str) -> Schema:
    schema: Schema = json.loads((EVOLVED / file_name).read_text())
    return schema


@pytest.fixture
def ids() -> LocalSchemaIds:
    """The bundled ids plus the evolved versions, as a registry holding both would."""
    bundled = LocalSchemaIds.bundled()
    schemas = {schema_id: bundled.schema_for(schema_id) for schema_id in range(1, 14)}  # history/: 1-4, 6, 7, 9, 11
    schemas[101] = _evolved("discovered_url.avsc")
    schemas[102] = _evolved("fetch_result.avsc")
    schemas[103] = _evolved("fetch_result_incompatible.avsc")
    return LocalSchemaIds(schemas)


def _new_codec(ids: LocalSchemaIds, **evolved: Schema) -> EventCodec:
    readers = dict(bundled_schemas())
    readers.update(evolved)
    return EventCodec(ids, readers)


def test_old_reader_reads_a_new_writers_message_ignoring_the_new_field(ids: LocalSchemaIds) -> None:
    old = sample_events()[topics.URLS_DISCOVERED]
    assert isinstance(old, DiscoveredUrl)
    record: dict[str, Any] = {**dataclasses.asdict(old), "language": "de"}
    value = _new_codec(ids, **{DISCOVERED: _evolved("discovered_url.avsc")}).encode_record(
        DISCOVERED, record, topics.URLS_DISCOVERED
    )
    assert schema_id_of(value) == 101
    assert EventCodec(ids).decode(value, DiscoveredUrl) == old


def test_new_reader_reads_an_old_writers_message_with_the_null_default(ids: LocalSchemaIds) -> None:
    old = sample_events()[topics.URLS_DISCOVERED]
    value = EventCodec(ids).encode(old, topics.URLS_DISCOVERED)  # type: ignore[arg-type]
    assert schema_id_of(value) == 10  # DiscoveredUrl's current id (raw_url added, ADR 024)
    name, record = _new_codec(ids, **{DISCOVERED: _evolved("discovered_url.avsc")}).decode_record(value)
    assert name == DISCOVERED
    assert record == {**dataclasses.asdict(old), "language": None}


def test_new_reader_applies_a_non_null_default_to_old_messages(ids: LocalSchemaIds) -> None:
    old = sample_events()[topics.FETCH_RESULTS]
    assert isinstance(old, FetchResult)
    value = EventCodec(ids).encode(old, topics.FETCH_RESULTS)
    _, record = _new_codec(ids, **{FETCH_RESULT: _evolved("fetch_result.avsc")}).decode_record(value)
    assert record["http_version"] == "1.1"
    assert record["body_zstd"] == old.body_zstd


def test_old_reader_reads_a_new_fetch_result_with_a_defaulted_field(ids: LocalSchemaIds) -> None:
    old = sample_events()[topics.FETCH_RESULTS]
    record = {**dataclasses.asdict(old), "http_version": "2"}  # type: ignore[call-overload]
    value = _new_codec(ids, **{FETCH_RESULT: _evolved("fetch_result.avsc")}).encode_record(
        FETCH_RESULT, record, topics.FETCH_RESULTS
    )
    assert EventCodec(ids).decode(value, FetchResult) == old


def test_new_required_field_without_default_cannot_read_old_messages(ids: LocalSchemaIds) -> None:
    """The evolution rule README.md states: new fields need defaults, or old data is unreadable."""
    value = EventCodec(ids).encode(sample_events()[topics.FETCH_RESULTS], topics.FETCH_RESULTS)  # type: ignore[arg-type]
    codec = _new_codec(ids, **{FETCH_RESULT: _evolved("fetch_result_incompatible.avsc")})
    with pytest.raises(EventDecodeError, match=r"server_ip|default"):
        codec.decode_record(value)


def test_a_codec_with_an_unregistered_schema_refuses_to_write() -> None:
    from crawlstream.errors import ConfigError

    codec = _new_codec(LocalSchemaIds.bundled(), **{DISCOVERED: _evolved("discovered_url.avsc")})
    record = {**dataclasses.asdict(sample_events()[topics.URLS_DISCOVERED]), "language": None}  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match=r"registry\.json"):
        codec.encode_record(DISCOVERED, record, topics.URLS_DISCOVERED)


def test_content_stored_before_shards_reads_with_no_shard_and_old_readers_skip_it(ids: LocalSchemaIds) -> None:
    """content.stored id 7 (before ADR 028) and id 13 (location.shard): both ways round."""
    new = sample_events()[topics.CONTENT_STORED]
    assert isinstance(new, ContentStored)
    new = dataclasses.replace(new, location=dataclasses.replace(new.location, shard=37))
    old_schema = ids.schema_for(7)
    old_codec = _new_codec(ids, **{"crawlstream.v1.ContentStored": old_schema})
    record = dataclasses.asdict(new)
    del record["location"]["shard"]
    old_value = old_codec.encode_record("crawlstream.v1.ContentStored", record, topics.CONTENT_STORED)
    assert schema_id_of(old_value) == 7
    read = EventCodec(ids).decode(old_value, ContentStored)
    assert read.location.shard is None and read.location.segment == new.location.segment
    new_value = EventCodec(ids).encode(new, topics.CONTENT_STORED)
    assert schema_id_of(new_value) == 13
    assert EventCodec(ids).decode(new_value, ContentStored).location.shard == 37
    _, old_read = old_codec.decode_record(new_value)
    assert "shard" not in old_read["location"] and old_read["location"]["offset"] == new.location.offset
