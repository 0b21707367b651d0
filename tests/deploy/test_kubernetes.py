"""deploy/k8s: both overlays render with kustomize and validate with zero errors against the
Kubernetes schemas and the CRDs' schemas; what they say agrees with the code (services,
groups, topics, TopicPolicy, settings)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from deploy_support import (
    COMPONENTS,
    K8S,
    OVERLAYS,
    by_name,
    custom_resource_errors,
    is_builtin,
    kubernetes_errors,
    of_kind,
    render,
)

from crawlstream.bus._topic_policy import TopicPolicy
from crawlstream.metrics import metrics_port
from crawlstream.roles import SERVICE_NAMES, Role, role
from crawlstream.settings import Settings, iter_specs, load
from crawlstream.topics import ALL_TOPICS, dlq_topic

Docs = list[dict[str, Any]]

# The index-compactor consumes no topic: one active (holds index/.compactor.lock) and one standby
# that takes over within index.standby_poll_s (services/index_compactor/README.md, "Scaling").
INDEX_COMPACTOR_REPLICAS = 2
# The services that write the shared volume's files from every member, coordinating with flock:
# each of their pods must mount the one ReadWriteMany claim (README.md here, "Scaling the writers").
SHARED_VOLUME_WRITERS = frozenset({"bucket-compressor", "parquet-sink", "index-compactor"})
# With the index on S3 (overlays/s3) the compactor's lock is a lease object, not a flock on the claim.
S3_SHARED_VOLUME_WRITERS = SHARED_VOLUME_WRITERS - {"index-compactor"}
# Brokers a production cluster has at least (overlays/prod/kustomization.yaml says so).
PROD_MIN_BROKERS = 3


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, Docs]:
    return request.param, _rendered(request.param)


_RENDERED: dict[str, Docs] = {}


def _rendered(name: str) -> Docs:
    if name not in _RENDERED:
        _RENDERED[name] = render(name)
    return _RENDERED[name]


def _config(docs: Docs) -> dict[str, str]:
    data: dict[str, str] = {}
    for d in of_kind(docs, "ConfigMap"):
        data.update(d["data"])
    for d in of_kind(docs, "Secret"):
        data.update(d["stringData"])
    return data


def _crawlstream_deployments(docs: Docs) -> dict[str, dict[str, Any]]:
    """Service name -> its Deployment (the dev overlay's Redis is not one of them)."""
    roles = {}
    for d in of_kind(docs, "Deployment"):
        (container, *_) = d["spec"]["template"]["spec"]["containers"]
        if container.get("args", [""])[0] == "service":
            roles[container["args"][1]] = d
    return roles


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _consumers() -> dict[str, Role]:
    """Service name -> its role, for every service with a consumer group."""
    return {n: r for n in SERVICE_NAMES if (r := role(n)).group is not None}


# -- schemas -------------------------------------------------------------------------------


def test_each_overlay_directory_lists_every_manifest_it_holds() -> None:
    components = [K8S / "components" / c for c in COMPONENTS]
    for directory in [K8S / "base", *(K8S / "overlays" / o for o in OVERLAYS), *components]:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
        assert {r for r in kustomization["resources"] if not r.startswith("..")} == files, directory


def test_every_builtin_object_validates_against_the_kubernetes_schema(overlay: tuple[str, Docs]) -> None:
    name, docs = overlay
    errors = {f"{d['kind']}/{d['metadata']['name']}": e for d in docs if is_builtin(d) and (e := kubernetes_errors(d))}
    assert errors == {}, f"overlays/{name}"
    assert {d["kind"] for d in docs if is_builtin(d)} >= {
        "Namespace",
        "ConfigMap",
        "Secret",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    }


def test_every_custom_resource_validates_against_its_crd(overlay: tuple[str, Docs], shared_data: Path) -> None:
    name, docs = overlay
    crds = shared_data / "k8s-crds"
    custom = [d for d in docs if not is_builtin(d)]
    errors = {f"{d['kind']}/{d['metadata']['name']}": e for d in custom if (e := custom_resource_errors(d, crds))}
    assert errors == {}, f"overlays/{name}"
    kinds = {d["kind"] for d in custom}
    assert {"ScaledObject", "KafkaTopic", "PodMonitor"} <= kinds
    if name.startswith("dev"):
        assert {"Kafka", "KafkaNodePool"} <= kinds


def test_the_strict_crd_check_rejects_an_unknown_field(shared_data: Path) -> None:
    """The CRD check would catch a typo (the API server silently prunes unknown fields)."""
    (topic, *_) = of_kind(_rendered("prod"), "KafkaTopic")
    typo = {**topic, "spec": {**topic["spec"], "partition": 3}}
    assert custom_resource_errors(typo, shared_data / "k8s-crds")


def test_every_object_name_is_a_valid_kubernetes_name(overlay: tuple[str, Docs]) -> None:
    subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    for d in overlay[1]:
        assert subdomain.match(d["metadata"]["name"]) and len(d["metadata"]["name"]) <= 253, d["metadata"]


# -- services ------------------------------------------------------------------------------


def test_every_service_has_one_deployment_running_its_role(overlay: tuple[str, Docs]) -> None:
    roles = _crawlstream_deployments(overlay[1])
    assert sorted(roles) == sorted(SERVICE_NAMES)
    for d in roles.values():
        container = _container(d)
        assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
        mounts = {m["name"] for m in container["volumeMounts"]}
        assert mounts <= {v["name"] for v in d["spec"]["template"]["spec"]["volumes"]}


def test_config_sets_only_variables_the_code_reads(overlay: tuple[str, Docs]) -> None:
    data = _config(overlay[1])
    assert set(data) <= {spec.env for spec in iter_specs(Settings)}
    assert {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "CRAWLSTREAM_DATA_DIR", "CRAWLSTREAM_HEARTBEAT_FILE"} <= set(data)
    load(data, None)  # every value is valid: the services would start with it


def test_every_pod_runs_as_non_root_on_a_read_only_root_without_capabilities(overlay: tuple[str, Docs]) -> None:
    for d in of_kind(overlay[1], "Deployment"):
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, d["metadata"]["name"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]


def _claim_names(deployment: dict[str, Any]) -> set[str]:
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    return {v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v}


def _writable_dirs(deployment: dict[str, Any]) -> list[PurePosixPath]:
    return [PurePosixPath(m["mountPath"]) for m in _container(deployment)["volumeMounts"] if not m.get("readOnly")]


def test_every_service_is_probed_and_has_time_to_drain_on_sigterm(overlay: tuple[str, Docs]) -> None:
    """SIGTERM: each service finishes its batch, flushes, commits and leaves its group
    (crawlstream.runtime._host); the grace period covers it. Non-HTTP services are probed on the
    age of the heartbeat file their loop touches, which must be on a writable volume."""
    docs = overlay[1]
    heartbeat = PurePosixPath(_config(docs)["CRAWLSTREAM_HEARTBEAT_FILE"])
    for name, d in _crawlstream_deployments(docs).items():
        container = _container(d)
        assert d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60, name
        assert "readinessProbe" in container and "livenessProbe" in container, name
        if name == "query-api":
            assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["livenessProbe"]["httpGet"]["path"] == "/openapi.json"
            continue
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            assert command[:2] == ["sh", "-c"] and '"$CRAWLSTREAM_HEARTBEAT_FILE"' in command[2], (name, probe)
        assert any(heartbeat.is_relative_to(m) for m in _writable_dirs(d)), name


def test_the_heartbeat_probe_passes_on_a_fresh_file_and_fails_on_a_stale_or_missing_one(tmp_path: Path) -> None:
    import os
    import subprocess

    (deployment, *_) = (d for n, d in _crawlstream_deployments(_rendered("prod")).items() if n != "query-api")
    command = _container(deployment)["livenessProbe"]["exec"]["command"]
    limit_s = int(command[2].rsplit("-lt", 1)[1])
    path = tmp_path / "heartbeat"
    env = {**os.environ, "CRAWLSTREAM_HEARTBEAT_FILE": str(path)}

    def probe() -> int:
        return subprocess.run(command, env=env, capture_output=True, timeout=10).returncode

    assert probe() != 0, "no file: not alive"
    path.touch()
    assert probe() == 0
    stale = path.stat().st_mtime - limit_s - 5
    os.utime(path, (stale, stale))
    assert probe() != 0
    assert shlex.split(command[2])[0] == "test"


def test_query_api_binds_beyond_loopback_only_with_a_tokens_file_from_a_secret(overlay: tuple[str, Docs]) -> None:
    docs = overlay[1]
    api = _crawlstream_deployments(docs)["query-api"]
    spec = api["spec"]["template"]["spec"]
    container = _container(api)
    env = {e["name"]: e.get("value") for e in container["env"]}
    tokens = Path(env["CRAWLSTREAM_API_TOKENS_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == tokens.parent]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert mount["readOnly"] and volume["secret"]["defaultMode"] == 0o400
    assert volume["secret"]["secretName"] == "crawlstream-api-tokens"
    services = list(of_kind(docs, "Service"))
    assert any(s["spec"]["selector"] == api["spec"]["selector"]["matchLabels"] for s in services)


def test_every_deployment_has_a_disruption_budget_that_still_lets_a_node_drain(overlay: tuple[str, Docs]) -> None:
    budgets = list(of_kind(overlay[1], "PodDisruptionBudget"))
    for name, d in _crawlstream_deployments(overlay[1]).items():
        labels = d["spec"]["template"]["metadata"]["labels"]
        (budget,) = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert budget["spec"]["maxUnavailable"] >= 1, name


# -- scaling and topics --------------------------------------------------------------------


def _partitions(docs: Docs) -> dict[str, int]:
    topics = of_kind(docs, "KafkaTopic")
    return {t["spec"].get("topicName", t["metadata"]["name"]): t["spec"]["partitions"] for t in topics}


def _scaled_objects_by_target(docs: Docs) -> dict[str, dict[str, Any]]:
    """Deployment name -> the ScaledObject that scales it (one at most: KEDA refuses two)."""
    scaled: dict[str, dict[str, Any]] = {}
    for so in of_kind(docs, "ScaledObject"):
        target = so["spec"]["scaleTargetRef"]["name"]
        assert target not in scaled, f"two ScaledObjects scale {target}"
        scaled[target] = so
    return scaled


def test_every_consumer_deployment_scales_on_its_group_lag_up_to_its_topics_partitions(
    overlay: tuple[str, Docs],
) -> None:
    """Each consumer's ScaledObject watches exactly its group on exactly its topics (one trigger
    each), and never asks for more members than the fewest partitions of those topics: a member
    beyond them would own nothing (a bucket-compressor beyond them, no content store shard)."""
    overlay_name, docs = overlay
    partitions = _partitions(docs)
    scaled = _scaled_objects_by_target(docs)
    deployments = _crawlstream_deployments(docs)
    bootstrap = _config(docs)["KAFKA_BOOTSTRAP_SERVERS"]
    for name, consumer in _consumers().items():
        deployment = deployments[name]
        so = scaled[deployment["metadata"]["name"]]
        spec, triggers = so["spec"], so["spec"]["triggers"]
        where = (overlay_name, name)
        assert {t["type"] for t in triggers} == {"kafka"}
        assert {t["metadata"]["consumerGroup"] for t in triggers} == {consumer.group}, name
        assert sorted(t["metadata"]["topic"] for t in triggers) == sorted(consumer.topics), name
        assert {t["metadata"]["bootstrapServers"] for t in triggers} == {bootstrap}, name
        for trigger in triggers:
            assert trigger["metadata"]["allowIdleConsumers"] == "false", name
            assert int(trigger["metadata"]["lagThreshold"]) > 0, name
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"], name
        assert spec["maxReplicaCount"] <= min(partitions[t] for t in consumer.topics), where
        assert spec["minReplicaCount"] <= deployment["spec"]["replicas"] <= spec["maxReplicaCount"], where
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate", "members join and leave one at a time"


def test_only_the_consumers_are_scaled_by_keda(overlay: tuple[str, Docs]) -> None:
    docs = overlay[1]
    deployments = _crawlstream_deployments(docs)
    targets = set(_scaled_objects_by_target(docs))
    assert targets <= {d["metadata"]["name"] for d in deployments.values()}, "a ScaledObject without its Deployment"
    assert {n for n, d in deployments.items() if d["metadata"]["name"] in targets} == set(_consumers())


def test_the_index_compactor_runs_an_active_one_and_a_standby(overlay: tuple[str, Docs]) -> None:
    docs = overlay[1]
    compactor = role("index-compactor")
    assert compactor.group is None and compactor.topics == (), "no lag to scale on"
    d = _crawlstream_deployments(docs)["index-compactor"]
    assert d["spec"]["replicas"] == INDEX_COMPACTOR_REPLICAS
    assert d["metadata"]["name"] not in _scaled_objects_by_target(docs)
    # a rolling update starts the new pod as a standby before the old active one lets go
    assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_every_member_of_the_writers_mounts_the_one_read_write_many_claim(overlay: tuple[str, Docs]) -> None:
    """Deployments, not StatefulSets: every pod of a writer mounts the same claim (a volume
    per pod would split the content store, the staging adoption and the compactor's lock)."""
    name, docs = overlay
    assert not list(of_kind(docs, "StatefulSet"))
    claims = {name: _claim_names(d) for name, d in _crawlstream_deployments(docs).items()}
    writers = S3_SHARED_VOLUME_WRITERS if name.endswith("s3") else SHARED_VOLUME_WRITERS
    assert {name for name, c in claims.items() if c} >= writers
    (claim,) = set().union(*claims.values())
    pvc = by_name(docs, "PersistentVolumeClaim")[claim]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def _brokers(docs: Docs, overlay_name: str) -> int:
    pools = [p for p in of_kind(docs, "KafkaNodePool") if "broker" in p["spec"]["roles"]]
    return sum(p["spec"]["replicas"] for p in pools) if pools else PROD_MIN_BROKERS


def test_topics_have_the_partitions_replicas_and_retention_the_kafka_backend_creates(
    overlay: tuple[str, Docs],
) -> None:
    name, docs = overlay
    settings = load(_config(docs), None)
    policy = TopicPolicy.from_settings(settings)
    replicas, in_sync = policy.replicas(_brokers(docs, name))
    topics = {t["spec"].get("topicName", t["metadata"]["name"]): t for t in of_kind(docs, "KafkaTopic")}
    assert sorted(topics) == sorted([*ALL_TOPICS, *map(dlq_topic, ALL_TOPICS)])
    for topic, resource in topics.items():
        spec = resource["spec"]
        assert spec["partitions"] == settings.bus.partitions, topic
        assert spec["replicas"] == replicas, topic
        assert {k: str(v) for k, v in spec["config"].items()} == policy.config_for(topic, min_insync_replicas=in_sync)
    assert topics["content.stored"]["spec"]["config"]["retention.ms"] == "-1"


def test_topics_belong_to_the_kafka_cluster_the_services_connect_to(overlay: tuple[str, Docs]) -> None:
    name, docs = overlay
    clusters = {t["metadata"]["labels"]["strimzi.io/cluster"] for t in of_kind(docs, "KafkaTopic")}
    (cluster,) = clusters
    host, _, port = _config(docs)["KAFKA_BOOTSTRAP_SERVERS"].partition(":")
    assert host.split(".")[0] == f"{cluster}-kafka-bootstrap"
    if name.startswith("dev"):
        (kafka,) = of_kind(docs, "Kafka")
        assert kafka["metadata"]["name"] == cluster
        assert int(port) in {listener["port"] for listener in kafka["spec"]["kafka"]["listeners"]}
        pools = list(of_kind(docs, "KafkaNodePool"))
        assert {p["metadata"]["labels"]["strimzi.io/cluster"] for p in pools} == {cluster}
        assert {"controller", "broker"} <= {r for p in pools for r in p["spec"]["roles"]}, "KRaft: no ZooKeeper"
        assert kafka["spec"]["entityOperator"]["topicOperator"] is not None


def test_prometheus_scrapes_only_ports_that_exist(overlay: tuple[str, Docs]) -> None:
    docs = overlay[1]
    monitors = list(of_kind(docs, "PodMonitor"))
    assert monitors
    for monitor in monitors:
        selected = [
            d
            for d in of_kind(docs, "Deployment")
            if monitor["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert selected, monitor["metadata"]["name"]
        for d in selected:
            ports = {p["name"] for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
            assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports
    assert not list(of_kind(docs, "ServiceMonitor"))


def test_every_service_serves_its_metrics_port_beyond_loopback_and_is_scraped_there_once(
    overlay: tuple[str, Docs],
) -> None:
    """Each pod's container port `metrics` is the port its service listens on (the ConfigMap
    binds it to 0.0.0.0), and exactly that port of every service pod is scraped."""
    docs = overlay[1]
    settings = load(_config(docs), None)
    assert settings.metrics.host == "0.0.0.0"
    monitors = list(of_kind(docs, "PodMonitor"))
    for name, d in _crawlstream_deployments(docs).items():
        ports = {p["name"]: p["containerPort"] for p in _container(d)["ports"]}
        assert ports["metrics"] == metrics_port(settings.metrics.port, name), name
        labels = d["spec"]["template"]["metadata"]["labels"]
        scraped = [
            endpoint
            for monitor in monitors
            if monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
            for endpoint in monitor["spec"]["podMetricsEndpoints"]
        ]
        assert [(e["port"], e["path"]) for e in scraped] == [("metrics", "/metrics")], name


def test_the_readme_says_which_services_need_the_shared_volume(overlay: tuple[str, Docs]) -> None:
    """deploy/k8s/README.md's table, row by row, against the volumes each Deployment mounts (its
    third column: with the lake, index and archive on S3, overlays/s3 and dev-s3)."""
    rows = {}
    for line in (K8S / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].strip("`") in SERVICE_NAMES:
            rows[cells[0].strip("`")] = cells
    assert sorted(rows) == sorted(SERVICE_NAMES)
    column = 2 if overlay[0].endswith("s3") else 1
    for name, d in _crawlstream_deployments(overlay[1]).items():
        says_shared = rows[name][column].startswith("yes")
        assert says_shared == bool(_claim_names(d)), name


def test_the_kubernetes_check_rejects_an_unknown_field() -> None:
    (deployment, *_) = of_kind(_rendered("prod"), "Deployment")
    spec = deployment["spec"]
    typo = {**deployment, "spec": {**spec, "replica": 3}}
    assert kubernetes_errors(typo)
