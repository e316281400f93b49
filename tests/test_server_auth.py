"""The server's security over real HTTP: API keys (401), namespaces (403 on
every route, nothing changed), roles, namespaces not served (404), the rate
limit (429 + Retry-After), ``--insecure-no-auth`` (loopback only), the keys
file and ``redismem keys``, and the extra ``redismem[server]``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import httpx
import pytest
import redis
import server_support
from server_support import CLI, ROOT, RunningServer, new_id, server_env

from redismem.errors import InvalidInput
from redismem.server.apikeys import ROLES, KeyRing, allows, create_key, hash_key, key_id, load_keys
from redismem.server.settings import ServerSettings

pytestmark = pytest.mark.processes
http_server = server_support.http_server
served = server_support.served
server_factory = server_support.server_factory

MESSAGE = {"messages": [{"role": "user", "content": "the secret of b"}]}


@cache
def routes() -> list[tuple[str, str, str]]:
    """``(method, path, role)`` of every route under ``/v1`` (``ROUTERS``),
    the role read from the auth dependency it declares (``auth.Reader``, ...);
    checked against the app's OpenAPI document, so none is left out."""
    from fastapi.routing import APIRoute

    from redismem.server.openapi import document
    from redismem.server.routes import ROUTERS

    found = []
    for router in ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute), route
            names: list[str] = []
            pending = list(route.dependant.dependencies)
            while pending:
                dependency = pending.pop()
                names.append(getattr(dependency.call, "__name__", ""))
                pending.extend(dependency.dependencies)
            roles = {n.split("_")[0] for n in names if re.fullmatch(r"(read|write|admin)_\w+", n)}
            assert len(roles) == 1, f"{route.path} must need exactly one role, has {roles}"
            (role,) = roles
            found.extend((method, route.path, role) for method in sorted(route.methods))
    documented = {
        (method.upper(), path)
        for path, operations in document()["paths"].items()
        if path.startswith("/v1/")
        for method in operations
    }
    assert documented == {(method, path) for method, path, _ in found}
    return found


def fill(path: str, namespace: str, user: str, session: str) -> str:
    """The route's path with its parameters: the namespace, the user and
    session given, a fresh id for any other."""
    path = path.replace("{namespace}", namespace)
    path = path.replace("{user_id}", user).replace("{session_id}", session)
    return re.sub(r"\{[^}]+\}", lambda _: new_id("x"), path)


