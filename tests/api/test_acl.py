"""Per-dataset ACLs by bearer token (seed §8), against the real index on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from yarl import URL

from crawlstream.api import Acl, TokensFile
from crawlstream.errors import ConfigError
from crawlstream.index import IndexReader
from tests.api._lake import BIG, run_client

Client = TestClient[Any, Any]

PUBLIC = "tok-public-0123456789"  # datasets 1 and 2
ADMIN = "tok-admin-abcdefghij"  # everything
ACL_DOC = {PUBLIC: [1, 2], ADMIN: "*"}


def _acl() -> Acl:
    return Acl.from_mapping(ACL_DOC)


async def _json(c: Client, path: str, token: str | None = None, **kw: Any) -> tuple[int, dict[str, Any], Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = await c.get(URL(path, encoded=True), headers=headers, **kw)
    return resp.status, await resp.json(), resp.headers


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer wrong-token", f"Basic {PUBLIC}", f"Bearer {PUBLIC}x", f"Bearer {PUBLIC[:-1]}"],
)
def test_missing_or_unknown_token_is_401_on_every_query(reader: IndexReader, authorization: str | None) -> None:
    async def go(c: Client) -> list[tuple[int, str, str]]:
        out = []
        headers = {"Authorization": authorization} if authorization is not None else {}
        for path in (
            "/v1/domain/example.co.uk",
            "/v1/domain/example.co.uk/datasets/1/urls",
            "/v1/url?url=http://a.com/",
        ):
            resp = await c.get(path, headers=headers)
            out.append((resp.status, (await resp.json())["error"], resp.headers.get("WWW-Authenticate", "")))
        return out

    for status, error, challenge in run_client(reader, go, acl=_acl()):
        assert (status, error) == (401, "unauthorized")
        assert challenge.startswith("Bearer")


def test_datasets_a_token_may_not_see_are_filtered_from_domain_answers(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return await _json(c, "/v1/domain/example.co.uk", PUBLIC), await _json(c, "/v1/domain/example.co.uk", ADMIN)

    (s1, public, _), (s2, admin, _) = run_client(reader, go, acl=_acl())
    assert s1 == s2 == 200
    assert [d["dataset_id"] for d in public["datasets"]] == [1, 2]
    assert [d["dataset_id"] for d in admin["datasets"]] == [1, 2, 7]


def test_a_domain_only_in_hidden_datasets_looks_unknown(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return (
            await _json(c, "/v1/domain/secret.org", PUBLIC),
            await _json(c, "/v1/domain/never-seen.example", PUBLIC),
            await _json(c, "/v1/domain/secret.org", ADMIN),
        )

    (s1, hidden, _), (s2, unknown, _), (s3, _, _) = run_client(reader, go, acl=_acl())
    assert (s1, s2, s3) == (404, 404, 200)
    assert hidden["error"] == unknown["error"]


def test_urls_of_a_hidden_dataset_are_a_404_identical_to_a_missing_one(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        return (
            await _json(c, "/v1/domain/example.co.uk/datasets/7/urls", PUBLIC),  # exists, hidden
            await _json(c, "/v1/domain/example.co.uk/datasets/9/urls", PUBLIC),  # does not exist
            await _json(c, "/v1/domain/secret.org/datasets/7/urls", PUBLIC),  # domain only in hidden data
            await _json(c, "/v1/domain/example.co.uk/datasets/7/urls", ADMIN),
            await _json(c, "/v1/domain/example.co.uk/datasets/1/urls?limit=1", PUBLIC),
        )

    (s1, hidden, _), (s2, missing, _), (s3, hidden_domain, _), (s4, admin, _), (s5, allowed, _) = run_client(
        reader, go, acl=_acl()
    )
    assert (s1, s2, s3, s4, s5) == (404, 404, 404, 200, 200)
    strip = lambda b: (b["error"], b["message"].replace("7", "N").replace("9", "N"))  # noqa: E731
    assert strip(hidden) == strip(missing)
    assert hidden_domain["error"] == "unknown_dataset"  # not "unknown_domain": that would leak existence
    assert admin["total"] == 3 and allowed["total"] == BIG


def test_url_lookup_lists_only_visible_datasets(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        params = {"url": "https://secret.org/1"}
        return await _json(c, "/v1/url", PUBLIC, params=params), await _json(c, "/v1/url", ADMIN, params=params)

    (_, public, _), (_, admin, _) = run_client(reader, go, acl=_acl())
    assert (public["datasets"], admin["datasets"]) == ([], [7])


def test_health_metrics_and_openapi_stay_open_and_openapi_declares_bearer_auth(reader: IndexReader) -> None:
    async def go(c: Client) -> Any:
        statuses = [(await c.get(p)).status for p in ("/healthz", "/metrics", "/openapi.json")]
        return statuses, await (await c.get("/openapi.json")).json()

    statuses, doc = run_client(reader, go, acl=_acl())
    assert statuses == [200, 200, 200]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert doc["paths"]["/healthz"]["get"]["security"] == []


def test_tokens_never_appear_in_logs(reader: IndexReader, caplog: pytest.LogCaptureFixture) -> None:
    async def go(c: Client) -> None:
        await _json(c, "/v1/domain/example.co.uk", PUBLIC)
        await _json(c, "/v1/domain/example.co.uk", "guessed-token")

    with caplog.at_level(logging.DEBUG):
        run_client(reader, go, acl=_acl())
    assert caplog.records  # the debug request log ran
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert PUBLIC not in text and "guessed-token" not in text and "example.co.uk" not in text


def test_tokens_file_is_validated_at_startup(tmp_path: Path) -> None:
    good = tmp_path / "tokens.json"
    good.write_text(json.dumps(ACL_DOC))
    assert len(TokensFile(good).current()) == 2
    for doc in ([], {}, {"t": [1, "2"]}, {"t": "all"}, {"t": [-1]}, {"": "*"}, {" t": "*"}):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(doc))
        with pytest.raises(ConfigError, match=r"tokens_file|tokens file"):
            TokensFile(bad)
    with pytest.raises(ConfigError, match="not valid JSON"):
        (tmp_path / "broken.json").write_text("{")
        TokensFile(tmp_path / "broken.json")
    with pytest.raises(ConfigError, match="does not exist"):
        TokensFile(tmp_path / "missing.json")


def test_a_config_error_message_never_contains_the_token(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"very-secret-token": [1, "x"]}))
    with pytest.raises(ConfigError) as info:
        TokensFile(bad)
    assert "very-secret-token" not in str(info.value)
