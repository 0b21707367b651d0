"""The Avro event codec under hostile bytes: only EventDecodeError escapes, any event round-trips.

tests/events/test_codec.py already feeds random bodies and flips single bytes of one
FetchResult; this adds every event type, generated events, structured mutations (length
fields, inserted and deleted bytes), every truncation, foreign magic bytes and any schema id.
"""

from __future__ import annotations

from typing import Any

import pytest
from adversarial_support import ADVERSARIAL, mutated, truncated
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlstream.errors import EventDecodeError
from crawlstream.events import (
    EVENT_TYPES,
    MAGIC_BYTE,
    ContentLocation,
    ContentStored,
    DiscoveredUrl,
    EventCodec,
    FetchRequest,
    FetchResult,
    LocalSchemaIds,
    UrlRecord,
)

pytestmark = pytest.mark.timeout(60)

CODEC = EventCodec(LocalSchemaIds.bundled())
KNOWN_IDS = {1, 2, 3, 4, 5}

_INT = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
_LONG = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
_TEXT = st.text(max_size=40)
_OPT_TEXT = st.none() | _TEXT
_DOUBLE = st.floats(allow_nan=False)  # NaN round-trips but is never == itself
_MAP = st.dictionaries(_TEXT, _TEXT, max_size=3)

EVENTS: st.SearchStrategy[Any] = st.one_of(
    st.builds(
        DiscoveredUrl,
        url=_TEXT,
        domain=_TEXT,
        url_key=_LONG,
        depth=_INT,
        discovered_at_ms=_LONG,
        source=_TEXT,
        source_url=_OPT_TEXT,
        dataset_id=st.none() | _INT,
        priority=st.none() | _INT,
    ),
    st.builds(
        FetchRequest,
        url=_TEXT,
        url_key=_LONG,
        domain=_TEXT,
        depth=_INT,
        attempt=_INT,
        requested_at_ms=_LONG,
        max_body_bytes=st.none() | _LONG,
        dataset_id=st.none() | _INT,
    ),
    st.builds(
        FetchResult,
        url=_TEXT,
        url_key=_LONG,
        domain=_TEXT,
        depth=_INT,
        status=_INT,
        outcome=_TEXT,
        fetched_at_ms=_LONG,
        elapsed_ms=_INT,
        attempt=_INT,
        error=_OPT_TEXT,
        final_url=_OPT_TEXT,
        redirect_location=_OPT_TEXT,
        content_type=_OPT_TEXT,
        headers=_MAP,
        body_zstd=st.binary(max_size=64),
        body_size_bytes=_LONG,
        truncated=st.booleans(),
        dataset_id=st.none() | _INT,
        retry_after_s=st.none() | _DOUBLE,
        crawl_delay_s=st.none() | _DOUBLE,
    ),
    st.builds(
        ContentStored,
        url=_TEXT,
        url_key=_LONG,
        domain=_TEXT,
        content_hash=_TEXT,
        location=st.builds(ContentLocation, segment=_TEXT, offset=_LONG, length=_LONG, dict_id=_INT, tier=_TEXT),
        size_bytes=_LONG,
        stored_bytes=_LONG,
        status=_INT,
        fetched_at_ms=_LONG,
        content_type=_OPT_TEXT,
        title=_OPT_TEXT,
        dataset_id=st.none() | _INT,
    ),
    st.builds(UrlRecord, dataset_id=_INT, url=_TEXT, ts_ms=st.none() | _LONG, extras=_MAP, domain=_OPT_TEXT),
)


def _decodes_or_rejects(value: bytes) -> None:
    """The property: a value is an event, or the codec says EventDecodeError; nothing else."""
    try:
        event = CODEC.decode(value)
    except EventDecodeError:
        return
    assert type(event) in EVENT_TYPES.values()


@settings(ADVERSARIAL, max_examples=250)
@given(EVENTS)
def test_any_event_of_any_type_round_trips(event: Any) -> None:
    assert CODEC.decode(CODEC.encode(event), type(event)) == event


@settings(ADVERSARIAL, max_examples=400)
@given(st.data(), EVENTS)
def test_mutated_values_decode_or_raise_event_decode_error(data: st.DataObject, event: Any) -> None:
    _decodes_or_rejects(data.draw(mutated(CODEC.encode(event))))


@settings(ADVERSARIAL, max_examples=200)
@given(st.data(), EVENTS)
def test_truncated_values_raise_event_decode_error(data: st.DataObject, event: Any) -> None:
    """Avro has no end marker, but a cut value leaves the last field short (or the header)."""
    value = data.draw(truncated(CODEC.encode(event)))
    with pytest.raises(EventDecodeError):
        CODEC.decode(value)


@settings(ADVERSARIAL, max_examples=300)
@given(st.sampled_from(sorted(KNOWN_IDS)), st.binary(max_size=300))
def test_arbitrary_bodies_under_every_known_schema_id_decode_or_raise(schema_id: int, body: bytes) -> None:
    _decodes_or_rejects(bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + body)


@settings(ADVERSARIAL, max_examples=100)
@given(st.integers(min_value=1, max_value=255), st.binary(max_size=40))
def test_any_magic_byte_but_zero_is_rejected(magic: int, rest: bytes) -> None:
    with pytest.raises(EventDecodeError):
        CODEC.decode(bytes([magic]) + rest)


@settings(ADVERSARIAL, max_examples=100)
@given(st.integers(min_value=0, max_value=0xFFFFFFFF).filter(lambda i: i not in KNOWN_IDS), st.binary(max_size=40))
def test_unknown_schema_ids_are_rejected(schema_id: int, body: bytes) -> None:
    with pytest.raises(EventDecodeError, match="unknown schema id"):
        CODEC.decode(b"\x00" + schema_id.to_bytes(4, "big") + body)


# Avro longs are zig-zag varints: runs of continuation bytes overflow 64 bits, and a
# length-prefixed string or map can claim far more items or bytes than the value holds.
_HOSTILE_VARINTS = [b"\xff" * 10 + b"\x01", b"\x80" * 12, b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x01"]


@settings(ADVERSARIAL, max_examples=150)
@given(
    st.sampled_from(sorted(KNOWN_IDS)),
    st.lists(st.sampled_from(_HOSTILE_VARINTS) | st.binary(max_size=6), min_size=1, max_size=8),
)
def test_overflowing_varints_and_huge_length_prefixes_are_rejected(schema_id: int, parts: list[bytes]) -> None:
    _decodes_or_rejects(b"\x00" + schema_id.to_bytes(4, "big") + b"".join(parts))


@settings(ADVERSARIAL, max_examples=150)
@given(st.data(), EVENTS, st.sampled_from(sorted(KNOWN_IDS)))
def test_a_value_relabelled_with_another_schema_id_decodes_or_is_rejected(
    data: st.DataObject, event: Any, schema_id: int
) -> None:
    """The schema id says which writer schema to read with: a wrong id must not crash the reader."""
    value = CODEC.encode(event)
    _decodes_or_rejects(b"\x00" + schema_id.to_bytes(4, "big") + value[5:])
