"""URL canonicalization on hostile input: only InvalidUrl escapes, and what it returns is canonical.

tests/urls/test_url_properties.py covers well-formed URLs and short random text; this adds
URLs assembled from the parts parsers trip over (userinfo, IP literals in every radix,
IDNA and mixed scripts, percent escapes, dot segments, backslashes, C0 and whitespace,
huge ports, overlong labels) and relative references resolved against such bases.
"""

from __future__ import annotations

import pytest
from adversarial_support import ADVERSARIAL
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawlstream.errors import InvalidDomain, InvalidUrl
from crawlstream.urls import (
    MAX_HOST_LENGTH,
    MAX_URL_LENGTH,
    CanonicalUrl,
    canonicalize,
    domain_checksum,
    key_checksum,
    registered_domain,
    url_key,
)

pytestmark = pytest.mark.timeout(60)

# Weighted towards what gets past the scheme check, so most examples reach the host parser.
_SCHEMES = st.sampled_from(["http"] * 4 + ["https"] * 4 + ["HTTP", "hTtPs", "ftp", "javascript", "http+x", "", "h"])
_SEPARATORS = st.sampled_from(["://", "://", "://", ":", ":/", ":///", ":\\\\", ":/\\", "://\t", ": //", "://\n"])
_USERINFO = st.sampled_from(["", "user@", "u:p@", "@", "a@b@", "%40@", "user:pa:ss@", "::@", "[::1]@"])
_HOST_ATOMS = st.sampled_from(
    [
        "example.com",
        "EXAMPLE.CoM",
        "a.b.c.d.e.f",
        "xn--bcher-kva.example",
        "xn--",
        "xn--zz",
        "bücher.de",
        "faß.de",
        "例え.テスト",
        "ﬃ.example",
        "ａｂｃ．ｃｏｍ",
        "a\u200db.com",
        "\u0130.com",
        "ex%41mple.com",
        "%zz.com",
        "%ff.com",
        "%2e",
        "127.0.0.1",
        "0x7f.1",
        "0177.0.0.01",
        "4294967295",
        "4294967296",
        "1.2.3.4.5",
        "999.1.1.1",
        "0x",
        "1.2.3.0x",
        "[::1]",
        "[::ffff:1.2.3.4]",
        "[fe80::1%25eth0]",
        "[1:2",
        "[]",
        "[zz::]",
        "localhost",
        "com",
        "co.uk",
        "blogspot.com",
        "a..b",
        ".leading",
        "trailing.",
        "under_score.example",
        "-dash-.example",
        "a" * 64 + ".com",
        ("a" * 63 + ".") * 4 + "com",
        "",
        "\u00ad.com",
        "xn--ls8h.la",
        "\udcff.com",
        "a\x00b.com",
    ]
)
_PORTS = st.sampled_from(
    ["", "", "", "", ":", ":80", ":443", ":0", ":65535", ":65536", ":99999999999999999999", ":-1", ":8a", ":٣"]
)
_PATH_PIECES = st.sampled_from(
    [
        "/",
        "//",
        "/./",
        "/../",
        "/%2e%2E/",
        "/%2e./",
        "..",
        ".",
        "\\",
        "\\..\\",
        "%",
        "%4",
        "%41",
        "%zz",
        "%00",
        "%C3%A9",
        "%ff%fe",
        "é",
        "日本",
        " ",
        "\t",
        "\n",
        "\x7f",
        "#",
        "?",
        "&",
        "=",
        "\ud800",
        "a",
        "b/c",
        ";x",
        "@",
    ]
)
_QUERIES = st.sampled_from(["", "?", "?a=1&&b=2", "?b=1&a=2&a=1", "?%zz", "?q=%41%4a é", "?&&&", "?#", "?a=\x00"])
_FRAGMENTS = st.sampled_from(["", "#", "#frag", "#?a=b", "#/../x", "#\ud800"])


