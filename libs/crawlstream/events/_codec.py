"""Event values on the wire: Confluent framing around schemaless Avro (fastavro).

Pure apart from the ``SchemaIds`` it is given (whose registry variant does HTTP on a cache
miss). Layout of a value::

    byte 0      magic, always 0
    bytes 1..4  schema id, unsigned big-endian (from SchemaIds)
    bytes 5..   Avro binary body of the record, written with that schema

Decoding resolves the *writer* schema from the id and reads it into the reader's schema
(Avro schema resolution), so old readers read new writers and new readers read old ones.
Timestamps are read as plain ints: logical types are stripped before parsing (the schemas
published to a registry keep them, so tools still show dates).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import SchemaParseException

from crawlstream.errors import BadDataError, EventDecodeError
from crawlstream.events._model import EVENT_TYPES, ContentLocation, ContentStored, Event
from crawlstream.events._schemas import Schema, SchemaIds, bundled_schemas, full_name, subject_for

__all__ = ["MAGIC_BYTE", "EventCodec", "schema_id_of"]

MAGIC_BYTE = 0
_HEADER = struct.Struct(">BI")

# What fastavro raises on bytes that are not a valid body for the writer schema.
_AVRO_READ_ERRORS = (
    EOFError,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    OverflowError,
    MemoryError,
    struct.error,
    SchemaResolutionError,
)
_AVRO_WRITE_ERRORS = (ValueError, TypeError, OverflowError, KeyError, AttributeError, struct.error)


def schema_id_of(value: bytes) -> int:
    """The schema id in a wire value's header; ``EventDecodeError`` if there is no valid header."""
    if len(value) < _HEADER.size:
        raise EventDecodeError(
            f"value of {len(value)} bytes is shorter than the 5-byte Confluent header (magic 0 + schema id)"
        )
    magic, schema_id = _HEADER.unpack_from(value)
    if magic != MAGIC_BYTE:
        raise EventDecodeError(
            f"expected magic byte 0 (Confluent wire format), found {value[0]:#04x}: "
            "the producer did not use the Avro serializer"
        )
    return int(schema_id)


def _strip_logical_types(node: Any) -> Any:
    """A copy of ``node`` without ``logicalType`` annotations (so longs read as ints)."""
    if isinstance(node, dict):
        return {k: _strip_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_strip_logical_types(v) for v in node]
    return node


def _parse(schema: Schema) -> Any:
    try:
        return parse_schema(_strip_logical_types(schema))
    except SchemaParseException as exc:
        raise EventDecodeError(f"schema {full_name(schema)!r} is not valid Avro: {exc}") from exc


def _slot_builder(cls: type[Any]) -> Callable[[Mapping[str, Any]], Any]:
    """A constructor of event class ``cls`` from a record dict that sets its slots directly.

    The generated ``__init__`` of a frozen dataclass calls ``object.__setattr__`` once per
    field (a FetchResult has 22): about as much time as fastavro takes to read the record.
    Straight-line slot-descriptor calls do the same in a fraction of it. Used only while
    ``cls`` is exactly the slotted class this was written for (a slot per field, no
    ``__post_init__``); otherwise the class itself. The record must hold every field: the
    reader schema's fields are the dataclass's (a test checks it), so a decoded one does.
    """
    names = tuple(f.name for f in fields(cls))
    if tuple(getattr(cls, "__slots__", ())) != names or hasattr(cls, "__post_init__"):
        return lambda record: cls(**record)
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["def build(record):", "    obj = new(cls)"]
    for i, name in enumerate(names):
        namespace[f"set{i}"] = cls.__dict__[name].__set__
        lines.append(f"    set{i}(obj, record[{name!r}])")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # names are identifiers of the dataclass, quoted by repr
    build: Callable[[Mapping[str, Any]], Any] = namespace["build"]
    return build


