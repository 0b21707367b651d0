"""The alias map (ADR 024): redirect hops and raw forms as lake rows of the reserved datasets,
answered by ``/v1/url`` through a real lake, index and API on 127.0.0.1; and its pure parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawlstream.api import Acl
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.lake import (
    RAW_FORMS_DATASET,
    REDIRECTS_DATASET,
    LakeWriter,
    RedirectHop,
    extras_json,
    follow_redirects,
    parse_raw_form,
    parse_redirect,
    raw_form_extras,
    redirect_extras,
)
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.urls import canonicalize
from tests.api._lake import run_client

TS = 1_718_359_200_000
PAGES = 1
# url -> (canonical target, status, Location as written)
HOPS = {
    "http://a.example.com/old": ("http://a.example.com/mid", 301, "/mid"),
    "http://a.example.com/mid": ("https://www.b.example.org/final?x=1", 302, "HTTPS://WWW.B.example.org/final?x=1#f"),
    "http://a.example.com/loop1": ("http://a.example.com/loop2", 302, None),
    "http://a.example.com/loop2": ("http://a.example.com/loop1", 302, None),
    "http://a.example.com/nowhere": ("http://a.example.com/never-fetched", 308, None),
    "http://a.example.com/garbage": ("", 0, None),  # an outside producer's row that is no hop
    "http://a.example.com/badloc": ("not a url", 301, None),  # nor is a hop to something that is no URL
}
RAW = {"HTTP://A.Example.COM:80/page/./1#top": "seed"}


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("aliases")
    writer = LakeWriter(root, config=LakeSettings(row_group_rows=4))
    for u in ["http://a.example.com/page/1", "https://www.b.example.org/final?x=1", "http://a.example.com/mid"]:
        writer.add_canonical(PAGES, canonicalize(u), ts_ms=TS)
    for u in [f"http://a.example.com/filler/{i}" for i in range(30)]:  # several row groups of aliases
        writer.add_canonical(REDIRECTS_DATASET, canonicalize(u), TS, extras_json(redirect_extras(u + "/x", 301)))
    for url, (target, status, raw) in HOPS.items():
        extras = extras_json(redirect_extras(target, status, raw)) if target else '{"something":"else"}'
        writer.add_canonical(REDIRECTS_DATASET, canonicalize(url), TS, extras)
    for raw, source in RAW.items():
        writer.add_canonical(RAW_FORMS_DATASET, canonicalize(raw), TS, extras_json(raw_form_extras(raw, source)))
    writer.close()
    IndexBuilder(root, index=IndexSettings(postings_shards=2), lake=LakeSettings(row_group_rows=4)).build()
    r = IndexReader(root)
    yield r
    r.close()


def _get(reader: IndexReader, paths: list[str], acl: Acl | None = None, token: str | None = None) -> list[Any]:
    async def scenario(client: Any) -> list[Any]:
        out = []
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for path in paths:
            resp = await client.get(path, headers=headers)
            assert resp.status == 200, await resp.text()
            out.append(await resp.json())
        return out

    return run_client(reader, scenario, acl=acl)


def test_a_chain_of_two_hops_answers_its_target_and_every_hop(reader: IndexReader) -> None:
    [doc] = _get(reader, ["/v1/url?url=http%3A%2F%2FA.example.com%2Fold%23x"])
    assert doc["url"] == "http://a.example.com/old" and doc["requested_url"] == "http://A.example.com/old#x"
    assert doc["datasets"] == []  # the alias datasets are never listed as datasets
    assert doc["canonical_url"] == "https://www.b.example.org/final?x=1"
    assert doc["canonical_datasets"] == [PAGES]
    assert doc["redirect_end"] == "target"
    assert doc["redirects"] == [
        {"url": "http://a.example.com/old", "location": "http://a.example.com/mid", "status": 301,
         "location_raw": "/mid"},
        {"url": "http://a.example.com/mid", "location": "https://www.b.example.org/final?x=1", "status": 302,
         "location_raw": "HTTPS://WWW.B.example.org/final?x=1#f"},
    ]


def test_a_page_that_also_redirected_keeps_its_datasets_and_the_rest_of_the_chain(reader: IndexReader) -> None:
    [doc] = _get(reader, ["/v1/url?url=http://a.example.com/mid"])
    assert doc["datasets"] == [PAGES] and len(doc["redirects"]) == 1
    assert doc["canonical_url"] == "https://www.b.example.org/final?x=1"


def test_loops_unknown_targets_and_foreign_rows(reader: IndexReader) -> None:
    loop, nowhere, garbage, badloc, plain = _get(
        reader,
        [
            "/v1/url?url=http://a.example.com/loop1",
            "/v1/url?url=http://a.example.com/nowhere",
            "/v1/url?url=http://a.example.com/garbage",
            "/v1/url?url=http://a.example.com/badloc",
            "/v1/url?url=https://www.b.example.org/final?x=1",
        ],
    )
    assert loop["redirect_end"] == "loop" and [h["url"] for h in loop["redirects"]] == [
        "http://a.example.com/loop1", "http://a.example.com/loop2"
    ]
    assert nowhere["canonical_url"] == "http://a.example.com/never-fetched" and nowhere["canonical_datasets"] == []
    assert garbage["redirects"] == [] and garbage["redirect_end"] == "none"
    assert badloc["redirects"] == [] and badloc["canonical_url"] == "http://a.example.com/badloc"
    assert plain["redirects"] == [] and plain["canonical_url"] == plain["url"] and plain["datasets"] == [PAGES]
    assert plain["raw_form"] is None


def test_a_raw_form_maps_to_its_canonical_url_and_is_recorded(reader: IndexReader) -> None:
    [raw] = RAW
    [doc] = _get(reader, [f"/v1/url?url={raw.replace('#', '%23')}"])
    assert doc["url"] == "http://a.example.com/page/1" and doc["datasets"] == [PAGES]
    assert doc["raw_form"] == {"raw": raw, "source": "seed"}


def test_domain_listing_and_health_hide_the_alias_datasets(reader: IndexReader) -> None:
    doc, health = _get(reader, ["/v1/domain/example.com", "/healthz"])
    assert [d["dataset_id"] for d in doc["datasets"]] == [PAGES]
    assert health["datasets"] == 1


def test_a_token_limited_to_some_datasets_sees_no_alias(reader: IndexReader) -> None:
    acl = Acl.from_mapping({"tok-1": [PAGES], "tok-all": "*"})
    [limited] = _get(reader, ["/v1/url?url=http://a.example.com/old"], acl=acl, token="tok-1")
    assert limited["redirects"] == [] and limited["canonical_url"] == "http://a.example.com/old"
    [full] = _get(reader, ["/v1/url?url=http://a.example.com/old"], acl=acl, token="tok-all")
    assert len(full["redirects"]) == 2


def test_follow_redirects_stops_at_loops_and_long_chains() -> None:
    def chain(n: int) -> Any:
        return lambda u: RedirectHop(u, f"{u}+", 301) if u.count("+") < n else None

    assert follow_redirects("u", chain(3)).end == "target" and follow_redirects("u", chain(3)).target == "u+++"
    long = follow_redirects("u", chain(50), max_hops=5)
    assert long.end == "too_long" and len(long.hops) == 5
    assert follow_redirects("u", lambda u: None).target is None


def test_extras_parse_back_and_garbage_is_no_alias() -> None:
    hop = parse_redirect("http://x/", extras_json(redirect_extras("http://y/", 301, "/y")))
    assert hop == RedirectHop("http://x/", "http://y/", 301, "/y")
    assert parse_redirect("http://x/", extras_json(redirect_extras("http://y/", None))) == RedirectHop(
        "http://x/", "http://y/", None
    )
    for bad in (None, "", "not json", "[1]", '{"location": 3}'):
        assert parse_redirect("http://x/", bad) is None and parse_raw_form(bad) is None
    assert parse_redirect("http://x/", '{"location":"http://y/","status":"abc"}') == RedirectHop(
        "http://x/", "http://y/", None
    )
    with pytest.raises(ValueError, match="3xx"):
        redirect_extras("http://y/", 200)
