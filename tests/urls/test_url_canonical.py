"""canonicalize: the canonical form of schemas/URL_KEYS.md, and only InvalidUrl for bad input."""

from __future__ import annotations

import pytest

from crawlstream.errors import InvalidUrl
from crawlstream.urls import MAX_URL_LENGTH, canonicalize
from crawlstream.urls._canonical import _canonicalize_slow


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM/Path", "http://example.com/Path"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/a?", "http://example.com/a"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com//a///b//", "http://example.com/a/b/"),
        ("http://example.com/a//../b", "http://example.com/a/b"),
        ("http://example.com/%7euser/%2E%2e/x", "http://example.com/x"),
        ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
        ("http://example.com/caf\u00e9", "http://example.com/caf%C3%A9"),
        ("http://example.com/?b=1&a=2&b=0", "http://example.com/?a=2&b=1&b=0"),
        ("http://example.com/?a&&b&", "http://example.com/?a&b"),
        ("http://example.com/?q=a b&x='", "http://example.com/?q=a%20b&x=%27"),
        ("http://user:pass@example.com/", "http://example.com/"),
        ("http://b\u00fccher.de/", "http://xn--bcher-kva.de/"),
        ("http://EXAMPLE.com./", "http://example.com/"),
        ("http://[::FFFF:1.2.3.4]:8080", "http://[::ffff:102:304]:8080/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http:\\\\example.com\\a", "http://example.com/a"),
        ("http:example.com/a", "http://example.com/a"),
        (" \thttp://exa\nmple.com/ \n", "http://example.com/"),
    ],
)
def test_canonicalize_applies_the_documented_rules(raw: str, expected: str) -> None:
    assert canonicalize(raw).url == expected


def test_canonical_url_exposes_its_parts() -> None:
    canon = canonicalize("https://User@WWW.Example.co.uk:8443/a/b?y=2&x=1#f")
    assert (canon.scheme, canon.host, canon.port) == ("https", "www.example.co.uk", 8443)
    assert canon.path_query == "/a/b?x=1&y=2"
    assert canon.domain == "example.co.uk"
    assert canon.raw == "https://User@WWW.Example.co.uk:8443/a/b?y=2&x=1#f"
    with pytest.raises(AttributeError):
        canon.url = "x"  # type: ignore[misc]


def test_relative_urls_resolve_against_the_base() -> None:
    base = "http://Example.com/a/b/c?q=1#f"
    assert canonicalize("../d?z&y", base).url == "http://example.com/a/d?y&z"
    assert canonicalize("//other.org/x", base).url == "http://other.org/x"
    assert canonicalize("?k=v", base).url == "http://example.com/a/b/c?k=v"
    assert canonicalize("", base).url == "http://example.com/a/b/c?q=1"
    assert canonicalize("https://abs.example/", "not a url").url == "https://abs.example/"


def test_relative_url_keeps_its_own_text_as_raw() -> None:
    assert canonicalize("x", "http://example.com/").raw == "x"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("ftp://example.com/", "scheme"),
        ("mailto:a@example.com", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("/relative/without/base", "scheme"),
        ("", "scheme"),
        ("http://", "host"),
        ("http://user@/", "host"),
        ("http://exa mple.com/", "host"),
        ("http://a..b.com/", "host"),
        ("http://256.0.0.1/", "host"),
        ("http://[::1/", "host"),
        ("http://[fe80::1%25eth0]/", "host"),
        ("http://\u2665.net/", "idna"),
        ("http://xn--a.com/", "idna"),
        ("http://example.com:99999/", "port"),
        ("http://example.com:8o/", "port"),
        ("http://example.com/" + "a" * MAX_URL_LENGTH, "length"),
        ("http://example.com/" + "\u00e9" * 3000, "length"),
    ],
)
def test_invalid_urls_raise_invalid_url_with_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidUrl) as info:
        canonicalize(raw)
    assert info.value.reason == reason
    assert str(info.value)


def test_credentials_never_reach_the_canonical_url() -> None:
    canon = canonicalize("https://alice:s3cret@example.com/x")
    assert "s3cret" not in canon.url and "alice" not in canon.url


def test_non_string_input_is_an_invalid_url() -> None:
    with pytest.raises(InvalidUrl):
        canonicalize(b"http://example.com/")  # type: ignore[arg-type]


def test_kasztp_urls_raise_nothing_but_invalid_url(kasztp_urls: list[str]) -> None:
    """Every real URL of kasztp.txt canonicalizes or is rejected with InvalidUrl, idempotently."""
    accepted = 0
    for raw in kasztp_urls:
        try:
            canon = canonicalize(raw)
        except InvalidUrl:
            continue
        accepted += 1
        assert canonicalize(canon.url).url == canon.url
    assert accepted > 0.99 * len(kasztp_urls)


def test_fast_path_and_slow_path_agree_on_real_urls(reddit_urls: list[str], kasztp_urls: list[str]) -> None:
    """The regex fast path is an optimization only: the WHATWG-style path gives the same result."""
    for raw in reddit_urls[:15000] + kasztp_urls[:15000]:
        try:
            fast = canonicalize(raw)
        except InvalidUrl as exc:
            with pytest.raises(InvalidUrl) as slow_error:
                _canonicalize_slow(raw, None)
            assert slow_error.value.reason == exc.reason
            continue
        assert _canonicalize_slow(raw, None) == fast
