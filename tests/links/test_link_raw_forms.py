"""A link's raw form (ADR 024): the absolute URL its href resolves to, before canonicalization.

It is what the deduper stores as the URL's first-seen form, and what ``/v1/url?url=`` is asked
with, so it must canonicalize to the link's URL exactly; a relative href that resolves to the
canonical URL itself has none (canonical links cost nothing).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
from pathlib import Path

import pytest

from crawlstream.errors import InvalidUrl
from crawlstream.links import decode_html, extract_links, resolve_href
from crawlstream.links._extract import _candidates
from crawlstream.urls import canonicalize

BASE = "http://example.com/dir/page.html"


def raws(html: str, base: str = BASE) -> list[tuple[str, str | None]]:
    return [(link.url, link.raw) for link in extract_links(html.encode("utf-8"), base, obey_directives=False)]


@pytest.mark.parametrize(
    ("href", "url", "raw"),
    [
        # resolves to the canonical URL: no raw form, however it was written
        ("other.html", "http://example.com/dir/other.html", None),
        ("../up", "http://example.com/up", None),
        ("./a/../b", "http://example.com/dir/b", None),  # dot segments go with resolution
        ("//example.com/x", "http://example.com/x", None),
        ("http://example.com/x", "http://example.com/x", None),
        # written non-canonically: the absolute form, case, port, fragment and order kept
        ("HTTP://EXAMPLE.com/x#top", "http://example.com/x", "HTTP://EXAMPLE.com/x#top"),
        ("/x#frag", "http://example.com/x", "http://example.com/x#frag"),
        ("?b=2&a=1", "http://example.com/dir/page.html?a=1&b=2", "http://example.com/dir/page.html?b=2&a=1"),
        ("//Cdn.Example.org:80/x", "http://cdn.example.org/x", "http://Cdn.Example.org:80/x"),
        ("https://example.com:443/%7euser", "https://example.com/~user", "https://example.com:443/%7euser"),
        ("http:rel#f", "http://example.com/dir/rel", "http://example.com/dir/rel#f"),  # same scheme: relative
        ("\\\\cdn.example.org\\x", "http://cdn.example.org/x", "http:\\\\cdn.example.org\\x"),
        ("sub\\leaf", "http://example.com/dir/sub/leaf", None),  # backslash = slash before the query
        (" /sp ace\t", "http://example.com/sp%20ace", "http://example.com/sp ace"),
    ],
)
def test_the_raw_form_is_the_resolved_href_before_canonicalization(href: str, url: str, raw: str | None) -> None:
    assert raws(f'<a href="{href}">x</a>') == [(url, raw)]
    if raw is not None:
        assert canonicalize(raw).url == url


def test_a_base_href_is_what_relative_hrefs_resolve_against() -> None:
    html = '<base href="https://Other.example.net/b/"><a href="x#1">1</a><a href="y">2</a>'
    assert raws(html) == [
        ("https://other.example.net/b/x", "https://other.example.net/b/x#1"),  # the base is canonical
        ("https://other.example.net/b/y", None),
    ]


def test_a_url_linked_twice_keeps_the_raw_form_of_its_first_link() -> None:
    assert raws('<a href="/x#one">1</a><a href="/x">2</a><a href="HTTP://example.com/x">3</a>') == [
        ("http://example.com/x", "http://example.com/x#one")
    ]
    assert raws('<a href="/x">1</a><a href="/x#one">2</a>') == [("http://example.com/x", None)]


def test_relative_links_of_an_unusable_page_url_are_dropped_with_its_reason() -> None:
    links = extract_links(b'<a href="rel">1</a><a href="http://ok.example/A">2</a>', "ftp://x/")
    assert [(link.url, link.raw) for link in links] == [("http://ok.example/A", None)]


def test_resolve_href_leaves_what_is_no_http_reference_for_canonicalize_to_reject() -> None:
    assert resolve_href(" mailto:a@b.c ", BASE) == "mailto:a@b.c"
    with pytest.raises(InvalidUrl):
        canonicalize(resolve_href("mailto:a@b.c", BASE))


def _real_pages(shared_data: Path, limit: int) -> list[tuple[bytes, str]]:
    root = shared_data / "html"
    with open(root / "manifest.csv", newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["url"]]
    return [(gzip.decompress((root / r["file"]).read_bytes()), r["url"]) for r in rows[:: max(1, len(rows) // limit)]]


def test_on_real_pages_links_are_those_canonicalize_gives_and_each_raw_form_maps_to_its_link(
    shared_data: Path,
) -> None:
    """Resolving first changed no link: every URL is ``canonicalize(href, base=page)``'s (the
    resolution before this change), and every raw form canonicalizes to its link's URL."""
    checked = with_raw = 0
    for html, page_url in _real_pages(shared_data, 60):
        base_href, candidates = _candidates(decode_html(html, None))
        base = page_url
        if base_href is not None and base_href.strip():
            with contextlib.suppress(InvalidUrl):  # a bad <base> is ignored, as the extractor does
                base = canonicalize(base_href.strip(), base=page_url).url
        expected: list[str] = []
        for href, _rel in candidates:
            text = href.strip(" \t\n\r\f")
            if not text or text[0] == "#":
                continue
            try:
                url = canonicalize(text, base=base).url
            except InvalidUrl:
                continue
            if url not in expected:
                expected.append(url)
        links = extract_links(html, page_url, obey_directives=False)
        assert [link.url for link in links] == expected, page_url
        for link in links:
            checked += 1
            if link.raw is not None:
                with_raw += 1
                assert canonicalize(link.raw).url == link.url, (page_url, link)
                assert link.raw.lower().startswith(("http:", "https:")), link.raw
    assert checked > 2000 and 0 < with_raw < checked
