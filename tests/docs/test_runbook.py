"""docs/RUNBOOK.md's runnable blocks (``<!-- runbook-test: NAME -->``), run by bash exactly as
written, against a real crawl of the synthetic web on the embedded bus and a real Kafka broker;
then their effects are checked.

Token rotation (a few seconds) runs in ``make test``; replay, recovery and adding partitions
each need a crawl or a Kafka cluster of their own (20-40 s on the shared 2 cores), so they
are ``slow`` (``make test-slow``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawlstream.api._acl import fingerprint
from crawlstream.cli import main
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.localproc import free_port
from crawlstream.index import IndexReader
from crawlstream.store import Entry, ShardedStore
from crawlstream.topics import ALL_TOPICS, dlq_topic
from crawlstream.urls import domain_checksum
from tests.e2e.e2e_support import crawl_env

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "docs" / "RUNBOOK.md"
_BLOCK = re.compile(r"<!-- runbook-test: (?P<name>[\w-]+) -->\n```sh\n(?P<script>.*?)```", re.S)


def _blocks() -> dict[str, str]:
    return {m["name"]: m["script"] for m in _BLOCK.finditer(RUNBOOK.read_text(encoding="utf-8"))}


def _run_block(name: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The block through bash, ``crawlstream`` from this venv first on PATH; fails on any error
    the block does not itself tolerate."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _blocks()[name]],
        env={**env, "PATH": path},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"runbook block {name!r} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    """tests/e2e's fast, polite crawl settings on the embedded bus (Kafka and Redis variables dropped)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")}
    quiet = {"CRAWLSTREAM_LOG_LEVEL": "WARNING", "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": "1"}
    return {**env, **crawl_env(data_dir, **{**quiet, **extra})}


def test_every_crawlstream_command_of_the_runbook_is_in_a_tested_block() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    fenced = "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S))
    commands = {line for line in fenced.splitlines() if re.search(r"(^|\$\()crawlstream ", line)}
    tested = {line for script in _blocks().values() for line in script.splitlines()}
    assert set(_blocks()) == {"replay", "rotate-token", "recover-quarantined", "add-partitions"}
    assert commands and commands <= tested, commands - tested


@pytest.fixture(scope="module")
def web() -> Iterator[DemoWeb]:
    # special_every large: only the first domain has the special pages (slow, huge, failing),
    # and the crawl neither starts there nor goes deeper than the seeds' links: ~20 pages.
    # /p/0 and /p/2 change on every full response (changing_every=2).
    with DemoWeb(
        4, pages_per_domain=4, seed=2, special_every=1000, crawl_delay_s=0.05, slow_s=0.2, huge_bytes=65536,
        bomb_bytes=524288, sitemap_bomb_bytes=524288, changing_every=2,
    ) as w:  # fmt: skip
        yield w


