"""Where schemas and their wire ids come from: the bundled files or a Schema Registry.

The bundled contract is the ``crawlstream.schemas`` package (the repo's ``schemas/``):
one ``.avsc`` per event and ``registry.json``, which maps each schema id to its file and
each subject (``<topic>-value``, Confluent's TopicNameStrategy) to the id producers write.
``LocalSchemaIds`` serves those ids offline; ``RegistrySchemaIds`` asks a Confluent Schema
Registry over HTTP (registering on first use) when ``SCHEMA_REGISTRY_URL`` is set.

Why not ``confluent_kafka.schema_registry``: in confluent-kafka 2.16 it imports ``authlib``
and ``httpx`` at module load, which we do not otherwise need; the three REST calls we use
are a few lines of urllib.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TypeAlias

from crawlstream.errors import BusUnavailable, ConfigError, EventDecodeError

__all__ = [
    "LocalSchemaIds",
    "RegistrySchemaIds",
    "Schema",
    "SchemaIds",
    "bundled_schemas",
    "full_name",
    "schema_ids_from_url",
    "subject_for",
]

logger = logging.getLogger(__name__)

Schema: TypeAlias = dict[str, Any]
"""A schema as parsed JSON (what ``json.loads`` of an ``.avsc`` returns)."""

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_MAX_NEGATIVE_CACHE = 1024


def subject_for(topic: str) -> str:
    """The Schema Registry subject of ``topic``'s values (TopicNameStrategy)."""
    return f"{topic}-value"


def full_name(schema: Schema) -> str:
    """``namespace.name`` of a record schema."""
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _normalized(schema: Schema) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _schema_dir() -> Traversable:
    """The bundled ``crawlstream.schemas`` package, or ``schemas/`` of a source checkout.

    The fallback covers an editable install made before setup.py mapped ``schemas/`` to
    ``crawlstream.schemas``; re-running ``pip install -e .`` makes it unnecessary.
    """
    try:
        return importlib.resources.files("crawlstream.schemas")
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parents[3] / "schemas"
        if not (checkout / "registry.json").is_file():
            raise ConfigError(
                "the crawlstream.schemas package is not installed and no schemas/ directory was found "
                f"at {checkout}; reinstall crawlstream (pip install -e .)"
            ) from None
        return checkout


