"""The published v1 contract is never broken: readers and writers deployed against the schemas
as published (a frozen copy in published_v1/, as outside systems hold them) keep reading what
the current schemas write, and the current readers keep reading what they wrote.

Editing a schema in schemas/ so that either direction fails (a field added without a
default, a field removed or renamed without an alias, a type changed beyond Avro promotion)
fails this test: such a change needs a new namespace and new topics (schemas/README.md,
Evolution rule 5). A compatible change passes here and gets a new schema id (rule 4).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from event_samples import sample_events

from crawlstream.events import EventCodec, LocalSchemaIds

PUBLISHED = Path(__file__).parent / "published_v1"
CURRENT = Path(__file__).resolve().parents[2] / "schemas"
REGISTRY = json.loads((CURRENT / "registry.json").read_text())


def _schema(root: Path, file: str) -> Any:
    return fastavro.parse_schema(json.loads((root / file).read_text()), named_schemas={})


def _subject_files() -> list[tuple[str, str]]:
    """(a topic with a sample event, its schema file), one per schema file."""
    samples = sample_events()
    by_file: dict[str, str] = {}
    for subject, schema_id in REGISTRY["subjects"].items():
        topic = subject.removesuffix("-value")
        if topic in samples:
            by_file.setdefault(REGISTRY["schemas"][str(schema_id)], topic)
    return sorted((topic, file) for file, topic in by_file.items())


@pytest.mark.parametrize(("topic", "file"), _subject_files())
def test_a_published_reader_reads_what_the_current_schema_writes(topic: str, file: str) -> None:
    record = _record(topic)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _schema(CURRENT, file), record)
    out.seek(0)
    read = fastavro.schemaless_reader(out, _schema(CURRENT, file), _schema(PUBLISHED, file))
    published = json.loads((PUBLISHED / file).read_text())
    assert read == _published_view(record, published)


@pytest.mark.parametrize(("topic", "file"), _subject_files())
def test_the_current_reader_reads_what_a_published_writer_wrote(topic: str, file: str) -> None:
    published_fields = _published_fields(file)
    record = {k: v for k, v in _record(topic).items() if k in published_fields}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _schema(PUBLISHED, file), record)
    out.seek(0)
    read = fastavro.schemaless_reader(out, _schema(PUBLISHED, file), _schema(CURRENT, file))
    assert {k: read[k] for k in published_fields} == record


def test_every_published_schema_is_checked() -> None:
    assert sorted(file for _, file in _subject_files()) == sorted(p.name for p in PUBLISHED.glob("*.avsc"))


def test_every_published_schema_is_still_in_the_registry_under_its_id() -> None:
    """Ids are never reused: each published file is still reachable by the id it had."""
    for file in sorted(p.name for p in PUBLISHED.glob("*.avsc")):
        assert file in REGISTRY["schemas"].values() or any(
            Path(f).name.startswith(file.removesuffix(".avsc")) for f in REGISTRY["schemas"].values()
        ), file


def _published_view(record: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``record`` with only the fields ``schema`` (a published record schema) has, nested records too."""
    view = {}
    for f in schema["fields"]:
        value, ftype = record[f["name"]], f["type"]
        nested = isinstance(ftype, dict) and ftype.get("type") == "record"
        view[f["name"]] = _published_view(value, ftype) if nested else value
    return view


def _published_fields(file: str) -> list[str]:
    return [f["name"] for f in json.loads((PUBLISHED / file).read_text())["fields"]]


def _record(topic: str) -> dict[str, Any]:
    """The sample event of ``topic`` as the Avro record crawlstream's codec writes."""
    codec = EventCodec(LocalSchemaIds.bundled())
    event = sample_events()[topic]
    value = codec.encode(event, topic)
    schema_id = int.from_bytes(value[1:5], "big")
    writer = _schema(CURRENT, REGISTRY["schemas"][str(schema_id)])
    record: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(value[5:]), writer, None)
    return record
