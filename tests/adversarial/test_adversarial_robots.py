"""robots.txt on hostile bodies: parsing never raises, and every answer is usable as is.

tests/robots/test_robots_policy.py runs Google's conformance corpus and 2,827 real files;
this adds generated bodies built from the directives parsers get wrong (numbers that
overflow, wildcards, BOMs, invalid UTF-8, NULs, very long lines) and checks what the
fetcher and scheduler rely on: ``decide`` returns a decision, and a Crawl-delay is a finite
number of seconds in [0, MAX_CRAWL_DELAY_S].
"""

from __future__ import annotations

import math

import pytest
from adversarial_support import ADVERSARIAL
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawlstream.errors import InvalidUrl
from crawlstream.robots import MAX_CRAWL_DELAY_S, RobotsDecision, RobotsPolicy, origin_of, robots_url_for
from crawlstream.urls import canonicalize

pytestmark = pytest.mark.timeout(60)

AGENTS = ["crawlstream", "bot", "*", "Googlebot", "crawlstream/0.1 (+https://example.invalid/bot)", "", "ä"]
URLS = [
    "http://a.example/",
    "http://a.example/private/x?y=1",
    "https://a.example/%E2%82%AC/a*b$",
    "http://a.example/robots.txt",
    "http://[::1]:8080/x",
    "http://a.example/" + "a" * 300,
    "http://a.example/%ZZ",
]

NUMBERS = [
    "0",
    "1",
    "-1",
    "2.5",
    "1e308",
    "1e400",
    "-1e400",
    "nan",
    "inf",
    "-inf",
    "1_000",
    "0x10",
    "١٢",
    "",
    " ",
    "9" * 400,
    "1" + "0" * 30,
]
_NUMBERS = st.sampled_from(NUMBERS)
_RATES = st.builds(
    lambda a, b, unit, window: f"{a}/{b}{unit}{window}",
    _NUMBERS,
    _NUMBERS,
    st.sampled_from(["", "s", "m", "h", "d", "x"]),
    st.sampled_from(["", " 0600-0845", " 9999-0000", " x"]),
)
_PATTERNS = st.text(alphabet="/*$?a%E2=.&#\\ \t\x00é", max_size=30) | st.sampled_from(
    ["/", "", "*", "$", "/*a" * 20 + "$"]
)
_LINES = st.one_of(
    st.builds("User-agent: {}".format, st.sampled_from([*AGENTS, "crawl*", "craw", "CRAWLSTREAM"])),
    st.builds("Disallow: {}".format, _PATTERNS),
    st.builds("Allow: {}".format, _PATTERNS),
    st.builds("Crawl-delay: {}".format, _NUMBERS),
    st.builds("Request-rate: {}".format, _RATES),
    st.builds("Sitemap: {}".format, st.text(max_size=30)),
    st.builds("Host: {}".format, st.text(max_size=20)),
    st.sampled_from(["", "#", ":", "::::", "Disallow", "User-agent", "\ufeff", "\x00", "disallow : /x", "DISALLOW:/y"]),
    st.text(max_size=40),
)


@st.composite
def robots_bodies(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(_LINES, max_size=12))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    body = newline.join(lines).encode("utf-8", "surrogatepass")
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf", b"\xef\xbb", b"\xff\xfe", b"\x80"]))
    return prefix + body


def _check_usable(policy: RobotsPolicy) -> None:
    for agent in AGENTS:
        delay_s = policy.crawl_delay_s(agent)
        assert delay_s is None or (math.isfinite(delay_s) and 0 <= delay_s <= MAX_CRAWL_DELAY_S), delay_s
        for url in URLS:
            decision = policy.decide(url, agent)
            assert isinstance(decision, RobotsDecision) and isinstance(decision.allowed, bool)
    assert all(isinstance(s, str) for s in policy.sitemaps)


@settings(ADVERSARIAL, max_examples=500)
@given(robots_bodies())
@example(b"User-agent: *\nRequest-rate: 1/" + b"9" * 400 + b"\n")  # seconds/requests overflowed a float
@example(b"User-agent: *\nCrawl-delay: 1e308\n")  # finite, but * 1000 ms is inf downstream
@example(b"User-agent: *\nRequest-rate: 1/99999999999999999999d\n")
def test_generated_robots_bodies_parse_and_every_answer_is_usable(body: bytes) -> None:
    _check_usable(RobotsPolicy.parse(body))


def test_every_crawl_delay_and_request_rate_number_gives_a_bounded_delay() -> None:
    """All pairs of the hostile numbers, exhaustively: 1/<400 digits> and <400 digits>/<400 digits>
    overflowed a float on division or on the comparison with the cap."""
    for delay in NUMBERS:
        _check_usable(RobotsPolicy.parse(f"User-agent: *\nCrawl-delay: {delay}\n"))
    for requests in NUMBERS:
        for seconds in NUMBERS:
            for unit in ("", "s", "d"):
                _check_usable(RobotsPolicy.parse(f"User-agent: *\nRequest-rate: {requests}/{seconds}{unit}\n"))


@settings(ADVERSARIAL, max_examples=200)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_parse_and_every_answer_is_usable(body: bytes) -> None:
    _check_usable(RobotsPolicy.parse(body))


@settings(ADVERSARIAL, max_examples=200)
@given(st.integers(min_value=-(1 << 40), max_value=1 << 40), robots_bodies())
def test_any_status_gives_the_rfc_9309_policy_class(status: int, body: bytes) -> None:
    policy = RobotsPolicy.from_response(status, body, error_backoff_s=60.0)
    expected = "parsed" if 200 <= status < 300 else "allow_all" if 300 <= status < 500 else "disallow_all"
    assert policy.kind == expected
    _check_usable(policy)


_HOSTS = st.sampled_from(
    ["a.example", "A.Example", "[::1]", "[fe80::1]", "127.0.0.1", "0x7f.1", "xn--bcher-kva.de", "bücher.de"]
)


@settings(ADVERSARIAL, max_examples=300)
@given(
    st.sampled_from(["http", "https", "HTTP"]),
    _HOSTS,
    st.sampled_from(["", ":80", ":443", ":0", ":8080", ":65535"]),
    st.text(alphabet="/?#%a:@[]", max_size=12),
)
def test_origin_of_a_canonical_url_is_its_scheme_host_and_non_default_port(
    scheme: str, host: str, port: str, rest: str
) -> None:
    try:
        canon = canonicalize(f"{scheme}://{host}{port}/{rest}")
    except InvalidUrl:
        return
    expected = f"{canon.scheme}://{canon.host}" + ("" if canon.port is None else f":{canon.port}")
    assert origin_of(canon.url) == expected
    assert robots_url_for(canon.url) == expected + "/robots.txt"
