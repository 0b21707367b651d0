"""The sitemap parser on good, odd and hostile input; which sitemaps a robots.txt names."""

from __future__ import annotations

import gzip
import http.server
import resource
import threading
import time
import zlib
from collections.abc import Iterator

import pytest

from crawlstream.robots import RobotsPolicy
from crawlstream.sitemaps import (
    MAX_ROBOTS_SITEMAPS,
    SitemapEntry,
    SitemapError,
    looks_like_sitemap,
    parse_lastmod,
    parse_sitemap,
    robots_sitemaps,
)

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
BASE = "http://a.com/sitemap.xml"


def urlset(*entries: str, root: str = "urlset", item: str = "url") -> bytes:
    body = "".join(f"<{item}>{e}</{item}>" for e in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?><{root} xmlns="{NS}">{body}</{root}>'.encode()


def reason_of(body: bytes, **kw: int) -> str:
    with pytest.raises(SitemapError) as info:
        parse_sitemap(body, BASE, **kw)
    return info.value.reason


# -- what a sitemap says ------------------------------------------------------------


def test_a_urlset_yields_canonical_urls_in_order_with_lastmod() -> None:
    got = parse_sitemap(
        urlset(
            "<loc> HTTP://A.com:80/x#f </loc><lastmod>2024-05-01T10:00:00+02:00</lastmod>",
            "<loc>http://a.com/y</loc><lastmod>2024-05</lastmod><changefreq>daily</changefreq>",
        ),
        BASE,
    )
    assert got.kind == "urlset"
    assert got.entries == [
        SitemapEntry("http://a.com/x", parse_lastmod("2024-05-01T08:00:00Z")),
        SitemapEntry("http://a.com/y", parse_lastmod("2024-05-01")),
    ]


def test_a_sitemap_index_yields_its_sitemaps_and_gzip_is_read_alike() -> None:
    doc = urlset("<loc>http://a.com/s1.xml.gz</loc>", "<loc>http://a.com/s2.xml</loc>", root="sitemapindex",
                 item="sitemap")
    plain, gzipped = parse_sitemap(doc, BASE), parse_sitemap(gzip.compress(doc), BASE)
    assert plain == gzipped and plain.kind == "sitemapindex"
    assert [e.url for e in plain.entries] == ["http://a.com/s1.xml.gz", "http://a.com/s2.xml"]


def test_extension_elements_and_other_namespaces_are_not_urls() -> None:
    doc = (
        f'<urlset xmlns="{NS}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        "<url><loc>http://a.com/p</loc><image:image><image:loc>http://a.com/i.png</image:loc></image:image></url>"
        "<image:loc>http://a.com/j.png</image:loc></urlset>"
    ).encode()
    assert [e.url for e in parse_sitemap(doc, BASE).entries] == ["http://a.com/p"]


def test_bad_entries_are_counted_and_the_rest_kept() -> None:
    got = parse_sitemap(
        urlset(
            "<loc>http://a.com/1</loc><lastmod>yesterday</lastmod>",
            "<loc>http://a.com/1</loc>",
            "<loc>javascript:alert(1)</loc>",
            "<loc>relative/path</loc>",
            "<lastmod>2024-01-01</lastmod>",
            "<loc>http://a.com/" + "x" * 5000 + "</loc>",
        ),
        BASE,
    )
    assert got.entries == [SitemapEntry("http://a.com/1", None)]
    assert got.dropped["bad_lastmod"] == 1 and got.dropped["duplicate"] == 1 and got.dropped["no_loc"] == 1
    assert got.dropped["long_loc"] == 1 and sum(got.dropped.values()) == 6


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024", "2024-01-01T00:00:00+00:00"),
        ("2024-02-29", "2024-02-29T00:00:00+00:00"),
        ("2024-02-29T23:30Z", "2024-02-29T23:30:00+00:00"),
        ("2024-02-29T23:30:15.5-05:00", "2024-03-01T04:30:15+00:00"),
    ],
)
def test_lastmod_reads_w3c_datetime(text: str, iso: str) -> None:
    from datetime import datetime

    assert parse_lastmod(text) == int(datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.mark.parametrize("text", ["2024-13-01", "2023-02-29", "24-01-01", "2024-01-01T25:00Z", "soon", ""])
def test_lastmod_that_is_no_date_is_none(text: str) -> None:
    assert parse_lastmod(text) is None


def test_urls_past_the_cap_are_counted_and_dropped() -> None:
    doc = urlset(*(f"<loc>http://a.com/{i}</loc>" for i in range(120)))
    got = parse_sitemap(doc, BASE, max_urls=100)
    assert len(got.entries) == 100 and got.dropped["over_max_urls"] == 20


@pytest.mark.parametrize(
    ("content_type", "url", "expected"),
    [
        ("application/xml; charset=utf-8", "http://a.com/s", True),
        ("text/xml", "http://a.com/s", True),
        ("application/x-gzip", "http://a.com/s", True),
        ("application/octet-stream", "http://a.com/s.xml.gz", True),
        (None, "http://a.com/sitemap.xml?x=1", True),
        ("text/html", "http://a.com/sitemap.xml", False),
        ("image/png", "http://a.com/s.gz", False),
        ("application/octet-stream", "http://a.com/file.bin", False),
    ],
)
def test_what_is_worth_parsing_as_a_sitemap(content_type: str | None, url: str, expected: bool) -> None:
    assert looks_like_sitemap(content_type, url) is expected


# -- hostile input: refused whole, cheaply ----------------------------------------------


def test_billion_laughs_is_refused_before_any_expansion() -> None:
    laughs = "".join(f'<!ENTITY l{k} "{f"&l{k - 1};" * 10}">' for k in range(1, 10))
    doc = (
        f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY l0 "lol">{laughs}]>'
        f'<urlset xmlns="{NS}"><url><loc>http://a.com/ok</loc></url><url><loc>&l9;</loc></url></urlset>'
    ).encode()
    started = time.process_time()
    assert reason_of(doc) == "dtd"
    assert time.process_time() - started < 0.05  # 10^9 "lol"s were never built


