"""``split_urls`` (the lake writer's column split) equals ``split_url`` + ``host_prefix`` row by row."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlstream.errors import InvalidUrl
from crawlstream.lake import host_prefix, split_url, split_urls
from crawlstream.urls import canonicalize


def _per_row(urls: list[str], domains: list[str]) -> list[tuple[str, str, int | None, str]]:
    out = []
    for url, domain in zip(urls, domains, strict=True):
        scheme, host, port, path_query = split_url(url)
        out.append((scheme, host_prefix(host, domain), port, path_query))
    return out


def _columns(urls: list[str], domains: list[str]) -> list[tuple[str, str, int | None, str]]:
    cols = split_urls(pa.array(urls, pa.string()), pa.array(domains, pa.string()))
    return list(zip(*(c.to_pylist() for c in cols), strict=True))


def test_every_canonical_url_of_the_real_lists_splits_as_row_by_row(shared_data: Path) -> None:
    raw = []
    for path in sorted((shared_data / "urls" / "reddit-webtext").glob("*.gz")):
        with gzip.open(path, "rt") as fh:
            raw += [json.loads(line)["u"] for line in fh]
    with gzip.open(shared_data / "urls" / "ada-url-various-datasets" / "kasztp.txt.gz", "rt") as fh:
        raw += [line.strip().lstrip("\ufeff") for line in fh]
    urls, domains = [], []
    for u in raw:
        try:
            c = canonicalize(u)
        except InvalidUrl:
            continue
        urls.append(c.url)
        domains.append(c.domain)
    assert len(urls) > 200_000
    assert _columns(urls, domains) == _per_row(urls, domains)


_HOSTS = st.sampled_from(["example.com", "www.example.com", "a.b.example.co.uk", "[::1]", "127.0.0.1",
                          "xn--bcher-kva.example", "例え.jp", "h:", "x:0", "y:65536", "z:080"])


@given(
    scheme=st.sampled_from(["http", "https", "ftp", "ws"]),
    host=_HOSTS,
    port=st.one_of(st.none(), st.integers(1, 99999), st.just(0)),
    rest=st.text(max_size=25).map(lambda s: "/" + s),
)
def test_generated_urls_split_as_row_by_row(scheme: str, host: str, port: int | None, rest: str) -> None:
    authority = host if port is None else f"{host}:{port}"
    url = f"{scheme}://{authority}{rest}"
    host_part = split_url(url)[1]
    domain = host_part[host_part.find(".") + 1:] if host_part.count(".") > 1 else host_part
    assert _columns([url], [domain]) == _per_row([url], [domain])


def test_sliced_and_empty_columns_split_as_row_by_row() -> None:
    urls = [f"https://www.d{i}.com:8{i}/p?q={i}" for i in range(20)]
    domains = [f"d{i}.com" for i in range(20)]
    cols = split_urls(pa.array(urls).slice(5, 10), pa.array(domains).slice(5, 10))
    assert list(zip(*(c.to_pylist() for c in cols), strict=True)) == _per_row(urls[5:15], domains[5:15])
    assert all(len(c) == 0 for c in split_urls(pa.array([], pa.string()), pa.array([], pa.string())))


def test_port_0_which_canonicalize_keeps_is_a_port() -> None:
    url = canonicalize("http://f:0/c")
    assert url.url == "http://f:0/c"
    assert split_url(url.url) == ("http", "f", 0, "/c")
    assert _columns([url.url], [url.domain]) == [("http", "", 0, "/c")]


def test_a_host_not_ending_with_its_domain_or_a_relative_url_is_refused() -> None:
    with pytest.raises(ValueError, match="end with its registered domain"):
        split_urls(pa.array(["http://www.a.com/", "http://www.b.com/"]), pa.array(["a.com", "c.com"]))
    with pytest.raises(ValueError, match="absolute URL"):
        split_urls(pa.array(["/relative"]), pa.array(["a.com"]))
