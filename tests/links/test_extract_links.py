"""Link extraction on hand-written and real pages: resolution, base href, refresh, charsets, drops."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from crawlstream.links import (
    ExtractedLink,
    Scope,
    decode_html,
    extract_links,
    extract_links_with_stats,
    parse_refresh,
    sniff_charset,
)
from crawlstream.urls import canonicalize

BASE = "http://example.com/dir/page.html"


def urls(html: bytes | str, base: str = BASE, **kw: str) -> list[str]:
    data = html.encode("utf-8") if isinstance(html, str) else html
    return [link.url for link in extract_links(data, base, **kw)]


def test_relative_links_resolve_against_the_page_url() -> None:
    html = (
        '<a href="other.html">1</a><a href="../up">2</a>'
        '<a href="/root?b=2&a=1">3</a><a href="//cdn.example.org/x">4</a>'
    )
    assert urls(html) == [
        "http://example.com/dir/other.html",
        "http://example.com/up",
        "http://example.com/root?a=1&b=2",
        "http://cdn.example.org/x",
    ]


def test_base_href_changes_the_base_for_every_link_even_earlier_ones() -> None:
    html = (
        '<html><head><link rel="canonical" href="c"><base href="https://other.example.net/b/"></head><a href="x">x</a>'
    )
    assert urls(html) == ["https://other.example.net/b/c", "https://other.example.net/b/x"]


def test_relative_base_href_is_resolved_against_the_page() -> None:
    assert urls('<base href="/sub/"><a href="x">x</a>') == ["http://example.com/sub/x"]


def test_only_the_first_base_href_counts() -> None:
    assert urls('<base href="/one/"><base href="/two/"><a href="x">x</a>') == ["http://example.com/one/x"]


def test_all_link_kinds_are_extracted_with_their_rel() -> None:
    html = (
        '<head><link rel="canonical" href="/c"><link rel="alternate" hreflang="de" href="/de">'
        '<link rel="stylesheet" href="/style.css"><meta http-equiv="Refresh" content="5; URL=/r"></head>'
        '<body><a href="/a">a</a><map><area href="/area"></map></body>'
    )
    assert extract_links(html.encode(), BASE) == [
        ExtractedLink("http://example.com/c", "canonical"),
        ExtractedLink("http://example.com/de", "alternate"),
        ExtractedLink("http://example.com/r", "refresh"),
        ExtractedLink("http://example.com/a", "a"),
        ExtractedLink("http://example.com/area", "area"),
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("0; url=/next", "/next"),
        ("5;URL='http://x.example/'", "http://x.example/"),
        ('3, url="a b"', "a b"),
        ("0;/bare", "/bare"),
        ("  10  ;  url =  /spaced  ", "/spaced"),
        ("30", None),
        ("", None),
    ],
)
def test_meta_refresh_content_variants(content: str, expected: str | None) -> None:
    assert parse_refresh(content) == expected


def test_non_http_schemes_fragments_and_empty_hrefs_are_dropped_and_counted() -> None:
    html = (
        '<a href="javascript:void(0)">j</a><a href="JavaScript:x">J</a><a href="mailto:a@b.c">m</a>'
        '<a href="tel:+1">t</a><a href="ftp://f.example/x">f</a><a href="#top">#</a><a href="">e</a>'
        '<a href="http://[bad">bad</a><a href="/ok">ok</a><a href="/ok#frag">dup</a><a href="data:text/html,x">d</a>'
    )
    result = extract_links_with_stats(html.encode(), BASE)
    assert [link.url for link in result.links] == ["http://example.com/ok"]
    assert result.dropped["scheme"] == 6
    assert result.dropped["fragment"] == 1
    assert result.dropped["empty"] == 1
    assert result.dropped["duplicate"] == 1
    assert sum(result.dropped.values()) == 10


def test_duplicates_keep_the_first_occurrence_and_its_rel() -> None:
    html = '<a href="/x">1</a><link rel="canonical" href="/x"><a href="/y">2</a><a href="HTTP://EXAMPLE.com:80/x">3</a>'
    assert extract_links(html.encode(), BASE) == [
        ExtractedLink("http://example.com/x", "a"),
        ExtractedLink("http://example.com/y", "a"),
    ]


def test_whitespace_around_hrefs_is_ignored() -> None:
    assert urls('<a href="\n  /spaced \t">x</a>') == ["http://example.com/spaced"]


def test_links_inside_template_and_comments_are_not_links() -> None:
    assert urls('<template><a href="/t">t</a></template><!-- <a href="/c">c</a> --><a href="/real">r</a>') == [
        "http://example.com/real"
    ]


def test_charset_from_content_type_wins_over_meta() -> None:
    body = '<meta charset="utf-8"><a href="/caf\u00e9">x</a>'.encode("cp1252")
    assert urls(body, content_type="text/html; charset=windows-1252") == ["http://example.com/caf%C3%A9"]


def test_charset_from_meta_is_used_without_header() -> None:
    body = '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><a href="/\u00fcber">x</a>'
    assert urls(body.encode("latin-1")) == ["http://example.com/%C3%BCber"]
    assert sniff_charset(body.encode("latin-1")) == ("cp1252", "meta")


def test_bom_wins_over_header_and_meta() -> None:
    body = "\ufeff<meta charset='latin-1'><a href='/\u00e9t\u00e9'>x</a>".encode("utf-16-le")
    assert sniff_charset(body, "text/html; charset=iso-8859-1") == ("utf-16-le", "bom")
    assert urls(body, content_type="text/html; charset=iso-8859-1") == ["http://example.com/%C3%A9t%C3%A9"]


def test_undecodable_bytes_and_unknown_charsets_fall_back_to_utf8_with_replacement() -> None:
    body = b'<meta charset="x-no-such-charset"><a href="/ok">\xff\xfe</a>'
    assert sniff_charset(body) == ("utf-8", "default")
    assert "\ufffd" in decode_html(body)
    assert urls(body) == ["http://example.com/ok"]


def test_scope_limits_domains_and_depth() -> None:
    scope = Scope(frozenset({"example.com"}), max_depth=2)
    assert scope.allows("http://www.example.com/a", 2)
    assert scope.allows(canonicalize("https://sub.example.com/"), 0)
    assert not scope.allows("http://example.org/a", 0)
    assert not scope.allows("http://example.com/a", 3)
    assert Scope().allows("http://anything.example/", 10_000)


def _real_pages(shared_data: Path, limit: int) -> list[tuple[bytes, str]]:
    root = shared_data / "html"
    with open(root / "manifest.csv", newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["url"]]
    return [(gzip.decompress((root / r["file"]).read_bytes()), r["url"]) for r in rows[:: max(1, len(rows) // limit)]]


def test_real_pages_produce_canonical_http_links(shared_data: Path) -> None:
    pages = _real_pages(shared_data, 40)
    with_links = 0
    for html, url in pages:
        links = extract_links(html, url)
        with_links += bool(links)
        for link in links:
            assert link.url.startswith(("http://", "https://"))
            assert canonicalize(link.url).url == link.url
        assert len({link.url for link in links}) == len(links)
    assert with_links >= len(pages) * 0.95


def test_swde_pages_honour_their_base_href(shared_data: Path) -> None:
    """SWDE pages start with <base href=URL>: relative links resolve against it, not the file's URL."""
    root = shared_data / "html"
    with open(root / "manifest.csv", newline="", encoding="utf-8") as fh:
        row = next(r for r in csv.DictReader(fh) if r["file"].startswith("swde/"))
    html = gzip.decompress((root / row["file"]).read_bytes())
    links = extract_links(html, "http://placeholder.invalid/")
    assert links and not any("placeholder.invalid" in link.url for link in links)
    assert any("booksamillion.com" in link.url for link in links)
