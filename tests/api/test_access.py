"""Authorization by default (issue 16): the API as ``crawlstream serve`` sets it up from
settings, token rotation through the tokens file, and the ``crawlstream tokens`` command."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from crawlstream.api import (
    RUNNER_OPTIONS,
    TokensFile,
    add_token,
    default_tokens_path,
    describe_tokens,
    from_settings,
    is_loopback,
    revoke_token,
    tokens_from_settings,
)
from crawlstream.cli import main
from crawlstream.errors import ConfigError
from crawlstream.index import IndexReader
from crawlstream.settings import Settings, load
from tests.api._lake import run_client

REPO = Path(__file__).resolve().parents[2]


def _settings(data_dir: Path, **api: Any) -> Settings:
    settings = load({"CRAWLSTREAM_DATA_DIR": str(data_dir)})
    return dataclasses.replace(settings, api=dataclasses.replace(settings.api, **api))


@pytest.fixture
def data_dir(lake_root: Path, tmp_path: Path) -> Path:
    """A data dir of its own (the tokens file goes there) over the module's lake and index."""
    root = tmp_path / "data"
    root.mkdir()
    for name in os.listdir(lake_root):
        (root / name).symlink_to(lake_root / name)
    return root


def _serve_settings(settings: Settings, scenario: Any) -> Any:
    async def go() -> Any:
        app = from_settings(settings, registry=CollectorRegistry())
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(**RUNNER_OPTIONS)
        async with TestClient(server) as client:
            return await asyncio.wait_for(scenario(client), timeout=60)

    return asyncio.run(go())


async def _status(c: TestClient[Any, Any], method: str, path: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = await c.request(method, path, headers=headers)
    await resp.read()
    return resp.status


def test_default_set_up_creates_an_admin_token_0600_reads_are_open_and_an_anonymous_delete_is_401(
    data_dir: Path,
) -> None:
    settings = _settings(data_dir)
    path = default_tokens_path(data_dir)
    assert not path.exists()

    async def go(c: TestClient[Any, Any]) -> dict[str, int]:
        [admin] = json.loads(path.read_text())
        url = "/v1/content?url=http://a.com/"
        return {
            "anonymous read": await _status(c, "GET", "/v1/domain/example.co.uk"),
            "anonymous delete": await _status(c, "DELETE", url),
            "wrong token delete": await _status(c, "DELETE", url, "guess"),
            "wrong token read": await _status(c, "GET", "/v1/domain/example.co.uk", "guess"),
            # authorized, then the route's own answer: this data dir has no content store
            "admin delete": await _status(c, "DELETE", url, admin),
        }

    assert _serve_settings(settings, go) == {
        "anonymous read": 200,
        "anonymous delete": 401,
        "wrong token delete": 401,
        "wrong token read": 401,
        "admin delete": 503,
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    [(token, grant)] = json.loads(path.read_text()).items()
    assert grant == {"datasets": "*", "delete": True} and token.startswith("cst_") and len(token) > 40
    before = path.read_text()
    _serve_settings(settings, lambda c: _status(c, "GET", "/healthz"))
    assert path.read_text() == before  # a second start keeps the token


def test_a_tokens_file_makes_every_v1_request_need_a_token(data_dir: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"reader-token": [1]}))
    os.chmod(tokens, 0o600)

    async def go(c: TestClient[Any, Any]) -> list[int]:
        return [
            await _status(c, "GET", "/v1/domain/example.co.uk"),
            await _status(c, "GET", "/v1/url?url=not%20a%20url"),  # 401 before the input is looked at
            await _status(c, "GET", "/v1/domain/example.co.uk", "reader-token"),
            await _status(c, "DELETE", "/v1/content?url=http://a.com/", "reader-token"),
            await _status(c, "GET", "/healthz"),
        ]

    assert _serve_settings(_settings(data_dir, tokens_file=tokens), go) == [401, 401, 200, 403, 200]
    assert not default_tokens_path(data_dir).exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.invalid"])
def test_a_bind_beyond_loopback_without_a_tokens_file_refuses_to_start(data_dir: Path, host: str) -> None:
    with pytest.raises(ConfigError, match="CRAWLSTREAM_API_TOKENS_FILE"):
        tokens_from_settings(_settings(data_dir, host=host))
    assert not default_tokens_path(data_dir).exists()