@pytest.fixture(scope="module")
def crawled(web: DemoWeb, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A finished ``crawlstream run`` of the synthetic web: data dir and the environment to resume it."""
    root = tmp_path_factory.mktemp("runbook")
    resolve_map = root / "resolve.json"
    resolve_map.write_text(json.dumps(web.resolve_map))
    env = _env(root / "data", CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map), CRAWLSTREAM_SCHEDULER_MAX_DEPTH="1")
    done = subprocess.run(
        [sys.executable, "-m", "crawlstream", "run", "--exit-when-done", "--seeds", *web.seed_urls()[1:]],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[0])["pages"] > 5
    return root / "data", env


@pytest.mark.slow
def test_runbook_replay_rebuilds_an_index_that_answers_for_the_crawled_domains(
    crawled: tuple[Path, dict[str, str]], web: DemoWeb, tmp_path: Path
) -> None:
    _, env = crawled
    done = _run_block("replay", env, tmp_path)
    info = json.loads(done.stdout[done.stdout.rindex("\n{") + 1 :])  # `index info`: the last document
    assert info["current_version"] and info["versions"][0]["urls"] > 0
    reader = IndexReader(tmp_path / "rebuilt")
    try:
        with reader.pin() as index:
            for url in web.seed_urls()[1:]:
                domain = url.split("//")[1].split("/")[0].removeprefix("www.")
                assert index.datasets_for_domain(domain), domain
    finally:
        reader.close()


def _status_code(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_runbook_token_rotation_takes_effect_in_the_running_api_within_a_second(tmp_path: Path) -> None:
    env = _env(tmp_path / "data")
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"old-token": "*"}))
    port = free_port()
    env = {**env, "CRAWLSTREAM_API_TOKENS_FILE": str(tokens), "CRAWLSTREAM_API_PORT": str(port)}
    api = subprocess.Popen([sys.executable, "-m", "crawlstream", "serve"], env=env, stderr=subprocess.PIPE)
    status = f"http://127.0.0.1:{port}/v1/status"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert api.poll() is None, api.stderr.read().decode()[-2000:] if api.stderr else ""
            try:
                assert _status_code(status, "old-token") == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "crawlstream serve did not listen within 30 s"
                time.sleep(0.1)
        done = _run_block("rotate-token", {**env, "OLD_FINGERPRINT": fingerprint("old-token")}, tmp_path)
        finished = time.monotonic()
        (new_token,) = json.loads(tokens.read_text())
        assert new_token != "old-token" and fingerprint(new_token) in done.stdout  # `tokens list` shows it
        assert new_token not in done.stdout + done.stderr  # captured in $NEW_TOKEN, never echoed
        while (_status_code(status, new_token), _status_code(status, "old-token")) != (200, 401):
            assert time.monotonic() - finished < 1.5, "the API did not pick up the rotation within 1 s (+ slack)"
            time.sleep(0.05)
    finally:
        api.send_signal(signal.SIGTERM)
        try:
            api.wait(15)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait(5)


@dataclass(frozen=True)
class _Recovery:
    changed: tuple[str, bytes]  # a page whose body changes on every fetch, and its damaged body
    unchanged: tuple[str, bytes]  # a page whose body stays the same
    fetches: dict[str, int]  # per victim: requests the web saw during the recovery
    output: str
    data_dir: Path


def _damage(data_dir: Path, entry: Entry) -> None:
    shard = data_dir / "store" / "shards" / f"{domain_checksum(entry.domain):03d}"
    segment = shard / "segments" / entry.location.segment
    data = bytearray(segment.read_bytes())
    data[entry.location.offset + entry.location.length - 10] ^= 0x55
    segment.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def recovery(crawled: tuple[Path, dict[str, str]], web: DemoWeb, tmp_path_factory: pytest.TempPathFactory) -> _Recovery:
    """Two stored pages damaged, then the runbook's recovery block run once."""
    data_dir, env = crawled
    with ShardedStore(data_dir / "store") as store:
        entries = [e for d in sorted({e.domain for e in store.search(path_prefix="")}) for e in store.search(d)]
        # Pages alone in their record (no other URL shares the body), so exactly they are damaged.
        alone = [e for e in entries if sum(o.location == e.location for o in entries) == 1]
        changing = web.model.changing_pages()
        changed = next(e for e in alone if e.url in changing)
        unchanged = next(e for e in alone if e.url.endswith("/p/1"))
        bodies = {e.url: store.get(e.url) for e in (changed, unchanged)}
    for victim in (changed, unchanged):
        _damage(data_dir, victim)
    before = Counter(r.url for r in web.requests())
    done = _run_block("recover-quarantined", env, tmp_path_factory.mktemp("recover"))
    after = Counter(r.url for r in web.requests())
    return _Recovery(
        (changed.url, bodies[changed.url]),
        (unchanged.url, bodies[unchanged.url]),
        {u: after[u] - before[u] for u in bodies},
        done.stdout,
        data_dir,
    )


@pytest.mark.slow
def test_runbook_recovery_finds_the_damaged_pages_and_fetches_each_again_once(recovery: _Recovery) -> None:
    for url, _ in (recovery.changed, recovery.unchanged):
        assert url in recovery.output  # `store verify` / `store stats` name it
        assert recovery.fetches[url] == 1


@pytest.mark.slow
def test_runbook_recovery_serves_the_new_body_of_a_page_that_changed(recovery: _Recovery) -> None:
    url, damaged = recovery.changed
    with ShardedStore(recovery.data_dir / "store") as store:
        body = store.get(url)
        assert body != damaged and body.startswith(damaged[:15])  # a newer revision of the same page
        assert url not in store.stats().quarantined_urls


@pytest.mark.slow
def test_runbook_recovery_repairs_a_page_whose_body_did_not_change(recovery: _Recovery) -> None:
    url, body = recovery.unchanged
    with ShardedStore(recovery.data_dir / "store") as store:
        assert store.get(url) == body


@pytest.mark.slow
@pytest.mark.kafka
def test_runbook_add_partitions_grows_every_topic_together(tmp_path: Path) -> None:
    with LocalKafka(brokers=1, partitions=16) as kafka:
        env = _env(tmp_path / "data", KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers)
        done = _run_block("add-partitions", env, tmp_path)
    created, grown = (json.loads(line) for line in done.stdout.splitlines())
    names = {*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)}
    assert created["topics"] == dict.fromkeys(names, 16)
    assert grown["topics"] == dict.fromkeys(names, 32)
    assert grown["grown"] == {name: [16, 32] for name in names}
    assert "restart every service" in done.stderr


def test_add_partitions_refuses_the_embedded_bus_and_a_non_divisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in _env(tmp_path / "data").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert main(["topics", "add-partitions", "--partitions", "32"]) == 2
    assert "embedded bus's partition count is fixed" in capsys.readouterr().err
    assert main(["topics", "add-partitions", "--partitions", "24"]) == 2
    assert "divisor of 128" in capsys.readouterr().err
    assert main(["topics", "add-partitions"]) == 2
    assert "divisor of 128" in capsys.readouterr().err
    assert not (tmp_path / "data" / "bus").exists()  # nothing was opened
