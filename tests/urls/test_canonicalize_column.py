"""canonicalize_column equals canonicalize row by row (url, domain, reason, error), on the WPT
inputs, the real URL lists, generated tricky URLs and odd columns; and its column fast path
takes the bulk of a realistic column, so it cannot quietly degrade to the per-row loop."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlstream.errors import InvalidUrl
from crawlstream.urls import MAX_URL_LENGTH, CanonicalColumn, canonicalize, canonicalize_column

Row = tuple[str | None, str | None, str | None, str | None]


def _reference(value: str | None) -> Row:
    """(url, domain, reason, error) of one row by canonicalize itself."""
    if value is None:
        return None, None, "missing", "no value (null)"
    if not value:
        return None, None, "blank", "empty line or value"
    try:
        canon = canonicalize(value)
    except InvalidUrl as exc:
        return None, None, exc.reason, str(exc)
    return canon.url, canon.domain, None, None


def _check(values: list[str | None], column: pa.Array | pa.ChunkedArray | None = None) -> CanonicalColumn:
    got = canonicalize_column(pa.array(values, pa.string()) if column is None else column)
    for name in ("url", "domain", "reason", "error"):
        assert isinstance(getattr(got, name), pa.StringArray), name
    rows = list(zip(got.url.to_pylist(), got.domain.to_pylist(), got.reason.to_pylist(),
                    got.error.to_pylist(), strict=True))
    wrong = [(v, r, e) for v, r, e in zip(values, rows, map(_reference, values), strict=True) if r != e]
    assert wrong == [], f"{len(wrong)} rows differ, first: {wrong[:3]}"
    assert got.valid.to_pylist() == [r[2] is None for r in rows]
    return got


def test_every_wpt_input(shared_data: Path) -> None:
    cases = json.loads((shared_data / "url" / "wpt" / "urltestdata.json").read_text(encoding="utf-8"))
    inputs = [case["input"] for case in cases if isinstance(case, dict)]
    assert len(inputs) > 800
    got = _check(inputs)
    assert got.fast_rows > 20  # WPT is mostly corner cases: 34 rows of 891 take the fast path


def _real_urls(shared_data: Path) -> list[str]:
    root = shared_data / "urls"
    urls: list[str] = []
    for path in sorted((root / "reddit-webtext").glob("*.json-00.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            urls.extend(json.loads(line)["u"] for line in fh if line.strip())
    with gzip.open(root / "ada-url-various-datasets" / "kasztp.txt.gz", "rt", encoding="utf-8") as fh:
        urls.extend(line.rstrip("\n") for line in fh)
    hosts = (root / "protego-top-10000-websites.txt").read_text(encoding="utf-8").split()
    urls.extend(f"http://{host}/" for host in hosts)
    return urls


def test_every_real_url_and_the_fast_path_takes_the_bulk(shared_data: Path) -> None:
    urls = _real_urls(shared_data)
    assert len(urls) > 200_000
    got = _check(urls)
    # 99.6% here (2026-11); a rule change that sends real URLs the slow way fails this.
    assert got.fast_rows / len(urls) > 0.97, got.fast_rows / len(urls)


def test_a_clean_generated_column_is_all_fast_path() -> None:
    urls = [f"https://www.site{i % 97}.co.uk/news/{i}/item.html?id={i}&a=1" for i in range(5000)]
    urls += [f"http://Shop{i % 13}.Example.COM:80/a//b/?z=1&b=&&a=2#top" for i in range(5000)]
    got = _check(urls)
    assert got.fast_rows == len(urls)


def test_nulls_blanks_chunks_empty_and_large_strings() -> None:
    values = [None, "", "http://a.com/x", " ", "HTTP://B.com", None, "mailto:x@y.z", "http://a.com/x"]
    _check(values)
    _check(values, pa.chunked_array([pa.array(values[:3], pa.string()), pa.array(values[3:], pa.string())]))
    _check(values, pa.array(values, pa.large_string()))
    _check(values, pa.chunked_array([pa.array(values, pa.large_string())]))
    _check([None, None], pa.array([None, None]))  # a column of type null
    for empty in (pa.array([], pa.string()), pa.chunked_array([], pa.string()), pa.array([], pa.large_string())):
        got = canonicalize_column(empty)
        assert len(got) == 0 and got.fast_rows == 0
        assert got.url.type == got.domain.type == got.reason.type == got.error.type == pa.string()
    _check(["http://a.com/" + "x" * (MAX_URL_LENGTH - 13), "http://a.com" + "/" * (MAX_URL_LENGTH - 12),
            "http://a.com/?" + "b=1&a=2" * 2000, "http://a.com/#" + "f" * MAX_URL_LENGTH,
            "http://a.com", "http://a.com/" + "x" * (MAX_URL_LENGTH - 13) + "#f"])


def _mostly(common: list[str], rare: list[str]) -> st.SearchStrategy[str]:
    """One of ``common`` (together ten times as likely) or ``rare``: most generated URLs stay in
    the column fast path's shape, so both paths and their merging are exercised."""
    return st.sampled_from(common * max(1, 10 * len(rare) // len(common)) + rare)


_LABELS = _mostly(["www", "WWW", "Example", "a", "b-c", "x_y", "blogspot", "co", "123"],
                  ["1", "0x1f", "0X", "-", "xn--bcher-kva", "XN--Bcher-kva", "bücher", "例え", "straße",
                   "a" * 63, "a" * 64, "%41"])
_TLDS = _mostly(["com", "COM", "co.uk", "de", "blogspot.com", "example"], ["1", "0x7f", "xn--fiqs8s", ""])
_NAMES = st.builds(lambda labels, tld, dot: ".".join([*labels, tld]) + dot,
                   st.lists(_LABELS, max_size=4), _TLDS, _mostly([""], [".", ".."]))
_ODD_HOSTS = st.sampled_from(["1.2.3.4", "01.2.3.4", "0x7f.1", "256.1.1.1", "1.2.3.4.5", "[::1]", "[2001:DB8::1]",
                              "[::1", "[fe80::1%25eth0]", "localhost", "LOCALHOST.", "a..b", ".a.com", "",
                              ("a" * 60 + ".") * 5 + "com"])
_HOSTS = _mostly(["name"], ["odd"]).flatmap(lambda kind: _NAMES if kind == "name" else _ODD_HOSTS)
_SEGMENTS = st.lists(_mostly(
    ["a", "B", "x.html", ".x", "..x", "...", "", "%20", "%2F", "%C3%A9", "~", "a:b", "@", "!$&()*+,;=", "[x]", "|"],
    [".", "..", "%2e", "%2E", "%2e%2E", "%41", "%7e", "%7E", "%2f", "%zz", "%", "%4", "%c3%a9", "é", " ", "\\", "'",
     '"', "<", "^", "{"]), max_size=6)
_PARAMS = st.lists(st.tuples(
    _mostly(["a", "b", "B", "utm_source", "", "id", "a%3D"], ["%41", "é", "'"]),
    _mostly(["", "=", "=1", "=x%20y", "=a=b", "=?", "=/:@"], ["=%3d", "=%41", "='q'", "=é", "=\\", "= "])),
    max_size=5)


@st.composite
def tricky_urls(draw: st.DrawFn) -> str:
    scheme = draw(_mostly(["http://", "https://", "HTTP://", "hTtPs://"],
                          ["http:/", "http:", "ftp://", "//", "", "https:\\\\"]))
    userinfo = draw(_mostly([""], ["user@", "u:p@", "@", "a@b@"]))
    port = draw(_mostly(["", "", ":80", ":443", ":0080", ":00443", ":8080", ":0", ":65535"],
                        [":", ":65536", ":99999", ":x"]))
    slashes = draw(_mostly(["/"], ["//", ""]))
    path = slashes + "/".join(draw(_SEGMENTS)) + draw(st.sampled_from(["", "", "/"]))
    params = draw(_PARAMS)
    query = draw(_mostly(["", "?"], ["?&", "?&&"])) + "&".join(k + v for k, v in params)
    if query and not query.startswith("?"):
        query = "?" + query
    fragment = draw(_mostly(["", "#", "#frag", "#a?b#c"], ["#é", "# x"]))
    pad = draw(_mostly([""], ["p" * (MAX_URL_LENGTH - 40), "p" * MAX_URL_LENGTH]))
    url = f"{scheme}{userinfo}{draw(_HOSTS)}{port}{path}{pad}{query}{fragment}"
    around = draw(_mostly([""], [" ", "\t", "\n", "\x00"]))
    if around:
        cut = draw(st.integers(0, len(url)))
        url = draw(st.sampled_from([around + url, url + around, url[:cut] + around + url[cut:]]))
    return url


@settings(max_examples=150, deadline=None)
@given(st.lists(tricky_urls() | st.none() | st.just(""), min_size=1, max_size=40))
def test_generated_tricky_urls(urls: list[str | None]) -> None:
    _check(urls)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40) | st.builds(lambda s: "http://" + s, st.text(max_size=40)), max_size=30))
def test_arbitrary_text(values: list[str]) -> None:
    _check(values)


@pytest.mark.parametrize("sliced", [False, True])
def test_a_sliced_column(sliced: bool) -> None:
    values = ["http://a.com/1", "HTTP://A.COM/2?b&a", None, "nope", "http://b.org//x/../y"] * 3
    column = pa.array(values, pa.string())
    if sliced:
        column, values = column.slice(2, 9), values[2:11]
    _check(values, column)