@st.composite
def hostile_urls(draw: st.DrawFn) -> str:
    head = draw(st.sampled_from(["", " ", "\t", "\x00", "\ufeff", "\n"]))
    path = "".join(draw(st.lists(_PATH_PIECES, max_size=8)))
    tail = draw(st.sampled_from(["", " ", "\x01", "\r\n"]))
    return (
        head
        + draw(_SCHEMES)
        + draw(_SEPARATORS)
        + draw(_USERINFO)
        + draw(_HOST_ATOMS)
        + draw(_PORTS)
        + path
        + draw(_QUERIES)
        + draw(_FRAGMENTS)
        + tail
    )


def _check_canonical(canon: CanonicalUrl) -> None:
    """What every successful result promises (schemas/URL_KEYS.md)."""
    assert canon.scheme in ("http", "https")
    assert canon.url.isascii() and canon.url.isprintable() and " " not in canon.url
    assert len(canon.url) <= MAX_URL_LENGTH and len(canon.host) <= MAX_HOST_LENGTH + 2
    assert (
        canon.url == f"{canon.scheme}://{canon.host}{'' if canon.port is None else f':{canon.port}'}{canon.path_query}"
    )
    assert canon.port is None or 0 <= canon.port <= 65535
    assert "#" not in canon.url and canon.path_query.startswith("/")
    assert canonicalize(canon.url).url == canon.url  # idempotent
    assert canonicalize(canon.url).domain == canon.domain
    key = url_key(canon)
    assert 0 <= key < 1 << 63 and key_checksum(key) == domain_checksum(canon.domain)


@settings(ADVERSARIAL, max_examples=1500)
@given(hostile_urls())
@example("http://[::ffff:1.2.3.4]:65535/%2e%2E/a?b=1&a=2#x")
@example("http://1.2.3.0x/")
@example("https://ﬃ.example/")
def test_hostile_urls_raise_only_invalid_url_and_results_are_canonical(url: str) -> None:
    try:
        canon = canonicalize(url)
    except InvalidUrl as exc:
        assert exc.reason in ("scheme", "host", "idna", "port", "length", "parse")
        return
    _check_canonical(canon)


@settings(ADVERSARIAL, max_examples=800)
@given(hostile_urls(), st.one_of(hostile_urls(), st.text(max_size=30), st.sampled_from(["", "?x", "#f", "//", "../"])))
def test_relative_references_against_hostile_bases_raise_only_invalid_url(base: str, reference: str) -> None:
    try:
        canon = canonicalize(reference, base)
    except InvalidUrl:
        return
    _check_canonical(canon)


@settings(ADVERSARIAL, max_examples=200)
@given(
    st.sampled_from(["a", "é", "%41", "%zz", "/", "./", "../", "日", "a=1&", " ", "%"]),
    st.integers(min_value=MAX_URL_LENGTH - 60, max_value=MAX_URL_LENGTH + 10),
    st.sampled_from(["", "?q", "?é", "#f"]),
)
def test_urls_near_the_length_limit_raise_only_invalid_url(piece: str, size: int, tail: str) -> None:
    """Percent-encoding can grow a URL past MAX_URL_LENGTH after the input length check passed."""
    prefix = "http://example.com/"
    url = prefix + (piece * size)[: size - len(prefix) - len(tail)] + tail
    try:
        canon = canonicalize(url)
    except InvalidUrl as exc:
        assert exc.reason in ("length", "parse")
        return
    assert len(canon.url) <= MAX_URL_LENGTH


@settings(ADVERSARIAL, max_examples=600)
@given(st.one_of(_HOST_ATOMS, st.text(max_size=40), st.text(alphabet="abc.-_0[]:%", max_size=20)))
def test_registered_domain_raises_only_invalid_domain(host: str) -> None:
    try:
        domain = registered_domain(host)
    except InvalidDomain:
        return
    assert domain and host.lower().rstrip(".").endswith(domain)
