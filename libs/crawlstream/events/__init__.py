"""The event contract in code: typed events, the Avro wire codec, producing and dead letters.

Schemas live in ``schemas/`` (package ``crawlstream.schemas``); schemas/README.md documents
every field, the topics, keys and the partitioning rule.

The bulk paths' precompiled values (``AvroPublisher``, ``UrlRecordPublisher``, ``avro_long``,
``avro_string``: ``_publisher``) are imported on first use (module ``__getattr__``): their
tables take ~20 ms to build, which a service that never sends in bulk should not pay.
"""

from typing import TYPE_CHECKING, Any

from crawlstream.events._codec import MAGIC_BYTE, EventCodec, schema_id_of
from crawlstream.events._model import (
    EVENT_TYPES,
    TOPIC_EVENTS,
    ContentLocation,
    ContentStored,
    DiscoveredUrl,
    Event,
    FetchRequest,
    FetchResult,
    UrlRecord,
)
from crawlstream.events._producer import DLQ_HEADERS, EventProducer, dead_letter, event_domain
from crawlstream.events._schemas import (
    LocalSchemaIds,
    RegistrySchemaIds,
    Schema,
    SchemaIds,
    bundled_schemas,
    full_name,
    schema_ids_from_url,
    subject_for,
)

if TYPE_CHECKING:
    from crawlstream.events._publisher import AvroPublisher, DomainParts, UrlRecordPublisher, avro_long, avro_string

_PUBLISHER_NAMES = ("AvroPublisher", "DomainParts", "UrlRecordPublisher", "avro_long", "avro_string")

__all__ = [
    "DLQ_HEADERS",
    "EVENT_TYPES",
    "MAGIC_BYTE",
    "TOPIC_EVENTS",
    "AvroPublisher",
    "ContentLocation",
    "ContentStored",
    "DiscoveredUrl",
    "DomainParts",
    "Event",
    "EventCodec",
    "EventProducer",
    "FetchRequest",
    "FetchResult",
    "LocalSchemaIds",
    "RegistrySchemaIds",
    "Schema",
    "SchemaIds",
    "UrlRecord",
    "UrlRecordPublisher",
    "avro_long",
    "avro_string",
    "bundled_schemas",
    "dead_letter",
    "event_domain",
    "full_name",
    "schema_id_of",
    "schema_ids_from_url",
    "subject_for",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLISHER_NAMES:
        from crawlstream.events import _publisher

        return getattr(_publisher, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
