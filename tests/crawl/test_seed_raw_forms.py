"""Seeds keep the form they were written in (ADR 024): ``read_seeds(raw=True)``, the seed
events' ``raw_url`` and the raw-forms rows ``send_seeds`` adds for the alias map."""

from __future__ import annotations

from pathlib import Path

from crawlstream.crawl import read_seeds, seed_events
from crawlstream.crawl._seeds import raw_form_records
from crawlstream.events import UrlRecord
from crawlstream.lake import RAW_FORMS_DATASET


def test_seed_lines_keep_their_first_written_form(tmp_path: Path) -> None:
    f = tmp_path / "seeds.txt"
    f.write_text("  HTTP://Example.COM/a#x  \nhttp://example.com/a\nhttp://b.org/\nnot a url\n")
    assert read_seeds([str(f)], raw=True) == ["HTTP://Example.COM/a#x", "http://b.org/"]
    assert read_seeds([str(f)]) == ["http://example.com/a", "http://b.org/"]


def test_a_non_canonical_seed_carries_its_raw_form_and_gets_a_raw_forms_row() -> None:
    lines = ["HTTP://Example.COM/a#x", "http://b.org/"]
    events = seed_events(lines, 7, 1)
    assert [(e.url, e.raw_url) for e in events] == [
        ("http://example.com/a", "HTTP://Example.COM/a#x"),
        ("http://b.org/", None),
    ]
    assert raw_form_records(lines, 7) == [
        UrlRecord(RAW_FORMS_DATASET, "HTTP://Example.COM/a#x", 7, {"raw": "HTTP://Example.COM/a#x", "source": "seed"},
                  "example.com")
    ]
