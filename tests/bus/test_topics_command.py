"""``crawlstream topics create``: the deployments' topic step (docker-compose's ``topics`` service)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.devtools.localkafka import LocalKafka
from crawlstream.topics import ALL_TOPICS, dlq_topic

TOPICS = [*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)]


def _topics_create(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlstream", "topics", "create", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_topic_and_its_dead_letter_topic_is_created_on_the_embedded_log(tmp_path: Path) -> None:
    done = _topics_create({"CRAWLSTREAM_DATA_DIR": str(tmp_path)}, "--partitions", "4")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"topics": dict.fromkeys(TOPICS, 4)}


def test_a_partition_count_that_does_not_divide_128_is_refused(tmp_path: Path) -> None:
    done = _topics_create({"CRAWLSTREAM_DATA_DIR": str(tmp_path)}, "--partitions", "12")
    assert done.returncode == 2
    assert "divisor of 128" in done.stderr


@pytest.mark.kafka
def test_on_kafka_the_topics_get_the_policys_partitions_and_retention(tmp_path: Path) -> None:
    """On a broker of its own: the session's broker is for fresh topic names only."""
    with LocalKafka(brokers=1, partitions=1) as own:
        _check_created_on(own.bootstrap_servers, tmp_path)


def _check_created_on(bootstrap: str, tmp_path: Path) -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CRAWLSTREAM_DATA_DIR": str(tmp_path)}
    done = _topics_create(env, "--partitions", "2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"topics": dict.fromkeys(TOPICS, 2)}
    again = _topics_create(env, "--partitions", "2")
    assert again.returncode == 0, "existing topics are left as they are"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in TOPICS]
    policy = TopicPolicy(partitions=2)
    for resource, future in admin.describe_configs(resources).items():
        config = {name: entry.value for name, entry in future.result(30).items()}
        expected = policy.config_for(resource.name, min_insync_replicas=1)
        assert config["retention.ms"] == expected["retention.ms"], resource.name
        assert config["max.message.bytes"] == expected["max.message.bytes"], resource.name
