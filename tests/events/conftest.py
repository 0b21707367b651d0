"""Fixtures of the event tests."""

from __future__ import annotations

import pytest

from crawlstream.events import EventCodec, LocalSchemaIds


@pytest.fixture
def codec() -> EventCodec:
    """The codec as a service builds it without SCHEMA_REGISTRY_URL (ids from registry.json)."""
    return EventCodec(LocalSchemaIds.bundled())
