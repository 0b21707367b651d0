"""The deployment manifests are validated offline: every service deployed, every variable known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from crawlstream.services import SERVICE_NAMES
from crawlstream.settings import Settings, iter_specs

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "k8s"


def _k8s_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _known_variables() -> set[str]:
    return {spec.env for spec in iter_specs(Settings)}


def test_kustomization_lists_every_manifest_file() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_service_has_one_deployment_running_its_role() -> None:
    deployments = [d for d in _k8s_documents() if d["kind"] == "Deployment"]
    roles = {}
    for d in deployments:
        (container,) = d["spec"]["template"]["spec"]["containers"]
        assert container["args"][0] == "service"
        roles[container["args"][1]] = d
        assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
        mounts = {m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"] for v in d["spec"]["template"]["spec"]["volumes"]}
        assert mounts <= volumes
    assert sorted(roles) == sorted(SERVICE_NAMES)


def test_config_sets_only_variables_the_code_reads() -> None:
    data: dict[str, str] = {}
    for d in _k8s_documents():
        if d["kind"] == "ConfigMap":
            data.update(d["data"])
        if d["kind"] == "Secret":
            data.update(d["stringData"])
    assert set(data) <= _known_variables()
    assert {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "CRAWLSTREAM_DATA_DIR"} <= set(data)
    assert 128 % int(data["CRAWLSTREAM_BUS_PARTITIONS"]) == 0


def test_query_api_is_probed_on_healthz_and_exposed() -> None:
    docs = _k8s_documents()
    (api,) = [
        d for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "query-api"
    ]
    (container,) = api["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    services = [d for d in docs if d["kind"] == "Service"]
    assert any(s["spec"]["selector"] == api["spec"]["selector"]["matchLabels"] for s in services)


def test_query_api_binds_beyond_loopback_only_with_a_tokens_file_from_a_secret() -> None:
    (api,) = [d for d in _k8s_documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "query-api"]
    spec = api["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    tokens = Path(env["CRAWLSTREAM_API_TOKENS_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == tokens.parent]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert mount["readOnly"] and volume["secret"]["defaultMode"] == 0o400
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert compose["query-api"]["environment"]["CRAWLSTREAM_API_TOKENS_FILE"] == "/data/api/tokens.json"
    assert compose["api-tokens"]["command"] == ["tokens", "init"]
    assert compose["query-api"]["depends_on"]["api-tokens"]["condition"] == "service_completed_successfully"


def test_compose_runs_every_service_against_kafka_and_redis() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    roles = {s["command"][1] for s in services.values() if s.get("command", [""])[0] == "service"}
    assert roles == set(SERVICE_NAMES)
    for name in SERVICE_NAMES:
        env = services[name]["environment"]
        assert set(env) <= _known_variables()
        assert env["KAFKA_BOOTSTRAP_SERVERS"].startswith("kafka:")
