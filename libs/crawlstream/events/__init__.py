"""The event contract in code: typed events, the Avro wire codec, producing and dead letters.

Schemas live in ``schemas/`` (package ``crawlstream.schemas``); schemas/README.md documents
every field, the topics, keys and the partitioning rule.
"""

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

__all__ = [
    "DLQ_HEADERS",
    "EVENT_TYPES",
    "MAGIC_BYTE",
    "TOPIC_EVENTS",
    "ContentLocation",
    "ContentStored",
    "DiscoveredUrl",
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
    "bundled_schemas",
    "dead_letter",
    "event_domain",
    "full_name",
    "schema_id_of",
    "schema_ids_from_url",
    "subject_for",
]