@pytest.fixture
def listener() -> Iterator[list[str]]:
    """A loopback HTTP server recording every path asked of it (an external entity's target)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<!ENTITY leak 'x'>")

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.append(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("kind", ["file", "http", "parameter"])
def test_external_entities_are_refused_and_never_fetched(kind: str, listener: list[str]) -> None:
    origin = listener.pop(0)
    target = "file:///etc/passwd" if kind == "file" else f"{origin}/xxe"
    if kind == "parameter":
        dtd = f'<!DOCTYPE urlset [<!ENTITY % ext SYSTEM "{origin}/param"> %ext;]>'
    else:
        dtd = f'<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "{target}">]>'
    doc = f'<?xml version="1.0"?>{dtd}<urlset xmlns="{NS}"><url><loc>&xxe;</loc></url></urlset>'.encode()
    assert reason_of(doc) == "dtd"
    assert listener == []


def test_an_undeclared_entity_is_malformed() -> None:
    assert reason_of(urlset("<loc>http://a.com/&nope;</loc>")) == "malformed"


def test_a_gzip_bomb_stops_at_the_cap_in_bounded_time_and_memory() -> None:
    decoded = 256 * 1024 * 1024  # 256 MiB of whitespace inside a valid urlset: ~250 KB on the wire
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [comp.compress(f'<urlset xmlns="{NS}">'.encode())]
    block = b" " * (8 * 1024 * 1024)
    parts += [comp.compress(block) for _ in range(decoded // len(block))]
    bomb = b"".join(parts) + comp.compress(b"<url><loc>http://a.com/x</loc></url></urlset>") + comp.flush()
    assert len(bomb) < 2 * 1024 * 1024
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    assert reason_of(bomb, max_bytes=8 * 1024 * 1024) == "too_large"
    assert time.process_time() - started < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 * 1024  # KiB: < 64 MiB grown


def test_a_bomb_under_the_protocols_cap_is_refused_by_its_ratio_with_what_it_inflated() -> None:
    """48 MiB of spaces gzip to ~50 KB: refused by ratio ~1 MiB in, not after 48 MiB."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = comp.compress(f'<urlset xmlns="{NS}">'.encode() + b" " * (48 * 1024 * 1024)) + comp.flush()
    with pytest.raises(SitemapError) as caught:
        parse_sitemap(bomb, BASE)
    assert caught.value.reason == "too_large" and "decompression bomb" in str(caught.value)
    inflated = int(str(caught.value).split(" inflated")[0].rsplit(" ", 1)[1])
    assert inflated <= 2 * 1024 * 1024  # stopped within a chunk of the ratio floor


