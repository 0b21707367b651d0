"""deploy/spark: the spark-ingest Job and its RBAC validate against the Kubernetes schemas, and
what they say agrees with the S3 component, the image and the command."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import K8S, REPO, kubernetes_errors

SPARK = REPO / "deploy" / "spark"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    loaded = [d for d in yaml.safe_load_all((SPARK / "spark-ingest.yaml").read_text()) if d]
    return {d["kind"]: d for d in loaded}


def test_every_document_validates_against_the_kubernetes_schema(docs: dict[str, dict[str, Any]]) -> None:
    assert set(docs) == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    for doc in docs.values():
        assert kubernetes_errors(doc) == [], doc["kind"]


def test_the_driver_may_create_and_delete_its_executor_pods(docs: dict[str, dict[str, Any]]) -> None:
    role, binding = docs["Role"], docs["RoleBinding"]
    pods = [r for r in role["rules"] if "pods" in r["resources"]]
    assert pods and {"create", "delete", "watch", "list"} <= set(pods[0]["verbs"])
    assert {"services", "configmaps"} <= set(pods[0]["resources"])
    account = docs["ServiceAccount"]["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "crawlstream"}]
    pod = docs["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account


def _submit_args(docs: dict[str, dict[str, Any]]) -> list[str]:
    container = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    return shlex.split(container["args"][0])


def test_the_job_submits_the_spark_ingest_module_in_cluster_mode(docs: dict[str, dict[str, Any]]) -> None:
    args = _submit_args(docs)
    assert args[0] == "exec" and args[1].endswith("/bin/spark-submit")
    assert args[2:6] == ["--master", "k8s://https://kubernetes.default.svc", "--deploy-mode", "cluster"]
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    account = docs["ServiceAccount"]["metadata"]["name"]
    assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == account
    container = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert confs["spark.kubernetes.container.image"] == container["image"]
    app = next(a for a in args if a.startswith("local://"))
    assert app.endswith("/site-packages/crawlstream/ingest/spark.py")
    assert (REPO / "libs" / "crawlstream" / "ingest" / "spark.py").is_file()
    assert "--dataset-id" in args


def test_the_s3_settings_come_from_the_s3_components_config_and_secret(docs: dict[str, dict[str, Any]]) -> None:
    component = yaml.safe_load((K8S / "components" / "s3" / "config.yaml").read_text())
    container = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert {"configMapRef": {"name": component["metadata"]["name"]}} in container["envFrom"]
    args = _submit_args(docs)
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    for key in component["data"]:
        if key != "CRAWLSTREAM_STORE_ARCHIVE_URI":  # the content store's, not the lake's
            assert confs[f"spark.kubernetes.driverEnv.{key}"] == f"$({key})"
    secret = (K8S / "components" / "s3" / "kustomization.yaml").read_text()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert confs[f"spark.kubernetes.driver.secretKeyRef.{key}"] == f"crawlstream-s3-credentials:{key}"
        assert f"{{name: crawlstream-s3-credentials, key: {key}}}" in secret


def test_the_image_runs_the_entrypoint_spark_expects() -> None:
    dockerfile = (SPARK / "Dockerfile").read_text()
    entrypoint = SPARK / "entrypoint.sh"
    assert "COPY deploy/spark/entrypoint.sh" in dockerfile
    text = entrypoint.read_text()
    assert "KubernetesExecutorBackend" in text and "--deploy-mode client" in text
    assert entrypoint.stat().st_mode & 0o111, "entrypoint.sh is executable"
    assert Path(REPO / "Dockerfile").read_text().count("requirements.lock") >= 1, "pyspark comes with the lock"
