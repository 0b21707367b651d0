"""The distributed crawl on a real Apache Kafka cluster, every service its own OS process
(issue 11; the deployment is ``kafka_support``): one crawl judged against the embedded crawl of
the same web and against the web's own request log (the same stored pages, the same API
answers on every ``/v1/domain/{d}`` and every page of every URL listing, every stored page
served by ``/v1/content`` as the store holds it, each reachable page fetched, no
robots-disallowed path, per-domain spacing kept); ``crawlstream run`` on Kafka; a scheduler
and a bucket-compressor member SIGKILLed mid-crawl and members added.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from e2e_support import (
    assert_domain_spacing,
    assert_each_reachable_page_fetched_once,
    assert_no_robots_disallowed_fetch,
    demo_web,
    indexed_urls,
    page_requests,
)
from kafka_support import (
    CRAWL_TIMEOUT_S,
    DEPLOYMENT,
    PARTITIONS,
    START_TIMEOUT_S,
    Deployment,
    KafkaCrawl,
    MidCrawl,
    Reference,
    ServiceProcess,
    crawled,
    deployment_of,
    read_topic,
    wait_for,
    wait_for_pages,
)

from crawlstream.bus import KafkaBus, TopicPartition
from crawlstream.cli._run import CRAWL_SERVICES
from crawlstream.lake import is_compacted, list_lake_files
from crawlstream.lake.service import staging_root
from crawlstream.settings import Settings
from crawlstream.topics import ALL_TOPICS, CONTENT_STORED, FETCH_REQUESTS, FETCH_RESULTS, URLS_DISCOVERED, URLS_FRONTIER
from crawlstream.urls import partition_for

# A loaded machine stretches start-up and the crawl: bounds of their own above the default 300 s.
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCrawl]:
    with crawled(tmp_path_factory.mktemp("kafka-crawl")) as done:
        yield done



def test_the_crawl_fetches_the_same_set_of_pages_as_the_embedded_crawl(crawl: KafkaCrawl) -> None:
    assert {r.url for r in crawl.pages} == crawl.web.reachable_pages()


def test_the_crawl_stores_and_indexes_exactly_what_the_embedded_crawl_does(
    crawl: KafkaCrawl, reference: Reference
) -> None:
    """Same stored pages; the API answers every domain and every page of every URL listing alike."""
    assert crawl.stored and crawl.stored == reference.stored
    assert crawl.answers == reference.answers
    listed = indexed_urls(crawl.answers)
    assert len(listed) == len(set(listed)) > 100


def test_every_stored_page_is_served_by_the_content_api_as_the_store_holds_it(
    crawl: KafkaCrawl, reference: Reference
) -> None:
    """With the services stopped, ``GET /v1/content`` answers every stored URL with the body the
    store holds, in the distributed crawl as in the embedded one; the two stored the same
    bodies, each page once (as many records, and full bodies, in the segments)."""
    for done in (crawl.store, reference.store):
        assert len(done.served) == len(done.digests) > 100
        assert done.served == done.digests
        assert not done.problems
    assert crawl.store.digests == reference.store.digests
    assert crawl.store.counts() == reference.store.counts()


def test_each_bucket_compressor_member_stores_the_pages_of_its_own_shards(crawl: KafkaCrawl) -> None:
    """A member writes shard c only while it holds fetch.results[c mod P] (the store refuses a
    write to a shard it does not own). No partition moved during the crawl: what each member
    held when the crawl was seeded it still held when it was stopped. So every shard holding
    pages was written by one member, and both members wrote some."""
    members = [p for p in crawl.processes if p.name == "bucket-compressor"]
    held = [{tp.partition for tp in owned} for owned in crawl.ownership["bucket-compressor"]]
    assert len(members) == len(held) == 2
    assert held[0].isdisjoint(held[1]) and held[0] | held[1] == set(range(PARTITIONS))
    for member, partitions in zip(members, held, strict=True):
        assert {tp.partition for tp in member.owned()} == partitions, member.tail()
    written = set(crawl.store.shards.values())
    by_member = [{c for c in written if c % PARTITIONS in partitions} for partitions in held]
    assert all(by_member), by_member


def lake_file_tags(settings: Settings) -> Counter[str]:
    """How many published (uncompacted) lake files carry each writer tag: ``part-<ms>-<tag>-<random>``."""
    tags: Counter[str] = Counter()
    for lake_file in list_lake_files(settings.data_dir):
        if is_compacted(lake_file.path):
            continue
        parts = lake_file.path.rsplit("/", 1)[-1].split("-")
        assert len(parts) == 4, lake_file.path
        tags[parts[2]] += 1
    return tags


def test_each_parquet_sink_member_publishes_lake_files_under_its_own_name(crawl: KafkaCrawl) -> None:
    """Each member stages in a directory of its own and names its lake files after it."""
    members = sorted(d.name for d in staging_root(crawl.settings).iterdir() if d.is_dir())
    assert len(members) == DEPLOYMENT["parquet-sink"] == 2
    # LakeWriter's file tag: the staging directory's name, '-' and '/' replaced, at most 40 characters
    expected = {re.sub(r"[^A-Za-z0-9.]", "_", name)[:40] for name in members}
    tags = lake_file_tags(crawl.settings)
    assert set(tags) == expected, (tags, members)


def test_no_page_is_fetched_twice_beyond_its_retries(crawl: KafkaCrawl) -> None:
    assert_each_reachable_page_fetched_once(crawl.web, crawl.pages)


def test_no_robots_disallowed_path_is_fetched(crawl: KafkaCrawl) -> None:
    assert_no_robots_disallowed_fetch(crawl.web, crawl.pages)


def test_requests_to_one_domain_are_spaced_by_the_delay_or_crawl_delay(crawl: KafkaCrawl) -> None:
    """Politeness holds across processes: the scheduler group owns each domain in one member."""
    assert_domain_spacing(crawl.web, crawl.pages)


def test_members_of_a_scaled_group_share_its_partitions(crawl: KafkaCrawl) -> None:
    for name, owned in crawl.ownership.items():
        assert len(owned) == DEPLOYMENT[name]
        assert all(owned), f"every {name} process owns partitions"
    for owned in crawl.ownership["scheduler"]:
        # Co-partitioned: the member owning urls.frontier[p] owns fetch.results[p] (its domains).
        by_topic = defaultdict(set)
        for tp in owned:
            by_topic[tp.topic].add(tp.partition)
        assert len(set(map(frozenset, by_topic.values()))) == 1, owned


def test_every_service_process_stops_cleanly_on_sigterm(crawl: KafkaCrawl) -> None:
    assert {(p.name, p.returncode) for p in crawl.processes} == {(p.name, 0) for p in crawl.processes}, "\n".join(
        p.tail() for p in crawl.processes if p.returncode != 0
    )


def test_every_event_decodes_in_the_process_that_consumes_it(crawl: KafkaCrawl) -> None:
    """The wire format (Confluent framing, schema ids) holds across processes: no dead letters."""
    for process in crawl.processes:
        log = process.log.read_text(errors="replace")
        assert "dead-lettering" not in log and "Traceback" not in log, process.tail()


def test_topics_have_the_configured_partitions_and_keys_land_on_the_domain_checksum_partition(
    crawl: KafkaCrawl,
) -> None:
    """The published contract, read back from the brokers: every topic the services created
    has CRAWLSTREAM_BUS_PARTITIONS partitions, and every message keyed by domain D sits in
    partition checksum(D) mod P."""
    admin = AdminClient({"bootstrap.servers": crawl.bootstrap_servers})
    metadata = admin.list_topics(timeout=10)
    assert {t: len(metadata.topics[t].partitions) for t in ALL_TOPICS} == dict.fromkeys(ALL_TOPICS, PARTITIONS)
    checked: Counter[str] = Counter()
    bus = KafkaBus(crawl.bootstrap_servers)
    try:
        for topic in (URLS_DISCOVERED, URLS_FRONTIER, FETCH_REQUESTS, FETCH_RESULTS, CONTENT_STORED):
            for message in read_topic(bus, topic):
                assert message.key is not None
                assert message.partition == partition_for(message.key.decode(), PARTITIONS), message
                checked[topic] += 1
    finally:
        bus.close()
    assert min(checked.values()) > 100, checked


def test_crawlstream_run_on_kafka_exits_when_done_with_the_same_pages(tmp_path: Path) -> None:
    """``crawlstream run --exit-when-done`` tells a drained crawl on Kafka too (Bus.end_offsets)."""
    with deployment_of(tmp_path, demo_web(n_domains=10)) as where:
        command = [sys.executable, "-m", "crawlstream", "run", "--seeds", str(where.seeds), "--exit-when-done"]
        command += ["--services", ",".join(CRAWL_SERVICES)]
        log = tmp_path / "run.log"
        with log.open("wb") as err:
            process = subprocess.Popen(command, env=where.env, stdout=subprocess.PIPE, stderr=err)
        try:
            out, _ = process.communicate(timeout=CRAWL_TIMEOUT_S)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        assert process.returncode == 0, log.read_text(errors="replace")[-3000:]
        pages = page_requests(where.web.requests())
        summary = json.loads(out.decode().strip().splitlines()[-1])
        assert summary["reason"] == "drained"
        assert {r.url for r in pages} == where.web.reachable_pages()
        # Every request the server saw is a result with a status, but those that timed out.
        assert summary["pages"] + summary["by_outcome"]["timeout"] == len(pages)


# -- faults --------------------------------------------------------------------------------


def kill_a_scheduler_then_add_one(
    where: Deployment, processes: list[ServiceProcess]
) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
    """A third of the way in, SIGKILL one scheduler member (its partitions move once its
    session times out); a little later start a new member (a second rebalance)."""
    total = len(where.web.reachable_pages())
    wait_for_pages(where, processes, total // 3, "a third of the crawl")
    victim = next(p for p in processes if p.name == "scheduler")
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait(10)
    victim.returncode = victim.process.returncode
    wait_for_pages(where, [p for p in processes if p is not victim], total // 2, "half of the crawl")
    newcomer = ServiceProcess.start("scheduler", where.env, victim.log.with_name("scheduler-new.log"))
    return [victim], [newcomer]


def test_a_member_killed_and_a_member_added_mid_crawl_lose_nothing_and_stay_polite(
    tmp_path: Path, reference: Reference
) -> None:
    fault = MidCrawl(kill_a_scheduler_then_add_one)
    # A ticket recorded just before the kill, whose request never reached the bus, is handed
    # out again when its lease runs out: keep that short (but above the fetch timeout).
    with crawled(tmp_path, fault, CRAWLSTREAM_SCHEDULER_LEASE_S="3") as done:
        done.assert_every_reachable_page_fetched()
        assert_no_robots_disallowed_fetch(done.web, done.pages)
        assert_domain_spacing(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        newcomer = done.processes[-1]
        assert newcomer.owned() or "assigned" in newcomer.log.read_text(), newcomer.tail()


@dataclass
class KillACompressorThenAddOne:
    """A quarter of the way in, SIGKILL one bucket-compressor member; once the other holds every
    fetch.results partition (the victim's session timed out: its shards' locks died with it),
    let the crawl go on an eighth more, then start a third member (a second rebalance: the
    survivor releases the shards of the partitions it gives the newcomer)."""

    victim: ServiceProcess | None = None
    survivor: ServiceProcess | None = None
    victim_partitions: set[int] = field(default_factory=set)
    taken_over_ms: int = 0  # wall clock once the survivor was seen holding the victim's partitions

    def __call__(
        self, where: Deployment, processes: list[ServiceProcess]
    ) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
        total = len(where.web.reachable_pages())
        wait_for_pages(where, processes, total // 4, "a quarter of the crawl")
        victim, survivor = [p for p in processes if p.name == "bucket-compressor"]
        self.victim, self.survivor = victim, survivor
        self.victim_partitions = {tp.partition for tp in victim.owned()}
        assert self.victim_partitions and not {tp.partition for tp in survivor.owned()} & self.victim_partitions
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(10)
        victim.returncode = victim.process.returncode
        alive = [p for p in processes if p is not victim]
        every = {TopicPartition(FETCH_RESULTS, i) for i in range(PARTITIONS)}
        # its log's "assigned" lines name the victim's partitions once the group has moved them
        wait_for(lambda: survivor.owned() == every, "the survivor holds every partition", START_TIMEOUT_S, alive,
                 where.kafka)
        self.taken_over_ms = int(time.time() * 1000)
        before = len(page_requests(where.web.requests()))
        # capped: every reachable page is requested at least once, however far the crawl got
        wait_for_pages(where, alive, min(before + total // 8, total), "an eighth more of the crawl")
        log = victim.log.with_name("bucket-compressor-new.log")
        newcomer = ServiceProcess.start("bucket-compressor", where.env, log)
        return [victim], [newcomer]


def test_a_bucket_compressor_killed_and_one_added_mid_crawl_store_every_page_once(
    tmp_path: Path, reference: Reference
) -> None:
    """Issue 25: the shards move with the partitions. Nothing is lost, nothing stored twice, every
    page stays readable, the survivor writes the dead member's shards, the newcomer gets a share.

    Stored twice would show in the segments: a put is idempotent by (URL, content hash), and a
    restarted shard re-indexes the complete records its killed writer left past the index, so a
    batch the survivor replays writes no record. Each URL is one record (``records == urls``) and
    the store holds exactly the embedded crawl's records and full bodies (identical bodies are
    kept once per shard there too)."""
    fault = KillACompressorThenAddOne()
    with crawled(tmp_path, MidCrawl(fault)) as done:
        assert (fault.victim is not None) and fault.victim.returncode == -signal.SIGKILL
        done.assert_every_reachable_page_fetched()
        assert_each_reachable_page_fetched_once(done.web, done.pages)  # the fetching side did not notice
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        # every page readable, from the store and through the API, as the embedded crawl stored it
        assert not done.store.problems
        assert done.store.served == done.store.digests == reference.store.digests
        # each page stored once
        assert done.store.urls == done.store.records == len(done.stored)
        assert done.store.counts() == reference.store.counts()
        # the victim's shards were taken over: pages fetched after the survivor held their
        # partitions (so stored by the survivor or the newcomer) are in them
        later = {u for u, ms in done.store.fetched_at_ms.items() if ms > fault.taken_over_ms}
        taken = {u for u in later if done.store.shards[u] % PARTITIONS in fault.victim_partitions}
        assert taken, (len(later), sorted(fault.victim_partitions))
        newcomer = done.processes[-1]
        assert newcomer.name == "bucket-compressor" and newcomer.returncode == 0
        assert any(owned for owned in newcomer.ownership_history()), newcomer.tail()
