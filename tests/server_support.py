"""``redismem serve`` as a real process, for the server's tests (HTTP, auth,
MCP, metrics, faults).

* ``start_server(redis_url, directory, ...)``: a keys file with a read, a
  write and an admin key for each namespace, then ``redismem serve`` on a free
  port against ``redis_url``; returns a ``RunningServer`` once ``/healthz``
  answers. Extra CLI arguments and environment variables pass through.
* Fixtures (import them into a test module):
  - ``http_server``: one server per test module, serving two fresh
    namespaces (``a`` and ``b``) on the suite's ``redis-server``;
  - ``served``: that server for one test, whose keys (both namespaces and the
    server's queue) are deleted when the test ends, as ``_no_keys_left`` wants;
  - ``server_factory``: servers of the test's own (other settings), stopped
    and cleaned at teardown.

Each test uses its own user ids (``new_id()``). A test module starting
servers marks itself ``pytestmark = pytest.mark.processes``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from helpers import free_port

from redismem.server.apikeys import ROLES, create_key

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "redismem"]
#: Where a queue's and arq's keys start (see conftest.QUEUE_SIDE).
QUEUE_SIDE = ("redismem/", "arq:")


def new_id(prefix: str = "u") -> str:
    """A user or session id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def new_namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@dataclass
class RunningServer:
    """One ``redismem serve`` process."""

    process: subprocess.Popen[bytes]
    port: int
    redis_url: str
    namespaces: tuple[str, ...]
    #: namespace -> role -> API key
    keys: dict[str, dict[str, str]]
    keys_file: Path
    queue_name: str
    log_path: Path
    host: str = "127.0.0.1"
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def a(self) -> str:
        """The first namespace served."""
        return self.namespaces[0]

    @property
    def b(self) -> str:
        """The second namespace served."""
        return self.namespaces[1]

    def api(self, namespace: str | None = None) -> str:
        """The base URL of a namespace's routes."""
        return f"{self.base_url}/v1/namespaces/{namespace or self.a}"

    def key(self, namespace: str | None = None, role: str = "admin") -> str:
        return self.keys[namespace or self.a][role]

    def headers(self, namespace: str | None = None, role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key(namespace, role)}"}

    def client(
        self, namespace: str | None = None, role: str = "admin", **options: Any
    ) -> httpx.Client:
        """An ``httpx.Client`` on ``api(namespace)`` sending that key (close it)."""
        options.setdefault("timeout", 30.0)
        return httpx.Client(
            base_url=self.api(namespace), headers=self.headers(namespace, role), **options
        )

    def add_key(self, namespace: str, role: str, name: str = "") -> str:
        """Another key in the server's keys file (the server reads it again
        within a second)."""
        key, _ = create_key(self.keys_file, namespace=namespace, role=role, name=name)
        return key

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (uvicorn drains and exits), SIGKILL if it has not exited in
        ``timeout``; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.wait(timeout=10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def server_env(**variables: str) -> dict[str, str]:
    """The parent's environment without any ``REDISMEM_*`` variable, plus
    ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(variables)
    return env


def make_keys_file(path: Path, namespaces: Sequence[str]) -> dict[str, dict[str, str]]:
    """A keys file with a key of each role for each namespace; the keys."""
    keys: dict[str, dict[str, str]] = {}
    for namespace in namespaces:
        for role in ROLES:
            key, _ = create_key(path, namespace=namespace, role=role, name=f"test {role}")
            keys.setdefault(namespace, {})[role] = key
    return keys


def wait_until_up(server: RunningServer, within: float = 30.0) -> None:
    """Until ``/healthz`` answers 200; fails at once if the process exited."""
    deadline = time.monotonic() + within
    while True:
        if not server.alive:
            raise AssertionError(
                f"redismem serve exited ({server.process.returncode}):\n{server.log()[-4000:]}"
            )
        try:
            if httpx.get(f"{server.base_url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.kill()
            raise AssertionError(f"redismem serve did not answer:\n{server.log()[-4000:]}")
        time.sleep(0.05)


def start_server(
    redis_url: str,
    directory: Path,
    *,
    namespaces: Sequence[str] | None = None,
    queue_name: str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    wait: bool = True,
) -> RunningServer:
    """``redismem serve`` on ``redis_url`` for ``namespaces`` (default two
    fresh ones) with a fresh keys file in ``directory``. ``extra_args`` are
    added to the command line, ``env`` to its environment (``REDISMEM_*``
    variables of the test run's own environment are left out)."""
    directory.mkdir(parents=True, exist_ok=True)
    served = tuple(namespaces or (new_namespace(), new_namespace()))
    queue = queue_name or f"redismem/queue-{served[0]}"
    keys_file = directory / f"keys-{uuid.uuid4().hex[:6]}.jsonl"
    keys = make_keys_file(keys_file, served)
    port = port or free_port()
    variables = server_env(REDISMEM_QUEUE_NAME=queue, **dict(env or {}))
    command = [
        *CLI,
        "serve",
        "--url",
        redis_url,
        "--port",
        str(port),
        "--keys-file",
        str(keys_file),
        *(arg for namespace in served for arg in ("--namespace", namespace)),
        *extra_args,
    ]
    log_path = directory / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env=variables,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a ^C on the test run does not hit it
        )
    server = RunningServer(
        process=process,
        port=port,
        redis_url=redis_url,
        namespaces=served,
        keys=keys,
        keys_file=keys_file,
        queue_name=queue,
        log_path=log_path,
        env=variables,
    )
    if wait:
        wait_until_up(server)
    return server


def forget(redis_url: str, namespaces: Sequence[str], settle: float = 0.05) -> None:
    """Delete every key holding one of ``namespaces`` and their jobs in the
    queues (as conftest's ``namespace`` fixture does), again until a pass
    finds nothing: a write's job is enqueued in the background, just after
    its response."""
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=30)
    try:
        for _ in range(20):
            found = 0
            for namespace in namespaces:
                for key in client.scan_iter(match=f"*{namespace}*", count=1000):
                    found += client.unlink(key)
                for prefix in QUEUE_SIDE:
                    for key in client.scan_iter(match=f"{prefix}*", count=1000, _type="zset"):
                        members = [
                            m for m, _ in client.zscan_iter(key, match=f"*{namespace}*", count=1000)
                        ]
                        if members:
                            found += client.zrem(key, *members)
            if not found:
                return
            time.sleep(settle)
    except (redis.ConnectionError, redis.TimeoutError):
        pass  # the server is gone (a test killed it)
    finally:
        client.close()


