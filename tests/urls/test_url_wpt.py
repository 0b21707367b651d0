# ruff: noqa: E501  (the difference tables hold long literal inputs verbatim)
"""canonicalize against the WHATWG URL test vectors (WPT urltestdata.json and toascii.json).

WHATWG parsing is not crawler canonicalization. Where we differ on purpose, the difference is
listed below with its reason; the tests assert the list is exactly the set of differences,
so a new difference (a regression) or a vanished one (a fix) fails until the table is updated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crawlstream.errors import InvalidUrl
from crawlstream.urls import canonicalize

DUPLICATE_SLASHES = "duplicate slashes are collapsed (canonical form rule; WHATWG keeps empty segments)"
PERCENT_NORMALIZED = "escapes of unreserved characters are decoded and hex is uppercased (RFC 3986 6.2.2)"
IDNA2008_STRICTER = "the idna package validates labels by IDNA 2008, stricter than browsers' UTS #46"
DNS_HOST_ONLY = "hosts must be DNS-style labels: a-z 0-9 - _, no empty label (WHATWG allows more)"
DNS_LENGTH = "labels over 63 and hosts over 253 characters are rejected (DNS limits; WHATWG does not check)"

# (input, base, WPT "hostname|port|pathname", ours, reason)
INTENDED_DIFFERENCES: list[tuple[str, str | None, str, str, str]] = [
    ("http://foo.com/\\@", "http://example.org/foo/bar", "foo.com||//@", "foo.com||/@", DUPLICATE_SLASHES),
    (
        "/a%2fc",
        "http://example.org/foo/bar",
        "example.org||/a%2fc",
        "example.org||/a%2Fc",
        PERCENT_NORMALIZED,
    ),
    (
        "/a/%2f/c",
        "http://example.org/foo/bar",
        "example.org||/a/%2f/c",
        "example.org||/a/%2F/c",
        PERCENT_NORMALIZED,
    ),
    (
        "http://example.com/foo/%2e%2",
        None,
        "example.com||/foo/%2e%2",
        "example.com||/foo/.%2",
        PERCENT_NORMALIZED,
    ),
    (
        "http://example.com/foo/%2e./%2e%2e/.%2e/%2e.bar",
        None,
        "example.com||/%2e.bar",
        "example.com||/..bar",
        PERCENT_NORMALIZED,
    ),
    ("http://example.com////../..", None, "example.com||//", "example.com||/", DUPLICATE_SLASHES),
    (
        "http://example.com/foo%41%7a",
        None,
        "example.com||/foo%41%7a",
        "example.com||/fooAz",
        PERCENT_NORMALIZED,
    ),
    (
        "http://example.com/foo%00%51",
        None,
        "example.com||/foo%00%51",
        "example.com||/foo%00Q",
        PERCENT_NORMALIZED,
    ),
    (
        "http://example.com/%3A%3a%3C%3c",
        None,
        "example.com||/%3A%3a%3C%3c",
        "example.com||/%3A%3A%3C%3C",
        PERCENT_NORMALIZED,
    ),
    (
        "http://example.com\\\\foo\\\\bar",
        None,
        "example.com||//foo//bar",
        "example.com||/foo/bar",
        DUPLICATE_SLASHES,
    ),
    ("http://www/foo%2Ehtml", None, "www||/foo%2Ehtml", "www||/foo.html", PERCENT_NORMALIZED),
    ("http://a.b.c.xn--pokxncvks", None, "a.b.c.xn--pokxncvks||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://10.0.0.xn--pokxncvks", None, "10.0.0.xn--pokxncvks||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://a.b.c.XN--pokxncvks", None, "a.b.c.xn--pokxncvks||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://a.b.c.Xn--pokxncvks", None, "a.b.c.xn--pokxncvks||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://10.0.0.XN--pokxncvks", None, "10.0.0.xn--pokxncvks||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://10.0.0.xN--pokxncvks", None, "10.0.0.xn--pokxncvks||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://./", None, ".||/", "InvalidUrl(host)", DNS_HOST_ONLY),
    ("http://../", None, "..||/", "InvalidUrl(host)", DNS_HOST_ONLY),
    ("http://!\"$&'()*+,-.;=_`{}~/", None, "!\"$&'()*+,-.;=_`{}~||/", "InvalidUrl(host)", DNS_HOST_ONLY),
    ("https://%e2%98%83", None, "xn--n3h||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
    ("http://foo.09..", None, "foo.09..||/", "InvalidUrl(host)", DNS_HOST_ONLY),
    ("https://xn--/", None, "xn--||/", "InvalidUrl(idna)", IDNA2008_STRICTER),
]

# toascii.json inputs WHATWG converts and we reject (input -> reason).
TOASCII_REJECTED: dict[str, str] = {
    "a†--": IDNA2008_STRICTER,
    "-†": IDNA2008_STRICTER,
    "x..xn--zca": DNS_HOST_ONLY,
    "x..ß": DNS_HOST_ONLY,
    "xn--a": IDNA2008_STRICTER,
    "xn--a.xn--zca": IDNA2008_STRICTER,
    "xn--ls8h=": IDNA2008_STRICTER,
    "xn--1ug.example": IDNA2008_STRICTER,
    "xn--a-yoc": IDNA2008_STRICTER,
    "xn--zn7c.com": IDNA2008_STRICTER,
    "x01234567890123456789012345678901234567890123456789012345678901x": DNS_LENGTH,
    "x01234567890123456789012345678901234567890123456789012345678901†": IDNA2008_STRICTER,
    "x01234567890123456789012345678901234567890123456789012345678901x.xn--zca": DNS_LENGTH,
    "x01234567890123456789012345678901234567890123456789012345678901x.ß": DNS_LENGTH,
    "01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.0123456789012345678901234567890123456789012345678.x": DNS_LENGTH,
    "01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.0123456789012345678901234567890123456789012345678.xn--zca": DNS_LENGTH,
    "01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.01234567890123456789012345678901234567890123456789.0123456789012345678901234567890123456789012345678.ß": DNS_LENGTH,
    "≠": IDNA2008_STRICTER,
    "≮": IDNA2008_STRICTER,
    "≯": IDNA2008_STRICTER,
    "≠": IDNA2008_STRICTER,
    "≮": IDNA2008_STRICTER,
    "≯": IDNA2008_STRICTER,
    "=\xad̸": IDNA2008_STRICTER,
    "<\xad̸": IDNA2008_STRICTER,
    ">\xad̸": IDNA2008_STRICTER,
    "www.lookout‧net": IDNA2008_STRICTER,
    "♥.net": IDNA2008_STRICTER,
    "xn--0.com": IDNA2008_STRICTER,
}


def _cases(path: Path) -> list[dict[str, Any]]:
    return [case for case in json.loads(path.read_text(encoding="utf-8")) if isinstance(case, dict)]


@pytest.fixture(scope="module")
def url_cases(shared_data: Path) -> list[dict[str, Any]]:
    return _cases(shared_data / "url" / "wpt" / "urltestdata.json")


@pytest.fixture(scope="module")
def toascii_cases(shared_data: Path) -> list[dict[str, Any]]:
    return _cases(shared_data / "url" / "wpt" / "toascii.json")


def _ours(case: dict[str, Any]) -> str:
    try:
        canon = canonicalize(case["input"], case["base"])
    except InvalidUrl as exc:
        return f"InvalidUrl({exc.reason})"
    port = "" if canon.port is None else str(canon.port)
    return f"{canon.host}|{port}|{canon.path_query.partition('?')[0]}"


def _valid_http(case: dict[str, Any]) -> bool:
    return not case.get("failure") and case["protocol"] in ("http:", "https:")


def test_every_wpt_input_canonicalizes_or_raises_invalid_url(url_cases: list[dict[str, Any]]) -> None:
    outcomes = {"ok": 0, "invalid": 0}
    for case in url_cases:
        try:
            canonicalize(case["input"], case["base"])
        except InvalidUrl:
            outcomes["invalid"] += 1
        else:
            outcomes["ok"] += 1
    assert outcomes["ok"] + outcomes["invalid"] == len(url_cases) > 800


def test_wpt_failures_of_http_urls_are_rejected(url_cases: list[dict[str, Any]]) -> None:
    """An input WPT rejects outright is never accepted when it names an http(s) URL."""
    accepted = []
    for case in url_cases:
        if not case.get("failure") or case["base"] is not None:
            continue
        if not case["input"].strip().lower().startswith(("http:", "https:")):
            continue
        try:
            canonicalize(case["input"])
        except InvalidUrl:
            continue
        accepted.append(case["input"])
    assert accepted == []


def test_wpt_host_port_path_agree_except_the_intended_differences(url_cases: list[dict[str, Any]]) -> None:
    differences = []
    for case in url_cases:
        if not _valid_http(case):
            continue
        wpt = f"{case['hostname']}|{case['port']}|{case['pathname']}"
        ours = _ours(case)
        if ours != wpt:
            differences.append((case["input"], case["base"], wpt, ours))
    assert differences == [entry[:4] for entry in INTENDED_DIFFERENCES]


def test_canonicalize_is_idempotent_on_every_wpt_href(url_cases: list[dict[str, Any]]) -> None:
    checked = 0
    for case in url_cases:
        if case.get("failure"):
            continue
        try:
            once = canonicalize(case["href"]).url
        except InvalidUrl:
            continue
        assert canonicalize(once).url == once, case["href"]
        checked += 1
    assert checked > 200


def test_toascii_hosts_agree_except_the_listed_rejections(toascii_cases: list[dict[str, Any]]) -> None:
    """Where WHATWG's host -> ASCII fails we fail too; where it succeeds we give its answer or a listed rejection."""
    rejected = {}
    for case in toascii_cases:
        expected = case["output"]
        try:
            host = canonicalize(f"https://{case['input']}/x").host
        except InvalidUrl:
            if expected is not None:
                rejected[case["input"]] = True
            continue
        assert expected is not None, case["input"]
        assert host == expected.removesuffix("."), case["input"]
    assert set(rejected) == set(TOASCII_REJECTED)
