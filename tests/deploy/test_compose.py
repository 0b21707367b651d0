"""docker-compose.yml: valid against the Compose Specification's JSON schema, topics created
before any service starts, a seed step, and the README's steps checked line by line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from deploy_support import REPO, compose_schema_path, load_json, render

from crawlstream.cli import _parser
from crawlstream.metrics import metrics_port
from crawlstream.roles import SERVICE_NAMES, role
from crawlstream.settings import Settings, iter_specs

COMPOSE_FILE = REPO / "docker-compose.yml"
# `docker compose up --scale NAME=N` starts N containers of these: every consumer (members of its
# group) and the index-compactor (an active one and standbys).
SCALABLE = frozenset({n for n in SERVICE_NAMES if role(n).group is not None} | {"index-compactor"})


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def _entrypoint_argv(service: dict[str, Any], args: list[str]) -> list[str]:
    """What the container runs for `docker compose run SERVICE ARGS...`."""
    dockerfile = (REPO / "Dockerfile").read_text()
    (image_entrypoint,) = re.findall(r"^ENTRYPOINT\s+(\[.*\])$", dockerfile, re.MULTILINE)
    entrypoint = service.get("entrypoint") or yaml.safe_load(image_entrypoint)
    return [*entrypoint, *(args or service.get("command", []))]


def _parses_as_crawlstream(argv: list[str]) -> None:
    assert argv[0] == "crawlstream", argv
    try:
        _parser().parse_args(argv[1:])
    except SystemExit as exc:
        raise AssertionError(f"`{shlex.join(argv)}` is not a valid crawlstream command line") from exc


def test_the_file_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = load_json(compose_schema_path())
    validator = jsonschema.Draft201909Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_check_rejects_an_unknown_service_key(compose: dict[str, Any]) -> None:
    schema = load_json(compose_schema_path())
    broken = {**compose, "services": {**compose["services"], "fetcher": {"image": "x", "comand": ["service"]}}}
    assert list(jsonschema.Draft201909Validator(schema).iter_errors(broken))


def test_every_service_runs_against_kafka_and_redis_with_known_variables(compose: dict[str, Any]) -> None:
    services = compose["services"]
    roles = {s["command"][1] for s in services.values() if s.get("command", [""])[0] == "service"}
    assert roles == set(SERVICE_NAMES)
    known = {spec.env for spec in iter_specs(Settings)}
    for name in SERVICE_NAMES:
        env = services[name]["environment"]
        assert set(env) <= known
        assert env["KAFKA_BOOTSTRAP_SERVERS"].startswith("kafka:")
        _parses_as_crawlstream(_entrypoint_argv(services[name], []))


def test_every_service_exposes_the_port_its_metrics_endpoint_listens_on(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in SERVICE_NAMES:
        env = services[name]["environment"]
        assert env["CRAWLSTREAM_METRICS_HOST"] == "0.0.0.0", name
        port = metrics_port(int(env["CRAWLSTREAM_METRICS_PORT"]) if "CRAWLSTREAM_METRICS_PORT" in env else None, name)
        assert services[name]["expose"] == [str(port)], name


def test_scalable_services_name_no_container_publish_no_host_port_and_share_the_data_volume(
    compose: dict[str, Any],
) -> None:
    """A fixed container_name or host port makes `--scale NAME=2` fail on the second container;
    the members of a writer coordinate through files (and flock) on the one data volume."""
    services = compose["services"]
    assert {"bucket-compressor", "parquet-sink", "index-compactor", "fetcher"} <= SCALABLE
    volumes = set()
    for name in SCALABLE:
        service = services[name]
        assert "container_name" not in service and "ports" not in service, name
        data_dir = service["environment"]["CRAWLSTREAM_DATA_DIR"]
        (volume,) = [m.split(":")[0] for m in service["volumes"] if m.split(":")[1] == data_dir]
        volumes.add(volume)
    (volume,) = volumes
    assert volume in compose["volumes"], "a named volume (not a bind mount), shared by every container"


def test_topics_are_created_with_the_configured_partitions_before_any_service_starts(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    topics = services["topics"]
    assert topics["command"] == ["topics", "create"] and topics["restart"] == "no"
    assert topics["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    _parses_as_crawlstream(_entrypoint_argv(topics, []))
    partitions = int(topics["environment"]["CRAWLSTREAM_BUS_PARTITIONS"])
    assert 128 % partitions == 0
    for name in SERVICE_NAMES:
        assert services[name]["depends_on"]["topics"] == {"condition": "service_completed_successfully"}, name
        assert int(services[name]["environment"]["CRAWLSTREAM_BUS_PARTITIONS"]) == partitions


def test_the_seed_step_runs_crawlstream_seed_only_when_asked(compose: dict[str, Any]) -> None:
    seed = compose["services"]["seed"]
    assert seed["profiles"] == ["seed"], "`docker compose up` must not seed"
    _parses_as_crawlstream(_entrypoint_argv(seed, ["https://example.com/", "https://example.org/"]))
    assert _entrypoint_argv(seed, [])[1] == "seed"


def test_the_query_api_needs_its_tokens_file_created_first(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["query-api"]["environment"]["CRAWLSTREAM_API_TOKENS_FILE"] == "/data/api/tokens.json"
    assert services["api-tokens"]["command"] == ["tokens", "init"]
    assert services["query-api"]["depends_on"]["api-tokens"]["condition"] == "service_completed_successfully"


def test_services_are_checked_on_the_same_heartbeat_as_on_kubernetes(compose: dict[str, Any]) -> None:
    (fetcher,) = [d for d in render("prod") if d["kind"] == "Deployment" and d["metadata"]["name"] == "fetcher"]
    k8s_command = fetcher["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["exec"]["command"]
    for name in SERVICE_NAMES:
        service = compose["services"][name]
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        if name == "query-api":
            continue
        test = [part.replace("$$", "$") for part in service["healthcheck"]["test"]]
        assert test == ["CMD", *k8s_command], name
        assert Path(service["environment"]["CRAWLSTREAM_HEARTBEAT_FILE"]).is_relative_to(service["tmpfs"][0])


def _readme_compose_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("### docker-compose", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_each_docker_compose_step_of_the_readme_matches_the_file(compose: dict[str, Any]) -> None:
    services = compose["services"]
    lines = _readme_compose_lines()
    assert len(lines) >= 6
    for line in lines:
        words = shlex.split(line)
        if words[0] == "curl":
            (url,) = [w for w in words if w.startswith("http")]
            port = re.match(r"http://localhost:(\d+)/", url)
            assert port and f"{port.group(1)}:8080" in services["query-api"]["ports"], line
            assert "--api-host" in services["query-api"]["command"], line
            continue
        assert words[:2] == ["docker", "compose"], line
        verb, rest = words[2], words[3:]
        if verb == "run":
            assert rest[0] == "--rm", line  # compose's options come before the service name
            name, *args = rest[1:]
            assert name in services, line
            _parses_as_crawlstream(_entrypoint_argv(services[name], args))
        elif verb == "up":
            for word in rest:
                if "=" in word:  # --scale SERVICE=N
                    name, replicas = word.split("=")
                    assert name in services and int(replicas) > 0, line
                else:
                    assert word in {"--build", "-d", "--scale"}, line
        elif verb == "logs":
            assert next(w for w in rest if not w.startswith("-")) in services, line
        else:
            assert verb in {"ps", "down"}, line
