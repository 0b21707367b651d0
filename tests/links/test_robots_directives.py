"""Page robots directives: <meta name=robots|our token>, X-Robots-Tag and rel=nofollow."""

from __future__ import annotations

import pytest

from crawlstream.links import (
    RobotsDirectives,
    extract_links_with_stats,
    page_directives,
    parse_robots_content,
    parse_x_robots_tag,
)

BASE = "http://a.com/page"


def _page(head: str = "", body: str = "") -> bytes:
    return f"<!doctype html><html><head><title>t</title>{head}</head><body>{body}</body></html>".encode()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("noindex", {"noindex"}),
        ("NOINDEX, NoFollow", {"noindex", "nofollow"}),
        ("none", {"noindex", "nofollow"}),
        ("index, follow, noarchive", set()),
        ("index, noindex", {"noindex"}),  # the more restrictive wins
        ("", set()),
    ],
)
def test_meta_robots_content_is_read_case_insensitively(content: str, expected: set[str]) -> None:
    assert parse_robots_content(content) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("noindex", {"noindex"}),
        ("crawlstream: nofollow", {"nofollow"}),
        ("CrawlStream: none", {"noindex", "nofollow"}),
        ("otherbot: noindex, nofollow", set()),  # the prefix holds to the end of the value
        ("otherbot: noindex, crawlstream: nofollow", {"nofollow"}),  # two headers, joined
        ("noindex, otherbot: nofollow", {"noindex"}),
        ("max-snippet: 20, noindex", {"noindex"}),  # a valued directive is not an agent
        ("unavailable_after: Monday, 25-Jun-2030 15:00:00 PST, nofollow", {"nofollow"}),
    ],
)
def test_x_robots_tag_applies_unprefixed_and_our_prefixed_directives(header: str, expected: set[str]) -> None:
    assert parse_x_robots_tag(header, "crawlstream") == expected


def test_meta_for_robots_and_for_our_token_count_and_others_do_not() -> None:
    page = _page('<meta name="otherbot" content="noindex"><meta name="CRAWLSTREAM" content="nofollow">')
    assert page_directives(page, content_type="text/html", x_robots_tag=None) == RobotsDirectives(nofollow="meta")
    assert page_directives(page, content_type="text/html", x_robots_tag=None, agent="otherbot") == RobotsDirectives(
        noindex="meta"
    )


def test_both_sources_are_recorded() -> None:
    page = _page('<meta name="robots" content="noindex">')
    got = page_directives(page, content_type="text/html", x_robots_tag="noindex, nofollow")
    assert got.as_map() == {"noindex": "meta,x-robots-tag", "nofollow": "x-robots-tag"}


def test_a_meta_tag_in_the_body_or_past_the_head_scan_is_not_a_directive() -> None:
    in_body = _page(body='<p>text</p><meta name="robots" content="noindex">')
    assert not page_directives(in_body, content_type="text/html", x_robots_tag=None)
    late = ("<html><head>" + "<!-- x -->" * 10_000 + '<meta name="robots" content="noindex"></head>').encode()
    assert not page_directives(late, content_type="text/html", x_robots_tag=None)


def test_non_html_reads_only_the_header() -> None:
    pdf = b'%PDF-1.4 <meta name="robots" content="noindex">'
    assert page_directives(pdf, content_type="application/pdf", x_robots_tag=None, html=False) == RobotsDirectives()
    assert page_directives(pdf, content_type="application/pdf", x_robots_tag="noindex", html=False).noindex


def test_rel_nofollow_links_are_dropped_and_counted_but_the_same_url_linked_plainly_is_kept() -> None:
    page = _page(
        body='<a rel="nofollow" href="/x">x</a><a rel="external NoFollow" href="/y">y</a>'
        '<area rel="ugc nofollow" href="/z"><a href="/x">again</a><a rel="noopener" href="/w">w</a>'
    )
    got = extract_links_with_stats(page, BASE)
    assert [link.url for link in got.links] == ["http://a.com/x", "http://a.com/w"]
    assert got.dropped["nofollow"] == 3


def test_a_nofollow_page_yields_only_its_meta_refresh() -> None:
    page = _page('<meta name="robots" content="nofollow"><meta http-equiv="refresh" content="0; url=/next">',
                 '<a href="/x">x</a><link rel="canonical" href="/c">')
    got = extract_links_with_stats(page, BASE)
    assert [(link.url, link.rel) for link in got.links] == [("http://a.com/next", "refresh")]
    assert got.directives.nofollow == "meta" and got.dropped["page_nofollow"] == 2


def test_x_robots_tag_nofollow_for_us_stops_the_links() -> None:
    page = _page(body='<a href="/x">x</a>')
    assert extract_links_with_stats(page, BASE, x_robots_tag="otherbot: nofollow").links
    assert not extract_links_with_stats(page, BASE, x_robots_tag="crawlstream: nofollow").links


def test_directives_ignored_when_told_so() -> None:
    page = _page('<meta name="robots" content="none">', '<a rel="nofollow" href="/x">x</a><a href="/y">y</a>')
    got = extract_links_with_stats(page, BASE, x_robots_tag="nofollow", obey_directives=False)
    assert [link.url for link in got.links] == ["http://a.com/x", "http://a.com/y"]
    assert not got.directives