def test_serve_beyond_loopback_without_tokens_exits_2_with_what_to_do(data_dir: Path) -> None:
    env = {**os.environ, "CRAWLSTREAM_DATA_DIR": str(data_dir)}
    proc = subprocess.run(
        [sys.executable, "-m", "crawlstream", "serve", "--api-host", "0.0.0.0", "--api-port", "0"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "beyond this machine" in proc.stderr and "Traceback" not in proc.stderr


def test_serve_on_a_taken_port_exits_2_naming_the_setting(data_dir: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "crawlstream", "serve", "--api-port", str(port)],
            env={**os.environ, "CRAWLSTREAM_DATA_DIR": str(data_dir)},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert "CRAWLSTREAM_API_PORT" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        *[("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True)],
        *[("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("", False), ("example.invalid", False)],
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tokens_rotate_without_a_restart_and_a_broken_file_keeps_the_previous_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    old = add_token(path, None, delete=False)
    failures: list[int] = []
    clock = _Clock()
    tokens = TokensFile(path, clock=clock, on_reload_failure=lambda: failures.append(1))
    new = add_token(path, [1, 2], delete=True)
    assert tokens.current().authorize(f"Bearer {new}") is None  # not re-read within the interval
    clock.now += 1.5
    grant = tokens.current().authorize(f"Bearer {new}")
    assert grant is not None and grant.datasets == frozenset({1, 2}) and grant.delete
    revoke_token(path, grant_fingerprint(tokens, old))
    clock.now += 1.5
    assert tokens.current().authorize(f"Bearer {old}") is None
    path.write_text("{ broken")
    clock.now += 1.5
    assert tokens.current().authorize(f"Bearer {new}") is not None  # the previous tokens stay
    assert failures == [1]
    clock.now += 1.5
    tokens.current()
    assert failures == [1]  # logged and counted once per change, not per check
    path.unlink()
    clock.now += 1.5
    assert tokens.current().authorize(f"Bearer {new}") is not None
    assert failures == [1, 1]


def grant_fingerprint(tokens: TokensFile, token: str) -> str:
    grant = tokens.current().authorize(f"Bearer {token}")
    assert grant is not None
    return grant.fingerprint


def test_a_rotated_token_is_used_by_the_running_api(reader: IndexReader, tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    old = add_token(path, None, delete=False)
    tokens = TokensFile(path, check_interval_s=0.0)

    async def go(c: TestClient[Any, Any]) -> list[int]:
        out = [await _status(c, "GET", "/v1/domain/example.co.uk", old)]
        new = add_token(path, [1], delete=False)
        [info] = [t for t in describe_tokens(path) if t.datasets == "*"]
        revoke_token(path, info.fingerprint)
        out += [
            await _status(c, "GET", "/v1/domain/example.co.uk", old),
            await _status(c, "GET", "/v1/domain/example.co.uk", new),
        ]
        return out

    assert run_client(reader, go, acl=tokens) == [200, 401, 200]


def test_the_tokens_command_adds_lists_and_revokes_without_printing_tokens_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "secrets" / "tokens.json"
    common = ["--api-tokens-file", str(path)]
    assert main(["tokens", "add", "--datasets", "3,1", *common]) == 0
    limited = capsys.readouterr().out.strip()
    assert main(["tokens", "add", "--delete", *common]) == 0
    admin = capsys.readouterr().out.strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert main(["tokens", "list", *common]) == 0
    listing = capsys.readouterr().out
    assert limited not in listing and admin not in listing
    rows = {(r["datasets"], r["delete"]): r["fingerprint"] for r in json.loads(listing)["tokens"]}
    assert set(rows) == {("1,3", False), ("*", True)}
    assert main(["tokens", "revoke", rows[("1,3", False)], *common]) == 0
    capsys.readouterr()
    assert [t.fingerprint for t in describe_tokens(path)] == [rows[("*", True)]]
    assert main(["tokens", "revoke", rows[("*", True)], *common]) == 2  # never the last one
    assert "last token" in capsys.readouterr().err
    assert main(["tokens", "revoke", "00000000", *common]) == 2
    assert main(["tokens", "add", "--datasets", "x", *common]) == 2
    assert admin in path.read_text()