@pytest.fixture(scope="module")
def http_server(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """One ``redismem serve`` for the test module: two fresh namespaces, a
    read, write and admin key for each (``server.key(ns, role)``). Use it
    through ``served``, which deletes each test's keys."""
    server = start_server(redis_url, tmp_path_factory.mktemp("serve"))
    try:
        yield server
    finally:
        server.stop()
        forget(redis_url, server.namespaces)


@pytest.fixture
def served(http_server: RunningServer) -> Iterator[RunningServer]:
    """The module's server, for one test: every key of its namespaces and
    queue is deleted when the test ends."""
    if not http_server.alive:
        pytest.fail(f"the module's server died:\n{http_server.log()[-4000:]}")
    yield http_server
    forget(http_server.redis_url, http_server.namespaces)


@pytest.fixture
def server_factory(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """``server_factory(**start_server options)``: servers of the test's own,
    stopped (and their keys deleted) at teardown."""
    started: list[RunningServer] = []

    def start(**options: Any) -> RunningServer:
        options.setdefault("redis_url", redis_url)
        directory = tmp_path / f"serve-{len(started)}"
        server = start_server(options.pop("redis_url"), directory, **options)
        started.append(server)
        return server

    yield start
    for server in started:
        with contextlib.suppress(Exception):
            server.stop()
        forget(server.redis_url, server.namespaces)
