"""The S3 variants of the deployment (issue 26): deploy/k8s/components/s3 (overlays/s3 = prod +
it) and docker-compose.s3.yml. Rendered and schema-checked offline like the rest of tests/deploy;
what the services would do with the environment they get is checked with the real settings
loader and location functions, and the compose file's S3 server command is run with the
versitygw binary `make s3` builds, against which the services' environment reads and writes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from deploy_support import (
    K8S,
    REPO,
    by_name,
    compose_schema_path,
    load_json,
    of_kind,
    render,
)
from test_compose import COMPOSE_FILE, _parses_as_crawlstream

from crawlstream.objectstore import archive_location, index_location, lake_location, open_objects
from crawlstream.roles import SERVICE_NAMES
from crawlstream.settings import Settings, iter_specs, load

Docs = list[dict[str, Any]]

S3_COMPOSE_FILE = REPO / "docker-compose.s3.yml"
# The services that read or write the lake, the index or the archive tier; the others never
# touch them and get no S3 configuration.
S3_SERVICES = frozenset({"parquet-sink", "index-compactor", "bucket-compressor", "query-api"})
# What still mounts the shared claim with everything above on S3, and why (deploy/k8s/README.md):
# frontier files, Bloom snapshots, the store's hot/warm/cold tiers, the sink's staging logs.
STILL_SHARED = frozenset({"scheduler", "deduper", "bucket-compressor", "parquet-sink"})
SECRET = "crawlstream-s3-credentials"
SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@pytest.fixture(scope="module")
def s3_docs() -> Docs:
    return render("s3")


def _deployments(docs: Docs) -> dict[str, dict[str, Any]]:
    found = {}
    for d in of_kind(docs, "Deployment"):
        (container, *_) = d["spec"]["template"]["spec"]["containers"]
        if container.get("args", [""])[0] == "service":
            found[container["args"][1]] = d
    return found


def _pod_env(docs: Docs, deployment: dict[str, Any]) -> dict[str, str]:
    """The environment the pod's container starts with; a secretKeyRef's value is `<secret>/<key>`."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    config_maps, secrets = by_name(docs, "ConfigMap"), by_name(docs, "Secret")
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config_maps[source["configMapRef"]["name"]]["data"])
        else:
            env.update(secrets[source["secretRef"]["name"]]["stringData"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = f"{ref['name']}/{ref['key']}"
    return env


def _claims(deployment: dict[str, Any]) -> set[str]:
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    return {v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v}


def _assert_s3_wiring(docs: Docs) -> None:
    for name, d in _deployments(docs).items():
        env = _pod_env(docs, d)
        if name not in S3_SERVICES:
            assert not {k for k in env if k.startswith(("AWS_", "CRAWLSTREAM_S3_"))}, name
            assert "CRAWLSTREAM_LAKE_URI" not in env, name
            continue
        assert {env[k] for k in SECRET_KEYS} == {f"{SECRET}/{k}" for k in SECRET_KEYS}, name
        settings = load(env, None)
        where = (lake_location(settings), index_location(settings), archive_location(settings))
        assert all(loc is not None and loc.is_s3 for loc in where), (name, where)


def test_the_s3_services_get_locations_from_the_config_map_and_keys_from_the_secret(s3_docs: Docs) -> None:
    """Each of the four starts with the lake, the index and the archive on S3 (the real settings
    loader and location functions on the pod's environment) and its key pair by secretKeyRef;
    no rendered object holds a key pair, so an apply never overwrites the Secret created by hand."""
    _assert_s3_wiring(s3_docs)
    assert SECRET not in by_name(s3_docs, "Secret")
    for d in [*of_kind(s3_docs, "ConfigMap"), *of_kind(s3_docs, "Secret")]:
        assert not set(SECRET_KEYS) & set(d.get("data", {}) | d.get("stringData", {})), d["metadata"]["name"]


def test_no_service_mounts_a_claim_for_the_lake_the_index_or_the_archive(s3_docs: Docs) -> None:
    """The compactor and the API keep nothing shared (a scratch emptyDir at /data, the root file
    system being read-only); the claim stays only where something not on S3 is shared."""
    deployments = _deployments(s3_docs)
    assert sorted(deployments) == sorted(SERVICE_NAMES)
    assert {name for name, d in deployments.items() if _claims(d)} == STILL_SHARED
    for name in S3_SERVICES - STILL_SHARED:
        pod = deployments[name]["spec"]["template"]["spec"]
        (data,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/data"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == data["name"]]
        assert "emptyDir" in volume, name


def test_the_dev_s3_overlay_runs_its_own_s3_server_with_the_services_key_pair() -> None:
    """overlays/dev-s3 (dev + the component + versitygw in the cluster): the same four services
    wired, their endpoint the in-cluster Service, and the server's root key pair the one the
    services read (one Secret)."""
    from crawlstream.devtools.locals3 import VERSITYGW_VERSION

    docs = render("dev-s3")
    _assert_s3_wiring(docs)
    server = by_name(docs, "Deployment")["s3"]
    (container,) = server["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"versity/versitygw:{VERSITYGW_VERSION}", "the server the tests run"
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert refs == {"ROOT_" + k.removeprefix("AWS_"): {"name": SECRET, "key": k} for k in SECRET_KEYS}
    endpoint = load(_pod_env(docs, _deployments(docs)["parquet-sink"]), None).s3.endpoint
    service = by_name(docs, "Service")["s3"]
    assert endpoint == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert service["spec"]["selector"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
    (port,) = container["ports"]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert f":{port['containerPort']}" in container["args"]


def test_the_readme_creates_the_secret_the_pods_read() -> None:
    """deploy/k8s/README.md's `kubectl create secret` line makes exactly the keys the pods reference."""
    text = (K8S / "README.md").read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if "create secret generic" in ln and SECRET in ln]
    words = shlex.split(line)
    assert words[words.index("generic") + 1] == SECRET
    keys = [w.split("=", 2)[1] for w in words if w.startswith("--from-literal=")]
    assert sorted(keys) == sorted(SECRET_KEYS)


# -- docker-compose ------------------------------------------------------------------------

_VAR = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def _interpolate(value: str, environ: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR-default}`, `${VAR:-default}` and `${VAR:?error}`."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        have = environ.get(name)
        if op in (":-", ":?") and not have:
            have = None
        if have is not None:
            return have
        if op and op.endswith("?"):
            raise AssertionError(f"compose would refuse to start: {name}: {arg}")
        return arg or ""

    return _VAR.sub(one, value)


def _merged_compose(environ: dict[str, str]) -> dict[str, Any]:
    """docker-compose.yml with docker-compose.s3.yml on top, as `docker compose -f A -f B` merges
    them: a service's mappings (environment, depends_on) are merged key by key, other keys of the
    override replace; then `${...}` interpolated from ``environ``."""
    base = yaml.safe_load(COMPOSE_FILE.read_text())
    override = yaml.safe_load(S3_COMPOSE_FILE.read_text())
    services = base["services"]
    for name, extra in override["services"].items():
        service = dict(services.get(name, {}))
        for key, value in extra.items():
            service[key] = {**service.get(key, {}), **value} if isinstance(value, dict) else value
        services[name] = service
    base["volumes"] = {**base["volumes"], **override["volumes"]}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return _interpolate(node, environ) if isinstance(node, str) else node

    return walk(base)  # type: ignore[no-any-return]


def test_the_compose_override_and_the_merged_stack_are_valid_compose_files() -> None:
    validator = jsonschema.Draft201909Validator(load_json(compose_schema_path()))
    for doc in (yaml.safe_load(S3_COMPOSE_FILE.read_text()), _merged_compose({"AWS_SECRET_ACCESS_KEY": "k"})):
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == []
    with pytest.raises(AssertionError, match="AWS_SECRET_ACCESS_KEY"):
        _merged_compose({})  # no key, no start: never a default secret


def test_compose_wires_the_same_four_services_to_the_local_s3_server() -> None:
    from crawlstream.devtools.locals3 import VERSITYGW_VERSION

    compose = _merged_compose({"AWS_SECRET_ACCESS_KEY": "k"})
    services = compose["services"]
    assert services["s3"]["image"] == f"versity/versitygw:{VERSITYGW_VERSION}", "the server the tests run"
    known = {spec.env for spec in iter_specs(Settings)}
    for name in SERVICE_NAMES:
        env = services[name]["environment"]
        assert set(env) <= known, name
        if name not in S3_SERVICES:
            assert "CRAWLSTREAM_LAKE_URI" not in env and "s3" not in services[name]["depends_on"], name
            continue
        assert services[name]["depends_on"]["s3"] == {"condition": "service_healthy"}, name
        assert services[name]["depends_on"]["topics"], "the base file's dependencies are kept"
        settings = load(env, None)
        assert settings.s3.endpoint == "http://s3:7070" and settings.s3.secret_access_key == "k", name
        assert all(loc is not None and loc.is_s3 for loc in (lake_location(settings), archive_location(settings)))
        assert index_location(settings).is_s3, name
    # your own S3: the same variables, from the environment of `docker compose up`
    own = _merged_compose({"AWS_SECRET_ACCESS_KEY": "k", "CRAWLSTREAM_S3_ENDPOINT": "", "AWS_REGION": "eu-west-1"})
    env = own["services"]["parquet-sink"]["environment"]
    assert env["CRAWLSTREAM_S3_ENDPOINT"] == "" and env["AWS_REGION"] == "eu-west-1"


def _server_and_sink(variant: str, secret: str) -> tuple[list[str], dict[str, str], str, dict[str, str]]:
    """The S3 server's argv, environment and health URL (port 7070, volume /s3, binary
    /app/versitygw as in the image) and a parquet-sink's environment, from compose or dev-s3."""
    keys = {"AWS_ACCESS_KEY_ID": "crawlstream", "AWS_SECRET_ACCESS_KEY": secret}
    if variant == "compose":
        services = _merged_compose({"AWS_SECRET_ACCESS_KEY": secret})["services"]
        s3 = services["s3"]
        argv = [a.replace("$$", "$") for a in [*s3["entrypoint"], *s3["command"]]]
        return argv, s3["environment"], s3["healthcheck"]["test"][-1], services["parquet-sink"]["environment"]
    docs = render("dev-s3")
    (container,) = by_name(docs, "Deployment")["s3"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: keys[e["valueFrom"]["secretKeyRef"]["key"]] for e in container["env"]}
    health = f"http://127.0.0.1:7070{container['readinessProbe']['httpGet']['path']}"
    sink = {k: keys.get(v.split("/", 1)[-1], v) for k, v in _pod_env(docs, _deployments(docs)["parquet-sink"]).items()}
    return [*container["command"], *container["args"]], env, health, sink


@pytest.mark.parametrize("variant", ["compose", "dev-s3"])
def test_the_s3_server_as_deployed_serves_the_bucket_the_services_write(variant: str, tmp_path: Path) -> None:
    """The S3 server's command as docker-compose.s3.yml / overlays/dev-s3 run it, with the
    versitygw binary `make s3` builds in place of the image's, on a loopback port and a temp dir
    for its volume: it makes the bucket, answers its health path, and a parquet-sink's environment
    (its key pair) writes, reads and lists the lake and the archive there."""
    from crawlstream.devtools.localproc import free_port
    from crawlstream.devtools.locals3 import find_versitygw

    argv, env, health, sink = _server_and_sink(variant, os.urandom(8).hex())
    port = free_port()
    replace = {"/app/versitygw": str(find_versitygw()), ":7070": f"127.0.0.1:{port}", "/s3": str(tmp_path)}
    argv = [re.sub("|".join(map(re.escape, replace)), lambda m: replace[m.group(0)], a) for a in argv]
    process = subprocess.Popen(argv, env={"PATH": os.environ["PATH"], **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(health.replace(":7070", f":{port}"), timeout=1) as answer:
                    assert answer.status == 200
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "versitygw did not come up"
                time.sleep(0.05)
        assert (tmp_path / "crawlstream").is_dir(), "the server's command made the bucket"
        settings = load({**sink, "CRAWLSTREAM_S3_ENDPOINT": f"http://127.0.0.1:{port}"}, None)
        for location in (lake_location(settings), archive_location(settings)):
            assert location is not None and location.is_s3
            store = open_objects(location, settings.s3)
            store.write("probe/x", b"written through the services' settings")
            assert store.read("probe/x") == b"written through the services' settings"
            assert [o.rel for o in store.list("probe/")] == ["probe/x"]
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_readme_s3_steps_are_commands_that_parse() -> None:
    """README.md, "Lake, index and archive on S3": each crawlstream line parses with the real
    command-line parser, each docker compose line names the two files and services they hold."""
    section = (REPO / "README.md").read_text().split("## Lake, index and archive on S3", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = [ln.split("  #", 1)[0].strip() for block in blocks for ln in block.splitlines() if ln.strip()]
    services = _merged_compose({"AWS_SECRET_ACCESS_KEY": "k"})["services"]
    seen = set()
    for line in lines:
        for command in re.split(r";|&(?!\S)", line):
            words = shlex.split(command)
            if not words or words[0] in ("until", "do", "done", "sleep", "export", "make"):
                seen.add(words[0] if words else "")
                continue
            if words[0] == "crawlstream":
                argv = [w for w in words if w != ">" and not w.endswith(".env")]
                _parses_as_crawlstream(argv)
                seen.add(argv[1])
            else:
                assert words[:2] == ["docker", "compose"], line
                assert words[2:6] == ["-f", COMPOSE_FILE.name, "-f", S3_COMPOSE_FILE.name], line
                assert all(w in services for w in words[6:] if not w.startswith("-") and w not in ("up", "down")), line
    assert {"local-s3", "export", "ingest", "index", "serve"} <= seen


def test_the_readme_s3_settings_table_agrees_with_the_settings() -> None:
    """Each row's variables, flags and default are the settings' own (docs/SETTINGS.md is generated)."""
    section = (REPO / "README.md").read_text().split("## Lake, index and archive on S3", 1)[1].split("\n## ", 1)[0]
    specs = {spec.env: spec for spec in iter_specs(Settings)}
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert len(rows) >= 8
    covered = set()
    generated = (REPO / "docs" / "SETTINGS.md").read_text()
    for row in rows:
        variables, flags, default = (c.strip() for c in row.strip("|").split("|")[:3])
        names = re.findall(r"`([A-Z0-9_]+)`", variables)
        for name in names:
            assert name in specs, name
            (line,) = [ln for ln in generated.splitlines() if ln.startswith(f"| `{name}` |")]
            _, flag, generated_default = (c.strip() for c in line.strip("|").split("|")[:3])
            assert generated_default == default, name
            if len(names) == 1:
                assert flag == flags, name
            covered.add(name)
    s3 = {env for env in specs if env.startswith(("CRAWLSTREAM_S3_", "AWS_"))}
    assert s3 | {"CRAWLSTREAM_LAKE_URI", "CRAWLSTREAM_INDEX_URI", "CRAWLSTREAM_STORE_ARCHIVE_URI"} <= covered


def test_the_readme_two_command_setup_gives_later_commands_the_s3_settings(tmp_path: Path) -> None:
    """The README's first two lines, run verbatim by bash: the later commands' settings name the
    local server and put the lake, the index and the archive on it."""
    section = (REPO / "README.md").read_text().split("## Lake, index and archive on S3", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    start, wait = [ln.split("  #", 1)[0].strip() for ln in block.splitlines()[:2]]
    script = "\n".join([start, "pid=$!", wait, "crawlstream settings > settings.json", "status=$?",
                         "kill $pid; wait $pid", "exit $status"])  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith(("AWS_", "CRAWLSTREAM_"))}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    effective = json.loads((tmp_path / "settings.json").read_text())
    s3_env = dict(line.split("=", 1) for line in (tmp_path / "s3.env").read_text().splitlines())
    assert s3_env["CRAWLSTREAM_S3_ENDPOINT"].startswith("http://127.0.0.1:")
    for key in ("CRAWLSTREAM_S3_ENDPOINT", "CRAWLSTREAM_LAKE_URI", "CRAWLSTREAM_STORE_ARCHIVE_URI", "AWS_REGION"):
        assert effective[key] == s3_env[key], key
    settings = load(s3_env, None)
    where = (lake_location(settings), index_location(settings), archive_location(settings))
    assert all(loc is not None and loc.is_s3 for loc in where), where
