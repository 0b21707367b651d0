"""Faults of the Kafka cluster itself under the distributed crawl (``kafka_support``): the broker
leading the most partitions SIGKILLed (3 brokers, replication 3, min.insync.replicas 2), the
whole cluster down for a while, and a seeded kill -9 schedule of every service. Each crawl must
equal the embedded crawl of the same web: nothing lost, nothing duplicated, still polite.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from e2e_support import assert_domain_spacing, assert_no_robots_disallowed_fetch, indexed_urls, page_requests
from kafka_support import (
    DEPLOYMENT,
    Deployment,
    MidCrawl,
    Reference,
    ServiceProcess,
    crawled,
    logger,
    wait_for_pages,
)

from crawlstream.topics import ALL_TOPICS

# A loaded machine stretches start-up and the crawl: bounds of their own above the default 300 s.
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]


def leader_of_most_partitions(bootstrap_servers: str) -> int:
    """The broker id that leads the most partitions of the crawl's topics."""
    metadata = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=10)
    leaders = Counter(
        p.leader for name in ALL_TOPICS if name in metadata.topics for p in metadata.topics[name].partitions.values()
    )
    return leaders.most_common(1)[0][0]


def kill_the_busiest_broker_then_restart_it(
    where: Deployment, processes: list[ServiceProcess]
) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
    total = len(where.web.reachable_pages())
    wait_for_pages(where, processes, total // 4, "a quarter of the crawl")
    victim = leader_of_most_partitions(where.kafka.bootstrap_servers)
    logger.info("killing Kafka broker %d (leads the most partitions)", victim)
    where.kafka.kill(victim, signal.SIGKILL)
    before = len(page_requests(where.web.requests()))
    wait_for_pages(where, processes, before + total // 5, "the crawl goes on without it")
    where.kafka.restart(victim)
    return [], []


def test_the_broker_leading_most_partitions_killed_mid_crawl_loses_and_duplicates_nothing(
    tmp_path: Path, reference: Reference
) -> None:
    """3 brokers, replication factor 3, min.insync.replicas 2, acks=all."""
    fault = MidCrawl(kill_the_busiest_broker_then_restart_it)
    with crawled(
        tmp_path,
        fault,
        brokers=3,
        CRAWLSTREAM_BUS_REPLICATION_FACTOR="3",
        CRAWLSTREAM_BUS_MIN_INSYNC_REPLICAS="2",
        # Well above a broker failover (the controller drops a dead broker after 9 s): no
        # ticket is reclaimed while its request waits in a producer's queue.
        CRAWLSTREAM_SCHEDULER_LEASE_S="30",
    ) as done:
        metadata = AdminClient({"bootstrap.servers": done.bootstrap_servers}).list_topics(timeout=10)
        assert {len(p.replicas) for t in ALL_TOPICS for p in metadata.topics[t].partitions.values()} == {3}
        done.assert_every_reachable_page_fetched()
        assert_domain_spacing(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        listed = indexed_urls(done.answers)
        assert len(listed) == len(set(listed)), "nothing duplicated in what the API answers"


def stop_the_only_broker_for_a_while(
    where: Deployment, processes: list[ServiceProcess]
) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
    """A whole-cluster outage: the single broker SIGKILLed a quarter of the way in, back after
    OUTAGE_S. Every service must wait it out (nothing to produce to, nothing to commit to)."""
    total = len(where.web.reachable_pages())
    wait_for_pages(where, processes, total // 4, "a quarter of the crawl")
    [node] = where.kafka.node_ids
    where.kafka.kill(node, signal.SIGKILL)
    deadline = time.monotonic() + OUTAGE_S
    while time.monotonic() < deadline:
        dead = [p.tail() for p in processes if p.process.poll() is not None]
        assert not dead, "a service exited during the outage:\n" + "\n".join(dead)
        time.sleep(0.5)
    where.kafka.restart(node)
    return [], []


OUTAGE_S = 15.0


def test_a_cluster_outage_makes_every_service_wait_and_resume_without_loss(
    tmp_path: Path, reference: Reference
) -> None:
    fault = MidCrawl(stop_the_only_broker_for_a_while)
    with crawled(tmp_path, fault, CRAWLSTREAM_SCHEDULER_LEASE_S="60") as done:
        assert all(p.returncode == 0 for p in done.processes), [(p.name, p.returncode) for p in done.processes]
        done.assert_every_reachable_page_fetched()
        assert_domain_spacing(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers


KILL_SCHEDULE_SEED = 16


@dataclass
class KillSchedule:
    """A seeded, repeatable schedule of SIGKILLs: every kind of service once, each at a random
    point of the crawl (a fraction of its pages), a random member of it, restarted at once
    (a new process with the same role: its partitions come back after a rebalance)."""

    seed: int
    kills: list[tuple[float, str, int]] = field(default_factory=list)  # (fraction, service, member)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        moments = sorted(rng.uniform(0.1, 0.8) for _ in DEPLOYMENT)
        services = list(DEPLOYMENT)
        rng.shuffle(services)
        self.kills = [(at, name, rng.randrange(DEPLOYMENT[name])) for at, name in zip(moments, services, strict=True)]

    def __call__(
        self, where: Deployment, processes: list[ServiceProcess]
    ) -> tuple[list[ServiceProcess], list[ServiceProcess]]:
        total = len(where.web.reachable_pages())
        alive = list(processes)
        victims: list[ServiceProcess] = []
        added: list[ServiceProcess] = []
        for n, (at, name, member) in enumerate(self.kills):
            wait_for_pages(where, alive, int(total * at), f"{at:.0%} of the crawl (kill {n}: {name})")
            victim = [p for p in alive if p.name == name][member]
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(10)
            victim.returncode = victim.process.returncode
            logger.info("kill %d at %.0f%%: SIGKILL %s pid %d", n, at * 100, name, victim.process.pid)
            replacement = ServiceProcess.start(name, where.env, victim.log.with_name(f"{name}-restart-{n}.log"))
            alive[alive.index(victim)] = replacement
            victims.append(victim)
            added.append(replacement)
        return victims, added


def test_a_seeded_kill_9_schedule_of_every_service_loses_and_duplicates_nothing_users_see(
    tmp_path: Path, reference: Reference
) -> None:
    """Issue 16: each service SIGKILLed once at a seeded random moment and restarted; the
    store and every API answer equal the uninterrupted embedded crawl's."""
    schedule = KillSchedule(KILL_SCHEDULE_SEED)
    assert {name for _, name, _ in schedule.kills} == set(DEPLOYMENT)
    fault = MidCrawl(schedule)
    with crawled(tmp_path, fault, CRAWLSTREAM_SCHEDULER_LEASE_S="3") as done:
        killed = [(v.name, v.returncode) for v in fault.ended]
        assert killed == [(name, -signal.SIGKILL) for _, name, _ in schedule.kills]
        done.assert_every_reachable_page_fetched()
        assert_no_robots_disallowed_fetch(done.web, done.pages)
        assert done.stored == reference.stored
        assert done.answers == reference.answers
        listed = indexed_urls(done.answers)
        assert len(listed) == len(set(listed)), "nothing duplicated in what the API answers"
