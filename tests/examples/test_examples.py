"""The programs in examples/ (confluent-kafka + fastavro + the contract's PSL and XXH3, no
crawlstream import) against a real Kafka broker: what they produce decodes with crawlstream's
codec in the partition crawlstream computes, seeds they submit get crawled and stored, a
dataset they import lands in the index, and the content.stored reader fetches every stored
page through the query API with matching hashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crawlstream.devtools.deployment import web_inputs
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.devtools.localproc import free_port
from crawlstream.events import TOPIC_EVENTS, EventCodec, LocalSchemaIds
from crawlstream.lake import ALIAS_DATASETS
from crawlstream.runtime import open_host
from crawlstream.settings import Settings, load
from crawlstream.store import open_store
from crawlstream.topics import URLS_DISCOVERED, URLS_RECORDS
from crawlstream.urls import canonicalize, partition_for, registered_domain_or_host
from tests.e2e.e2e_support import api_answers, crawl_env, demo_web

pytestmark = pytest.mark.kafka

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DATASET_ID = 7
PARTITIONS = 4
TIMEOUT_S = 240


@dataclass
class World:
    root: Path
    env: dict[str, str]
    settings: Settings
    bootstrap: str
    seeds: list[str]
    dataset_urls: list[str]
    outputs: dict[str, Any]


def _example(name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A clean environment: the examples must not need crawlstream's variables or its package path.
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env={"PATH": env["PATH"]},
        cwd=EXAMPLES,
    )


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlstream", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[World]:
    root = tmp_path_factory.mktemp("examples")
    hosts = (shared_data / "urls" / "protego-top-10000-websites.txt").read_text().split()[:300]
    dataset = root / "dataset.txt"
    dataset_urls = [f"https://{h}/" for h in hosts]
    dataset.write_text("# a comment\n\nnot a url\nftp://x.example/\n" + "\n".join(dataset_urls) + "\n")
    with LocalKafka(brokers=1) as kafka, demo_web(n_domains=10) as web:
        resolve_map, seeds = web_inputs(root, web)
        crawl_vars = crawl_env(
            root / "data",
            CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(resolve_map),
            CRAWLSTREAM_BUS_PARTITIONS=str(PARTITIONS),
            KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_")} | crawl_vars
        settings = load(crawl_vars)
        with open_host(settings):  # the services create their topics; so does this
            pass
        outputs: dict[str, Any] = {}
        submitted = _example(
            "submit_seeds.py", "--bootstrap-servers", kafka.bootstrap_servers, "--file", str(seeds), env=env
        )
        assert submitted.returncode == 0, submitted.stderr
        outputs["seeds"] = json.loads(submitted.stdout)
        imported = _example(
            "import_dataset.py",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--dataset-id",
            str(DATASET_ID),
            str(dataset),
            env=env,
        )
        assert imported.returncode == 0, imported.stderr
        outputs["dataset"] = json.loads(imported.stdout)
        # The crawl: `run` seeds one URL the example already submitted (dedupe keeps it once).
        crawled = _cli(["run", "--seeds", web.seed_urls()[0], "--exit-when-done"], env)
        assert crawled.returncode == 0, crawled.stderr[-3000:]
        built = _cli(["index", "build"], env)
        assert built.returncode == 0, built.stderr[-3000:]
        yield World(root, env, settings, kafka.bootstrap_servers, web.seed_urls(), dataset_urls, outputs)


def _read(settings: Settings, topic: str) -> list[Any]:
    """Every message of ``topic`` as (partition, key, decoded event), with crawlstream's codec."""
    codec = EventCodec(LocalSchemaIds.bundled())
    with open_host(settings) as host:
        ends = host.bus.end_offsets(topic)
        consumer = host.bus.consumer(f"examples-check-{topic}-{time.monotonic_ns()}")
        got = []
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 60
            while len(got) < sum(ends) and time.monotonic() < deadline:
                got += consumer.consume(1000, 0.5)
        finally:
            consumer.close()
    return [(m.partition, m.key, codec.decode(m.value, TOPIC_EVENTS[topic])) for m in got]