def _load_registry_file(root: Traversable) -> tuple[dict[int, Schema], dict[str, int]]:
    try:
        registry = json.loads(root.joinpath("registry.json").read_text(encoding="utf-8"))
        schemas = {
            int(schema_id): json.loads(root.joinpath(file_name).read_text(encoding="utf-8"))
            for schema_id, file_name in registry["schemas"].items()
        }
        subjects = {str(subject): int(schema_id) for subject, schema_id in registry["subjects"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"schemas/registry.json or a schema it names is unreadable: {exc}") from exc
    return schemas, subjects


def bundled_schemas() -> dict[str, Schema]:
    """The current schema of each event, by record full name (the ids subjects point at)."""
    schemas, subjects = _load_registry_file(_schema_dir())
    return {full_name(schemas[schema_id]): schemas[schema_id] for schema_id in set(subjects.values())}


class SchemaIds(ABC):
    """Maps schemas to the 4-byte ids written on the wire, and ids back to schemas.

    Contract: ``schema_for(id_for(s, x)) == x`` for any schema ``x`` that ``id_for`` accepts,
    and an id once handed out keeps naming the same schema forever (old messages stay
    readable). Implementations cache; both calls are on the hot path only on a cache miss.
    """

    @abstractmethod
    def id_for(self, subject: str, schema: Schema) -> int:
        """The id to write ``schema`` with under ``subject``; ``ConfigError`` if it has none."""

    @abstractmethod
    def schema_for(self, schema_id: int) -> Schema:
        """The writer schema of ``schema_id``; ``EventDecodeError`` if the id is unknown."""


class LocalSchemaIds(SchemaIds):
    """Ids from a fixed table (``schemas/registry.json`` by default): no network."""

    def __init__(self, schemas: Mapping[int, Schema], subjects: Mapping[str, int] | None = None) -> None:
        self._schemas = dict(schemas)
        self._subjects = dict(subjects or {})
        self._ids_by_text: dict[str, int] = {}
        for schema_id in sorted(self._schemas):
            self._ids_by_text.setdefault(_normalized(self._schemas[schema_id]), schema_id)

    @classmethod
    def bundled(cls) -> LocalSchemaIds:
        """The ids of ``schemas/registry.json`` as shipped in the package."""
        return cls(*_load_registry_file(_schema_dir()))

    @classmethod
    def from_directory(cls, root: Path) -> LocalSchemaIds:
        """The ids of ``root/registry.json`` (same layout as ``schemas/``)."""
        return cls(*_load_registry_file(root))

    def id_for(self, subject: str, schema: Schema) -> int:
        text = _normalized(schema)
        pinned = self._subjects.get(subject)
        if pinned is not None and _normalized(self._schemas[pinned]) == text:
            return pinned
        schema_id = self._ids_by_text.get(text)
        if schema_id is None:
            raise ConfigError(
                f"schema {full_name(schema)} for subject {subject!r} has no id in schemas/registry.json; "
                "add the .avsc under a new id (never reuse one) or set SCHEMA_REGISTRY_URL"
            )
        return schema_id

    def schema_for(self, schema_id: int) -> Schema:
        schema = self._schemas.get(schema_id)
        if schema is None:
            raise EventDecodeError(
                f"unknown schema id {schema_id}: expected one of {sorted(self._schemas)} from "
                "schemas/registry.json; the writer used a registry this process does not know "
                "(set SCHEMA_REGISTRY_URL to the writer's registry)"
            )
        return schema


class RegistrySchemaIds(SchemaIds):
    """Ids from a Confluent Schema Registry (REST API v1).

    ``auto_register`` registers a schema under its subject on first use (the registry's
    compatibility check then guards evolution); without it the schema must already be there.
    Network failures raise ``BusUnavailable`` (transient: the message is retried, not
    dead-lettered); an id the registry does not know raises ``EventDecodeError``.
    """

    def __init__(self, url: str, *, timeout_s: float = 5.0, auto_register: bool = True) -> None:
        self._url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._auto_register = auto_register
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, Schema] = {}
        self._unknown: set[int] = set()

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            self._url + path,
            data=data,
            method=method,
            headers={"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise BusUnavailable(f"schema registry {self._url} answered {exc.code} to {method} {path}") from exc
            raise
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise BusUnavailable(f"schema registry {self._url} unreachable ({method} {path}): {exc}") from exc

    def id_for(self, subject: str, schema: Schema) -> int:
        text = _normalized(schema)
        cached = self._ids.get((subject, text))
        if cached is not None:
            return cached
        quoted = urllib.parse.quote(subject, safe="")
        path = f"/subjects/{quoted}/versions" if self._auto_register else f"/subjects/{quoted}"
        try:
            answer = self._call("POST", path, {"schema": text})
        except urllib.error.HTTPError as exc:
            raise ConfigError(
                f"schema registry {self._url} refused schema {full_name(schema)} for subject {subject!r} "
                f"(HTTP {exc.code}: {_error_text(exc)}); check the subject's compatibility setting "
                "or register the schema"
            ) from exc
        schema_id = int(answer["id"])
        self._ids[(subject, text)] = schema_id
        self._schemas.setdefault(schema_id, schema)
        logger.info("schema %s for subject %s has registry id %d", full_name(schema), subject, schema_id)
        return schema_id

    def schema_for(self, schema_id: int) -> Schema:
        schema = self._schemas.get(schema_id)
        if schema is not None:
            return schema
        if schema_id in self._unknown:
            raise EventDecodeError(f"unknown schema id {schema_id}: the schema registry {self._url} has no such id")
        try:
            answer = self._call("GET", f"/schemas/ids/{schema_id}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                if len(self._unknown) < _MAX_NEGATIVE_CACHE:
                    self._unknown.add(schema_id)
                raise EventDecodeError(
                    f"unknown schema id {schema_id}: the schema registry {self._url} has no such id"
                ) from exc
            raise BusUnavailable(f"schema registry {self._url} answered {exc.code} for id {schema_id}") from exc
        try:
            schema = json.loads(answer["schema"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EventDecodeError(f"schema id {schema_id} from {self._url} is not an Avro JSON schema") from exc
        if not isinstance(schema, dict):
            raise EventDecodeError(f"schema id {schema_id} from {self._url} is not a record schema")
        self._schemas[schema_id] = schema
        return schema


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("message", exc.reason))
    except (OSError, ValueError, AttributeError):
        return str(exc.reason)


def schema_ids_from_url(schema_registry_url: str | None) -> SchemaIds:
    """The registry at ``schema_registry_url``, or the bundled ids when it is None/empty."""
    return RegistrySchemaIds(schema_registry_url) if schema_registry_url else LocalSchemaIds.bundled()
