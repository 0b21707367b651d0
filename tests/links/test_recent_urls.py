"""RecentUrls: a bounded memory of emitted URLs, least recently seen evicted first."""

from __future__ import annotations

import pytest

from crawlstream.links import RecentUrls


def test_an_added_url_is_remembered() -> None:
    recent = RecentUrls(2)
    recent.add("http://a.example/")
    assert "http://a.example/" in recent
    assert "http://b.example/" not in recent


def test_the_least_recently_seen_url_is_evicted_first() -> None:
    recent = RecentUrls(2)
    recent.add("http://a.example/")
    recent.add("http://b.example/")
    assert "http://a.example/" in recent  # seen again: b is now the oldest
    recent.add("http://c.example/")
    assert "http://a.example/" in recent
    assert "http://b.example/" not in recent
    assert len(recent) == 2


def test_capacity_zero_remembers_nothing() -> None:
    recent = RecentUrls(0)
    recent.add("http://a.example/")
    assert "http://a.example/" not in recent and len(recent) == 0


def test_negative_capacity_is_rejected() -> None:
    with pytest.raises(ValueError, match="capacity"):
        RecentUrls(-1)
