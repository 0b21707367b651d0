"""The migrator's fast paths (ADR 017, "Throughput work, session 7"): the collector settings it
runs under are put back whatever happens, and a URL value that does not canonicalize is
counted under the reason the report has always used."""

from __future__ import annotations

import gc

import pytest

from crawlstream.errors import InvalidUrl
from crawlstream.migrate import few_collections
from crawlstream.migrate._migrator import _invalid_url_reason
from crawlstream.urls import canonicalize


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_few_collections_freezes_then_restores_the_collector() -> None:
    before, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    with few_collections(young=123_456):
        assert gc.get_threshold() == (123_456, *before[1:])
        assert gc.get_freeze_count() > frozen_before
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle made inside is still collectable
        del a, b
        assert gc.collect() >= 2
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_few_collections_restores_the_collector_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), few_collections():
        raise RuntimeError("a store failed mid-batch")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


@pytest.mark.parametrize(
    "value, reason",
    [
        (None, "missing"),
        (42, "not_text"),
        (b"http://a.example/", "not_text"),
        ("", "blank"),
        (" \t\n", "blank"),
        ("ftp://a.example/", "scheme"),
        ("http://exa mple.com/", "host"),
        ("http://a.example:99999/", "port"),
    ],
)
def test_a_url_value_that_does_not_canonicalize_is_counted_by_reason(value: object, reason: str) -> None:
    with pytest.raises(InvalidUrl) as caught:
        canonicalize(value)  # type: ignore[arg-type]
    assert _invalid_url_reason(value, caught.value) == reason