def test_the_producers_write_what_crawlstream_decodes_in_the_partition_it_computes(world: World) -> None:
    assert world.outputs["dataset"] == {"sent": len(world.dataset_urls), "skipped": 2, "dataset_id": DATASET_ID}
    assert world.outputs["seeds"] == {"sent": len(world.seeds), "skipped": 0}
    # the crawl's own alias rows (redirect hops, raw forms: ADR 024) share the topic
    records = [r for r in _read(world.settings, URLS_RECORDS) if r[2].dataset_id not in ALIAS_DATASETS]
    assert sorted(e.url for _, _, e in records) == sorted(world.dataset_urls)
    seeds = [(p, k, e) for p, k, e in _read(world.settings, URLS_DISCOVERED) if e.source == "external"]
    assert sorted(e.url for _, _, e in seeds) == sorted(canonicalize(u).url for u in world.seeds)
    for partition, key, event in records + seeds:
        domain = canonicalize(event.url).domain
        assert (key.decode(), event.domain) == (domain, domain)
        assert partition == partition_for(domain, PARTITIONS)
    from crawlstream.urls import url_key

    assert all(e.url_key == url_key(canonicalize(e.url)) for _, _, e in seeds), "the example's url_key is the spec's"


def test_submitted_seeds_are_crawled_and_stored(world: World) -> None:
    web = demo_web(n_domains=10)  # same model (same seed): what the crawl can reach
    store = open_store(world.settings)
    try:
        reachable_ok = {u for u in web.reachable_pages() if store.entry(u) is not None}
    finally:
        store.close()
    # `run` itself seeded one domain; every other domain was reached through the example's seeds.
    stored_domains = {canonicalize(u).domain for u in reachable_ok}
    assert stored_domains == {canonicalize(u).domain for u in web.reachable_pages()}
    assert len(stored_domains) > 5
    assert len(reachable_ok) > 40


def test_the_imported_dataset_is_answered_by_the_index(world: World) -> None:
    domains = sorted({registered_domain_or_host(canonicalize(u).host) for u in world.dataset_urls})
    answers = api_answers(world.settings, domains)
    in_dataset = {
        url
        for answer in answers.values()
        if answer is not None
        for dataset_id, walked in answer["pages"].items()
        if int(dataset_id) == DATASET_ID
        for page in walked
        for url in page
    }
    assert in_dataset == {canonicalize(u).url for u in world.dataset_urls}


def test_the_content_stored_reader_fetches_every_stored_page_through_the_api(world: World) -> None:
    port = free_port()
    env = world.env | {"CRAWLSTREAM_API_PORT": str(port), "CRAWLSTREAM_API_SERVE_CONTENT": "true"}
    server = subprocess.Popen(
        [sys.executable, "-m", "crawlstream", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
                assert time.monotonic() < deadline, "the API did not start"
                time.sleep(0.2)
        read = _example(
            "read_stored_pages.py",
            "--bootstrap-servers",
            world.bootstrap,
            "--api",
            f"http://127.0.0.1:{port}",
            "--group",
            "example-reader",
            "--max-idle-s",
            "3",
            env=world.env,
        )
    finally:
        server.terminate()
        server.wait(30)
    assert read.returncode == 0, read.stderr
    lines = [json.loads(line) for line in read.stdout.splitlines()]
    summary = lines[-1]["summary"]
    store = open_store(world.settings)
    try:
        stored_ok = [r for r in lines[:-1] if r.get("status") == 200]
        assert summary["fetched"] == len(stored_ok) > 40
        assert summary["hash_mismatch"] == 0 and summary["not_served"] == 0 and summary["undecodable"] == 0
        assert all(store.entry(r["url"]) is not None for r in stored_ok)
    finally:
        store.close()