def _to_record_fn(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    names = tuple(f.name for f in fields(cls))
    if cls is ContentStored:

        def nested(event: Any) -> dict[str, Any]:
            record = {name: getattr(event, name) for name in names}
            loc = event.location
            record["location"] = {n: getattr(loc, n) for n in _LOCATION_NAMES}
            return record

        return nested
    return lambda event: {name: getattr(event, name) for name in names}


def _from_record_fn(cls: type[Any]) -> Callable[[dict[str, Any]], Any]:
    build = _slot_builder(cls)
    if cls is ContentStored:
        build_location = _slot_builder(ContentLocation)

        def nested(record: dict[str, Any]) -> Any:
            record["location"] = build_location(record["location"])
            return build(record)

        return nested
    return build


_LOCATION_NAMES = tuple(f.name for f in fields(ContentLocation))


@dataclass(frozen=True, slots=True)
class _WritePlan:
    header: bytes
    schema: Any
    to_record: Callable[[Any], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _ReadPlan:
    name: str
    writer: Any
    reader: Any  # None when writer and reader schemas are identical (no resolution needed)


class EventCodec:
    """Encodes events to Confluent-framed Avro and back. Not thread-safe (caches).

    ``reader_schemas`` (record full name -> schema) are both what this process writes and
    what it reads into; the default is the bundled ``schemas/``. ``decode`` needs them to
    match the event dataclasses; ``decode_record`` works with any (e.g. an evolved schema).
    """

    def __init__(self, schema_ids: SchemaIds, reader_schemas: Mapping[str, Schema] | None = None) -> None:
        self._ids = schema_ids
        self._schemas = dict(reader_schemas) if reader_schemas is not None else bundled_schemas()
        self._parsed: dict[str, Any] = {}
        self._write_plans: dict[tuple[str, str | None], _WritePlan] = {}
        self._read_plans: dict[tuple[int, str | None], _ReadPlan] = {}
        self._from_record = {name: _from_record_fn(cls) for name, cls in EVENT_TYPES.items()}

    @classmethod
    def from_settings(cls, settings: Any) -> EventCodec:
        """Ids from ``settings.schema_registry_url`` (unset: schemas/registry.json)."""
        from crawlstream.events._schemas import schema_ids_from_url

        return cls(schema_ids_from_url(settings.schema_registry_url))

    # -- writing ---------------------------------------------------------------------------

    def _reader_parsed(self, name: str) -> Any:
        parsed = self._parsed.get(name)
        if parsed is None:
            schema = self._schemas.get(name)
            if schema is None:
                raise EventDecodeError(f"no reader schema for record {name!r}: expected one of {sorted(self._schemas)}")
            parsed = self._parsed[name] = _parse(schema)
        return parsed

    def _write_plan(self, name: str, topic: str | None, to_record: Callable[[Any], dict[str, Any]]) -> _WritePlan:
        plan = self._write_plans.get((name, topic))
        if plan is None:
            schema = self._schemas[name]
            subject = subject_for(topic) if topic is not None else name
            schema_id = self._ids.id_for(subject, schema)
            plan = _WritePlan(_HEADER.pack(MAGIC_BYTE, schema_id), self._reader_parsed(name), to_record)
            self._write_plans[(name, topic)] = plan
        return plan

    def encode(self, event: Event, topic: str | None = None) -> bytes:
        """The wire value of ``event``; ``topic`` selects the subject ``<topic>-value``
        (without it the record full name is the subject, RecordNameStrategy)."""
        cls = type(event)
        plan = self._write_plans.get((cls.AVRO_NAME, topic))
        if plan is None:
            plan = self._write_plan(cls.AVRO_NAME, topic, _to_record_fn(cls))
        return self._write(plan, cls.AVRO_NAME, plan.to_record(event))

    def encode_record(self, name: str, record: Mapping[str, Any], topic: str | None = None) -> bytes:
        """Like ``encode`` for a plain dict record of the schema named ``name``."""
        return self._write(self._write_plan(name, topic, dict), name, record)

    @staticmethod
    def _write(plan: _WritePlan, name: str, record: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(plan.header)
        try:
            schemaless_writer(buf, plan.schema, record)
        except _AVRO_WRITE_ERRORS as exc:
            raise BadDataError(f"cannot encode {name}: a field does not match the schema ({exc})") from exc
        return buf.getvalue()

    # -- reading ---------------------------------------------------------------------------

    def _read_plan(self, schema_id: int, expected: str | None) -> _ReadPlan:
        writer_schema = self._ids.schema_for(schema_id)
        name = full_name(writer_schema)
        if expected is not None and name != expected:
            raise EventDecodeError(f"expected a {expected} value, found schema id {schema_id} of record {name}")
        reader = self._reader_parsed(name)
        same = _strip_logical_types(writer_schema) == _strip_logical_types(self._schemas[name])
        plan = _ReadPlan(name, reader if same else _parse(writer_schema), None if same else reader)
        self._read_plans[(schema_id, expected)] = plan
        return plan

    def decode_record(self, value: bytes, expected_name: str | None = None) -> tuple[str, dict[str, Any]]:
        """(record full name, record dict) of a wire value, read into this codec's reader schema."""
        schema_id = schema_id_of(value)
        plan = self._read_plans.get((schema_id, expected_name))
        if plan is None:
            plan = self._read_plan(schema_id, expected_name)
        buf = io.BytesIO(value)
        buf.seek(_HEADER.size)
        try:
            record = schemaless_reader(buf, plan.writer, plan.reader)
        except _AVRO_READ_ERRORS as exc:
            raise EventDecodeError(
                f"Avro body of {len(value)} bytes does not match schema id {schema_id} ({plan.name}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if buf.tell() != len(value):
            raise EventDecodeError(
                f"{len(value) - buf.tell()} trailing bytes after the {plan.name} record "
                f"(schema id {schema_id}): the value is corrupt or was framed twice"
            )
        if not isinstance(record, dict):
            raise EventDecodeError(f"schema id {schema_id} is not a record schema")
        return plan.name, record

    def decode(self, value: bytes, expected_type: type[Any] | None = None) -> Event:
        """The event in ``value``; ``EventDecodeError`` for anything that is not a valid event
        (of ``expected_type`` when given)."""
        name, record = self.decode_record(value, expected_type.AVRO_NAME if expected_type is not None else None)
        from_record = self._from_record.get(name)
        if from_record is None:
            raise EventDecodeError(f"record {name} is not an event type (expected one of {sorted(EVENT_TYPES)})")
        event: Event = from_record(record)
        return event