def test_a_real_sized_gzip_sitemap_of_sequential_urls_is_under_the_ratio_and_parses() -> None:
    doc = urlset(*(f"<loc>http://a.com/product/{i:06d}</loc><lastmod>2024-01-01</lastmod>" for i in range(50_000)))
    body = gzip.compress(doc, 9)
    assert len(doc) > 2 * 1024 * 1024 and len(doc) / len(body) < 100
    assert len(parse_sitemap(body, BASE).entries) == 50_000


def test_a_plain_document_over_the_cap_is_refused() -> None:
    doc = urlset(*(f"<loc>http://a.com/{i}</loc>" for i in range(2000)))
    assert reason_of(doc, max_bytes=len(doc) - 1) == "too_large"
    assert len(parse_sitemap(doc, BASE, max_bytes=len(doc)).entries) == 2000


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (urlset("<loc>http://a.com/x</loc>")[:-12], "malformed"),  # cut short
        (b"<urlset><url><loc>http://a.com/x</loc></urlset>", "malformed"),
        (b"", "malformed"),
        (b"\x00" * 1000, "malformed"),
        (b"\xff\xfe<\x00u\x00", "malformed"),
        ("<urlset><url><loc>http://a.com/\u00e9</loc></url></urlset>".encode("latin-1"), "malformed"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (gzip.compress(urlset("<loc>http://a.com/x</loc>"))[:-10], "gzip"),
        (b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>', "not_sitemap"),
        (b"<html><body>not found</body></html>", "not_sitemap"),
    ],
)
def test_broken_documents_yield_nothing_and_say_why(body: bytes, reason: str) -> None:
    assert reason_of(body) == reason


def test_a_document_malformed_after_good_entries_yields_none_of_them() -> None:
    doc = urlset(*(f"<loc>http://a.com/{i}</loc>" for i in range(10)))[:-5] + b"<oops"
    assert reason_of(doc) == "malformed"


# -- which sitemaps a host names ------------------------------------------------------


def test_robots_sitemap_lines_are_taken_as_written_and_deduplicated() -> None:
    policy = RobotsPolicy.parse(
        "User-agent: *\nDisallow: /x\nSitemap: http://a.com/s1.xml\nSitemap: http://cdn.b.com/s2.xml.gz\n"
        "Sitemap: http://a.com/s1.xml\n"
    )
    assert robots_sitemaps("http://a.com", policy) == ("http://a.com/s1.xml", "http://cdn.b.com/s2.xml.gz")


def test_without_sitemap_lines_the_host_sitemap_xml_is_tried() -> None:
    assert robots_sitemaps("http://a.com", RobotsPolicy.parse("User-agent: *\nDisallow:\n")) == (
        "http://a.com/sitemap.xml",
    )
    allow_all = RobotsPolicy.from_response(404, b"", error_backoff_s=1.0)
    assert robots_sitemaps("https://b.com:8443", allow_all) == ("https://b.com:8443/sitemap.xml",)


def test_a_host_that_disallows_everything_has_no_sitemap() -> None:
    assert robots_sitemaps("http://a.com", RobotsPolicy.from_response(503, b"", error_backoff_s=1.0)) == ()


def test_a_robots_txt_naming_thousands_of_sitemaps_is_capped() -> None:
    text = "".join(f"Sitemap: http://a.com/s{i}.xml\n" for i in range(5000))
    assert len(robots_sitemaps("http://a.com", RobotsPolicy.parse(text))) == MAX_ROBOTS_SITEMAPS