def call(server: RunningServer, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    body = {} if method in ("POST", "PUT", "PATCH") else None
    return httpx.request(method, f"{server.base_url}{path}", json=body, headers=headers, timeout=30)


def snapshot(url: str, namespace: str) -> dict[bytes, bytes | None]:
    """Every key of the namespace, dumped (its jobs on the queue, enqueued in
    the background after a write, are not the namespace's data)."""
    client = redis.Redis.from_url(url)
    try:
        return {key: client.dump(key) for key in sorted(client.scan_iter(f"{namespace}:*"))}
    finally:
        client.close()


@pytest.fixture
def b_data(served: RunningServer) -> Iterator[tuple[str, str]]:
    """A user and session of namespace b holding one message."""
    user, session = new_id(), new_id("s")
    with served.client(served.b) as client:
        response = client.post(f"/users/{user}/sessions/{session}/messages", json=MESSAGE)
        assert response.status_code == 201, response.text
    yield user, session


# -- keys --------------------------------------------------------------------------


def test_every_v1_route_needs_a_key_of_exactly_one_role() -> None:
    found = routes()
    assert len(found) >= 9
    assert {role for _, _, role in found} <= set(ROLES)
    mine = {(m, p.removeprefix("/v1/namespaces/{namespace}")): r for m, p, r in found}
    assert mine["POST", "/users/{user_id}/sessions/{session_id}/messages"] == "write"
    assert mine["GET", "/users/{user_id}/sessions/{session_id}/messages"] == "read"
    assert mine["DELETE", "/users/{user_id}/sessions/{session_id}"] == "write"
    assert mine["POST", "/users/{user_id}/search"] == "read"
    assert mine["POST", "/flush"] == "write"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer rmk_000000000000_" + "A" * 43},
        {"X-API-Key": "not-a-key"},
    ],
    ids=["none", "empty-bearer", "basic", "unknown-key", "bad-x-api-key"],
)
def test_without_a_valid_key_every_route_is_401(
    served: RunningServer, b_data: tuple[str, str], headers: dict[str, str]
) -> None:
    user, session = b_data
    for method, path, _ in routes():
        response = call(served, method, fill(path, served.b, user, session), headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"]["type"] == "Unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


def test_a_key_with_a_wrong_secret_is_401(served: RunningServer) -> None:
    key = served.key(served.a, "admin")
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    response = httpx.get(
        f"{served.api()}/users/u/sessions", headers={"Authorization": f"Bearer {forged}"}
    )
    assert response.status_code == 401


def test_x_api_key_is_accepted_too(served: RunningServer) -> None:
    response = httpx.get(
        f"{served.api()}/users/{new_id()}/sessions",
        headers={"X-API-Key": served.key(served.a, "read")},
    )
    assert response.status_code == 200
    assert response.json() == {"sessions": []}


def test_a_key_of_namespace_a_gets_403_on_every_route_of_b_and_changes_nothing(
    served: RunningServer, b_data: tuple[str, str]
) -> None:
    user, session = b_data
    before = snapshot(served.redis_url, served.b)
    assert before
    for role in ROLES:
        headers = served.headers(served.a, role)
        for method, path, _ in routes():
            response = call(served, method, fill(path, served.b, user, session), headers)
            assert response.status_code == 403, (role, method, path, response.text)
            assert response.json()["error"]["type"] == "Forbidden"
    assert snapshot(served.redis_url, served.b) == before
    with served.client(served.b, "read") as client:
        messages = client.get(f"/users/{user}/sessions/{session}/messages").json()["messages"]
    assert [m["content"] for m in messages] == ["the secret of b"]


def test_a_role_below_the_routes_is_403_and_one_enough_is_let_through(
    served: RunningServer, b_data: tuple[str, str]
) -> None:
    user, session = b_data
    before = snapshot(served.redis_url, served.b)
    for method, path, needed in routes():
        for role in ROLES:
            if allows(role, needed):
                # In namespace a, empty in this test, on fresh ids: whatever
                # the route does changes nothing of b.
                target = fill(path, served.a, new_id(), new_id("s"))
                response = call(served, method, target, served.headers(served.a, role))
                assert response.status_code not in (401, 403), (role, method, path)
            else:
                target = fill(path, served.b, user, session)
                response = call(served, method, target, served.headers(served.b, role))
                assert response.status_code == 403, (role, method, path, response.text)
                assert "role" in response.json()["error"]["message"]
    assert snapshot(served.redis_url, served.b) == before


def test_a_namespace_not_served_is_404_for_its_own_key_and_403_for_others(
    served: RunningServer,
) -> None:
    elsewhere = f"t{new_id('')[1:]}".replace("-", "")
    key = served.add_key(elsewhere, "admin")
    time.sleep(1.1)  # the server reads the keys file again at most once a second
    path = f"{served.base_url}/v1/namespaces/{elsewhere}/users/u/sessions"
    own = httpx.get(path, headers={"Authorization": f"Bearer {key}"})
    assert own.status_code == 404 and own.json()["error"]["type"] == "NotServed"
    other = httpx.get(path, headers=served.headers(served.a, "admin"))
    assert other.status_code == 403


def test_a_key_added_or_removed_takes_effect_without_a_restart(served: RunningServer) -> None:
    key = served.add_key(served.a, "read", name="added")
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{served.api()}/users/{new_id()}/sessions"
    deadline = time.monotonic() + 5
    while httpx.get(url, headers=headers).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ident = key_id(key)
    lines = served.keys_file.read_text().splitlines(keepends=True)
    served.keys_file.write_text("".join(line for line in lines if ident not in line))
    deadline = time.monotonic() + 5
    while httpx.get(url, headers=headers).status_code != 401:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert httpx.get(url, headers=served.headers(served.a, "read")).status_code == 200


# -- rate limit ----------------------------------------------------------------------


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(extra_args=["--rate", "1", "--burst", "3"])
    url = f"{server.api()}/users/{new_id()}/sessions"
    statuses = [httpx.get(url, headers=server.headers(role="read")).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    limited = httpx.get(url, headers=server.headers(role="read"))
    assert limited.status_code == 429
    assert limited.json()["error"]["type"] == "RateLimited"
    wait = int(limited.headers["retry-after"])
    assert 1 <= wait <= 2
    assert httpx.get(url, headers=server.headers(role="write")).status_code == 200
    time.sleep(wait)
    assert httpx.get(url, headers=server.headers(role="read")).status_code == 200
    # The probes are not rate limited.
    assert all(httpx.get(f"{server.base_url}/healthz").status_code == 200 for _ in range(5))


# -- running without keys ---------------------------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=env or server_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("redismem: ") and "(hint: " in lines[0], result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_insecure_no_auth_is_refused_unless_the_host_is_loopback() -> None:
    result = run_cli(
        "serve", "--insecure-no-auth", "--host", "0.0.0.0", "--url", "redis://127.0.0.1:1/0"
    )
    assert result.returncode == 2
    one_line_error(result, "--insecure-no-auth", "loopback", "'0.0.0.0'")
    url = "redis://127.0.0.1:1/0"
    for host in ("::", "192.168.1.5", "example.com", "127.0.0.1.example.com"):
        with pytest.raises(InvalidInput, match="loopback"):
            ServerSettings(url=url, insecure_no_auth=True, host=host)
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        ServerSettings(url=url, insecure_no_auth=True, host=host)


def test_insecure_no_auth_on_loopback_serves_every_namespace_without_a_key(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(extra_args=["--insecure-no-auth"])
    user, session = new_id(), new_id("s")
    for namespace in server.namespaces:
        url = f"{server.api(namespace)}/users/{user}/sessions/{session}/messages"
        assert httpx.post(url, json=MESSAGE).status_code == 201
        assert len(httpx.get(url).json()["messages"]) == 1
    assert "WITHOUT API KEYS" in server.log()


def test_serve_without_a_keys_file_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli("serve", "--url", "redis://127.0.0.1:1/0")
    one_line_error(result, "no API keys file", "--keys-file")
    missing = run_cli(
        "serve", "--url", "redis://127.0.0.1:1/0", "--keys-file", str(tmp_path / "none")
    )
    one_line_error(missing, "none")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    malformed = run_cli("serve", "--url", "redis://127.0.0.1:1/0", "--keys-file", str(bad))
    one_line_error(malformed, "line 1")


def test_serve_without_the_server_extra_names_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None; from redismem.cli import main; "
        f"main(['serve', '--url', 'redis://127.0.0.1:1/0', '--keys-file', '{tmp_path}/k'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=server_env()
    )
    one_line_error(result, "redismem[server]")


def test_importing_the_server_package_and_the_cli_imports_no_web_framework() -> None:
    code = (
        "import sys, redismem, redismem.cli, redismem.server, redismem.server.commands; "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=server_env()
    )
    assert result.stdout.strip() == "[]"


# -- the keys file ------------------------------------------------------------------------


def test_keys_create_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    made = run_cli(
        "keys",
        "create",
        "--namespace",
        "team-a",
        "--role",
        "write",
        "--name",
        "ci",
        "--file",
        str(path),
    )
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert re.fullmatch(r"rmk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", key)
    assert "only time" in made.stderr
    text = path.read_text()
    assert key not in text and key.split("_", 2)[2] not in text  # the secret may hold "_"
    (record,) = [json.loads(line) for line in text.splitlines()]
    assert record == {
        "id": key_id(key),
        "namespace": "team-a",
        "role": "write",
        "sha256": hash_key(key),
        "name": "ci",
    }
    assert path.stat().st_mode & 0o077 == 0
    listed = run_cli("keys", "list", "--file", str(path))
    assert listed.stdout.split() == [key_id(key), "team-a", "write", "ci"]
    bad = run_cli(
        "keys", "create", "--namespace", "no spaces", "--role", "read", "--file", str(path)
    )
    one_line_error(bad, "namespace")
    nowhere = run_cli("keys", "create", "--namespace", "a", "--role", "read")
    one_line_error(nowhere, "REDISMEM_API_KEYS_FILE")


def test_the_key_ring_checks_the_whole_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    key, record = create_key(path, namespace="ns", role="admin")
    ring = KeyRing(path)
    assert ring.lookup(key) == record
    assert ring.lookup(key[:-1] + ("a" if key[-1] != "a" else "b")) is None
    assert ring.lookup(key + "x") is None
    assert ring.lookup("") is None
    assert load_keys(path) == {record.id: record}
    path.write_text(path.read_text() + path.read_text())
    with pytest.raises(InvalidInput, match="twice"):
        load_keys(path)


def test_roles_are_ordered() -> None:
    assert [r for r in ROLES if allows(r, "write")] == ["write", "admin"]
    assert allows("read", "read") and not allows("read", "admin")


def test_a_bad_keys_file_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "keys.jsonl"
    for text in (
        "not json\n",
        '{"id": "1"}\n',
        json.dumps({"id": "zz", "namespace": "a", "role": "read", "sha256": "0" * 64}) + "\n",
        "[1]\n",
    ):
        path.write_text(text)
        with pytest.raises(InvalidInput, match="line 1"):
            load_keys(path)
    path.write_text("# a comment\n\n")
    assert load_keys(path) == {}
    with pytest.raises(InvalidInput, match="role"):
        create_key(path, namespace="a", role="root")
