"""Property tests (hypothesis): idempotence, key layout, and what must not change a key."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crawlstream.errors import InvalidUrl
from crawlstream.urls import canonicalize, domain_checksum, key_checksum, url_key
from crawlstream.urls._canonical import _canonicalize_slow

_LABEL = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_TLD = st.sampled_from(
    ["com", "org", "co.uk", "de", "jp", "blogspot.com", "example", "xn--fiqs8s", "k12.ak.us"]
)
_HOSTS = st.builds(
    lambda labels, tld: ".".join([*labels, tld]), st.lists(_LABEL, min_size=1, max_size=4), _TLD
)
_SEGMENT = st.text(
    alphabet=st.sampled_from(list("abcXYZ019-._~%2eF/?&=+ é日\\:@!$'()*,;<>\"{}^`|")), max_size=12
)
_KEYS = st.sampled_from(["a", "b", "c", "id", "utm", "Z"])
_PARAMS = st.lists(st.tuples(_KEYS, st.text(alphabet="xyz019", max_size=3)), max_size=5)


@st.composite
def http_urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTTps"]))
    host = draw(_HOSTS)
    port = draw(st.sampled_from(["", ":80", ":443", ":8080", ":0"]))
    path = "/" + "/".join(draw(st.lists(_SEGMENT, max_size=5)))
    params = draw(_PARAMS)
    query = ("?" + "&".join(f"{k}={v}" for k, v in params)) if params else draw(st.sampled_from(["", "?"]))
    fragment = draw(st.sampled_from(["", "#", "#frag", "#a?b"]))
    return f"{scheme}://{host}{port}{path}{query}{fragment}"


ANY_TEXT = st.text(max_size=80) | st.builds(lambda s: "http://" + s, st.text(max_size=60))


@settings(max_examples=400)
@given(http_urls())
def test_canonicalize_is_idempotent(url: str) -> None:
    try:
        once = canonicalize(url)
    except InvalidUrl:
        return
    assert canonicalize(once.url).url == once.url
    assert canonicalize(once.url).domain == once.domain


@settings(max_examples=400)
@given(ANY_TEXT)
def test_arbitrary_text_raises_only_invalid_url_and_stays_idempotent(text: str) -> None:
    try:
        once = canonicalize(text)
    except InvalidUrl:
        return
    assert canonicalize(once.url).url == once.url


@settings(max_examples=300)
@given(http_urls())
def test_fast_path_matches_the_general_parser(url: str) -> None:
    try:
        fast = canonicalize(url)
    except InvalidUrl:
        return
    assert _canonicalize_slow(url, None) == fast


@settings(max_examples=300)
@given(http_urls())
def test_key_bit_layout_and_checksum(url: str) -> None:
    try:
        canon = canonicalize(url)
    except InvalidUrl:
        return
    key = url_key(canon)
    assert 0 <= key < 2**63
    assert key_checksum(key) == domain_checksum(canon.domain) == (key >> 56) & 0x7F


@given(st.lists(_LABEL, min_size=1, max_size=3), st.lists(_LABEL, min_size=1, max_size=3), _TLD)
def test_same_registered_domain_gives_the_same_checksum(sub_a: list[str], sub_b: list[str], tld: str) -> None:
    registrable = f"site.{tld}"
    first = canonicalize(f"http://{'.'.join(sub_a)}.{registrable}/")
    second = canonicalize(f"https://{'.'.join(sub_b)}.{registrable}/x")
    assume(first.domain == registrable and second.domain == registrable)
    assert key_checksum(url_key(first)) == key_checksum(url_key(second)) == domain_checksum(registrable)


@settings(max_examples=300)
@given(_HOSTS, st.lists(_LABEL, max_size=3), _PARAMS, st.sampled_from(["http", "https"]), st.randoms())
def test_fragment_default_port_host_case_and_query_order_do_not_change_the_key(
    host: str, segments: list[str], params: list[tuple[str, str]], scheme: str, rnd: object
) -> None:
    path = "/" + "/".join(segments)
    # Query-key order: any permutation that keeps equal keys in their relative order.
    keys = sorted({k for k, _ in params})
    rnd.shuffle(keys)  # type: ignore[attr-defined]
    reordered = [p for k in keys for p in params if p[0] == k]
    query = "&".join(f"{k}={v}" for k, v in params)
    query2 = "&".join(f"{k}={v}" for k, v in reordered)
    default_port = ":80" if scheme == "http" else ":443"
    base = url_key(f"{scheme}://{host}{path}?{query}")
    assert url_key(f"{scheme}://{host}{path}?{query}#fragment") == base
    assert url_key(f"{scheme}://{host}{default_port}{path}?{query}") == base
    assert url_key(f"{scheme}://{host.upper()}{path}?{query}") == base
    assert url_key(f"{scheme}://{host}{path}?{query2}") == base
