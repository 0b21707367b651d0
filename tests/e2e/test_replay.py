"""``crawlstream replay``: the lake and index rebuilt from the topics answer exactly as the live ones.

On each backend (the embedded log, a real Kafka broker): a URL dataset (real hostnames from
protego's top-websites list, plus some of the synthetic web's domains, so those domains are in
two datasets) is produced to ``urls.records`` with a few garbage messages on both replay
sources, then ``crawlstream run`` crawls the synthetic web (the Parquet sink writes the live
lake), ``crawlstream index build`` builds the live index, and ``crawlstream replay --into``
rebuilds both in an empty directory. The query API over each must answer every
``/v1/domain/{d}`` and every page of every URL listing identically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from e2e_support import api_answers, crawl_env, demo_web, indexed_urls, url_answers

from crawlstream.devtools.deployment import web_inputs
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.errors import ConfigError
from crawlstream.events import UrlRecord
from crawlstream.lake import LAKE_SCHEMA, REDIRECTS_DATASET, lake_urls
from crawlstream.replay import STATE_FILE, check_retained, prepare_target
from crawlstream.runtime import open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import CONTENT_STORED, REPLAY_SOURCES, URLS_RECORDS, dlq_topic
from crawlstream.urls import registered_domain_or_host

DATASET_ID = 7
DATASET_HOSTS = 400
INGESTED_ID = 9  # a CSV imported with `crawlstream ingest` (lake written directly, records marked)
INGESTED_HOSTS = 200
GARBAGE = {CONTENT_STORED: [b"\x00\x00\x00\x00\x01not avro", b"junk"], URLS_RECORDS: [b"\xff" * 9]}
TIMEOUT_S = 240


@dataclass
class Live:
    """A crawled and indexed data dir, and how to reach its bus."""

    root: Path
    env: dict[str, str]
    settings: Settings
    domains: list[str]
    answers: dict[str, Any]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update(extra)
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "crawlstream", *args], env=env, capture_output=True, timeout=TIMEOUT_S, check=False
    )


def _produce_dataset_and_garbage(settings: Settings, hosts: list[str]) -> None:
    with open_host(settings) as host:
        events = host.event_producer()
        for i, name in enumerate(hosts):
            events.send(URLS_RECORDS, UrlRecord(DATASET_ID, f"https://{name}/", ts_ms=1_700_000_000_000 + i))
        events.flush()
        raw = host.bus.producer()
        for topic, values in GARBAGE.items():
            for value in values:
                raw.produce(topic, value, partition=0, key=b"garbage.example")
        raw.flush()
        raw.close()


@pytest.fixture(scope="module", params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[Live]:
    root = tmp_path_factory.mktemp(f"replay-{request.param}")
    all_hosts = (shared_data / "urls" / "protego-top-10000-websites.txt").read_text().split()
    real_hosts = all_hosts[:DATASET_HOSTS]
    with LocalKafka(brokers=1) if request.param == "kafka" else _nothing() as kafka, demo_web(n_domains=12) as web:
        resolve_map, seeds = web_inputs(root, web)
        extra = {"CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE": str(resolve_map), "CRAWLSTREAM_BUS_PARTITIONS": "8"}
        if kafka is not None:
            extra["KAFKA_BOOTSTRAP_SERVERS"] = kafka.bootstrap_servers
        crawl_vars = crawl_env(root / "live", **extra)
        env, settings = _env(crawl_vars), load(crawl_vars)
        web_domains = sorted({registered_domain_or_host(h) for h in web.hosts})
        _produce_dataset_and_garbage(settings, real_hosts + [f"www.{d}" for d in web_domains[:4]])
        ingested_hosts = all_hosts[DATASET_HOSTS : DATASET_HOSTS + INGESTED_HOSTS]
        csv = root / "ingested.csv"
        csv.write_text("url,rank\n" + "".join(f"https://{h}/,{i}\n" for i, h in enumerate(ingested_hosts)))
        ingested = _cli(["ingest", str(csv), "--dataset-id", str(INGESTED_ID)], env)
        assert ingested.returncode == 0, ingested.stderr.decode()[-3000:]
        crawled = _cli(["run", "--seeds", str(seeds), "--exit-when-done"], env)
        assert crawled.returncode == 0, crawled.stderr.decode()[-3000:]
        built = _cli(["index", "build"], env)
        assert built.returncode == 0, built.stderr.decode()[-3000:]
        domains = sorted({*web_domains, *(registered_domain_or_host(h) for h in real_hosts + ingested_hosts)})
        yield Live(root, env, settings, domains, api_answers(settings, domains))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture(scope="module")
def replayed(live: Live) -> tuple[dict[str, Any], subprocess.CompletedProcess[bytes], Path]:
    into = live.root / "rebuilt"
    done = _cli(["replay", "--into", str(into)], live.env)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1]), done, into


def test_the_rebuilt_index_answers_every_domain_and_every_page_as_the_live_one(live: Live, replayed: Any) -> None:
    summary, _, into = replayed
    settings = load({"CRAWLSTREAM_DATA_DIR": str(into), **_crawl_vars(live)})
    rebuilt = api_answers(settings, live.domains)
    assert rebuilt == live.answers
    listed = indexed_urls(rebuilt)
    assert len(listed) == len(set(listed)) > DATASET_HOSTS
    both = [a for a in live.answers.values() if a is not None and len(a["datasets"]) == 2]
    assert both, "some crawled domains are also in the dataset"
    ingested = [
        a for a in live.answers.values() if a is not None and INGESTED_ID in {d["dataset_id"] for d in a["datasets"]}
    ]
    assert len(ingested) > INGESTED_HOSTS // 2, "the dataset `crawlstream ingest` imported is rebuilt too"
    assert summary["events"] > DATASET_HOSTS


def test_the_rebuilt_alias_map_answers_every_redirect_as_the_live_one(live: Live, replayed: Any) -> None:
    """Redirect hops live in the lake (ADR 024): replay rebuilds them from ``urls.records``."""
    _, _, into = replayed
    files = list((live.settings.data_dir / "urls" / f"dataset_id={REDIRECTS_DATASET}").rglob("*.parquet"))
    redirecting = sorted(
        {u.as_py() for f in files for u in lake_urls(pq.read_table(f, schema=LAKE_SCHEMA))}
    )
    assert any(u.endswith("/chain/1") for u in redirecting), "the crawl recorded the web's 3-hop chain"
    live_answers = url_answers(live.settings, redirecting)
    assert all(a["redirects"] for a in live_answers.values())
    assert sum(len(a["redirects"]) >= 3 for a in live_answers.values()) >= 1
    rebuilt = load({"CRAWLSTREAM_DATA_DIR": str(into), **_crawl_vars(live)})
    assert url_answers(rebuilt, redirecting) == live_answers


def _crawl_vars(live: Live) -> dict[str, str]:
    return {k: v for k, v in live.env.items() if k.startswith("CRAWLSTREAM_") and k != "CRAWLSTREAM_DATA_DIR"} | (
        {"KAFKA_BOOTSTRAP_SERVERS": live.env["KAFKA_BOOTSTRAP_SERVERS"]}
        if "KAFKA_BOOTSTRAP_SERVERS" in live.env
        else {}
    )


def test_garbage_on_the_replay_sources_is_dead_lettered_and_the_replay_completes(live: Live, replayed: Any) -> None:
    summary, _, _ = replayed
    assert summary["dead_lettered"] == sum(len(v) for v in GARBAGE.values())
    assert summary["interrupted"] is False
    with open_host(live.settings) as host:
        # The live sink dead-lettered them once, the replay once more.
        for topic, values in GARBAGE.items():
            assert sum(host.bus.end_offsets(dlq_topic(topic))) == 2 * len(values)


def test_progress_shows_events_per_second_and_an_eta(replayed: Any) -> None:
    _, done, into = replayed
    progress = done.stderr.decode()
    assert "events/s" in progress and "ETA" in progress
    assert json.loads((into / STATE_FILE).read_text())["done"] is True


def test_a_second_replay_into_a_finished_directory_is_refused(live: Live, replayed: Any) -> None:
    _, _, into = replayed
    again = _cli(["replay", "--into", str(into)], live.env)
    assert again.returncode == 2
    assert "already holds a finished replay" in again.stderr.decode()


def test_an_interrupted_replay_resumes_and_ends_with_the_same_answers(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawlstream.cli import _replay
    from crawlstream.cli._replay import replay_into

    # small polls: one batch cannot reach the end of the topics, however fast the machine
    monkeypatch.setattr(_replay, "BATCH_SIZE", 20)
    into = live.root / "resumed"
    state, resumed = prepare_target(into, sorted(REPLAY_SOURCES))
    assert not resumed
    calls = {"n": 0}

    def stop_soon() -> bool:  # after one batch
        calls["n"] += 1
        return calls["n"] > 1

    sink = open(os.devnull, "w")  # noqa: SIM115
    try:
        first = replay_into(live.settings, into, state, should_stop=stop_soon, progress_out=sink)
        assert first["interrupted"] is True
        state, resumed = prepare_target(into, sorted(REPLAY_SOURCES))
        assert resumed
        second = replay_into(live.settings, into, state, resumed=True, progress_out=sink)
    finally:
        sink.close()
    assert second["interrupted"] is False and second["resumed"] is True
    settings = load({"CRAWLSTREAM_DATA_DIR": str(into), **_crawl_vars(live)})
    assert api_answers(settings, live.domains) == live.answers


def test_a_non_empty_directory_is_refused_naming_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "something.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"not empty \(something.txt\)"):
        prepare_target(tmp_path, [CONTENT_STORED])


def test_a_work_topic_is_not_a_replay_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="work topics"):
        prepare_target(tmp_path / "new", ["fetch.results"])


def test_a_topic_whose_beginning_retention_deleted_is_refused() -> None:
    check_retained({CONTENT_STORED: [0, 0], URLS_RECORDS: [0]})
    with pytest.raises(ConfigError, match=r"content.stored\[1\] starts at 42"):
        check_retained({CONTENT_STORED: [0, 42], URLS_RECORDS: [0]})


@pytest.mark.kafka
def test_replay_refuses_a_kafka_topic_whose_beginning_was_deleted(tmp_path: Path) -> None:
    """Records deleted from the front of content.stored (as retention would): a clear error,
    exit 2, and nothing written."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient

    with LocalKafka(brokers=1) as kafka:
        env = _env({"CRAWLSTREAM_DATA_DIR": str(tmp_path / "live"), "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers})
        with open_host(load(env)) as host:
            producer = host.bus.producer()
            for i in range(3):
                producer.produce(CONTENT_STORED, b"x%d" % i, partition=1)
            producer.close()
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        [future] = admin.delete_records([KafkaTopicPartition(CONTENT_STORED, 1, 2)]).values()
        future.result(10)
        refused = _cli(["replay", "--into", str(tmp_path / "rebuilt")], env)
    assert refused.returncode == 2
    assert "content.stored[1] starts at 2" in refused.stderr.decode()
    assert not (tmp_path / "rebuilt").exists()
