"""``redismem demo`` fails loudly: bad flags, dead workers, no summaries."""

from __future__ import annotations

import os
import re

import pytest
from servers import LocalCluster
from test_cli_worker import run_cli

from redismem import Memory

pytestmark = pytest.mark.processes  # every test runs the CLI


def demo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDISMEM_", "OPENAI"))}
    env.update(extra)
    return env


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--sessions", "0"),
        ("--agents", "0"),
        ("--workers", "-1"),
        ("--duration", "-1"),
        ("--duration", "0"),
        ("--duration", "nan"),
        ("--agents", "two"),
    ],
)
def test_demo_rejects_invalid_flags_with_a_usage_error(flag: str, value: str) -> None:
    result = run_cli("demo", flag, value, env=demo_env(REDISMEM_URL="redis://127.0.0.1:1/0"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"redismem demo: error: argument {flag}:"), result.stderr


def test_demo_fails_with_the_workers_error_when_they_die(redis_url: str) -> None:
    # The llm summarizer without its settings: every worker exits at start-up.
    result = run_cli(
        "demo",
        "--agents",
        "1",
        "--duration",
        "20",
        "--summarizer",
        "llm",
        env=demo_env(REDISMEM_URL=redis_url),
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "OK" not in result.stdout
    assert re.search(r"^FAIL: worker-\d exited with code 2", result.stdout, re.MULTILINE)
    assert "REDISMEM_LLM_BASE_URL" in result.stdout  # the worker's own words


def test_demo_fails_when_due_sessions_get_no_summary(redis_url: str) -> None:
    # Workers run, but their summarizer cannot reach its endpoint: no summary.
    env = demo_env(
        REDISMEM_URL=redis_url,
        REDISMEM_LLM_BASE_URL="http://127.0.0.1:9/v1",
        REDISMEM_LLM_MODEL="none",
        REDISMEM_SUMMARIZER_TIMEOUT="1",
    )
    result = run_cli(
        "demo",
        "--agents",
        "1",
        "--workers",
        "1",
        "--duration",
        "2",
        "--summarizer",
        "llm",
        env=env,
        timeout=90,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"lost messages \(verified\)\s+0$", result.stdout, re.MULTILINE)
    assert "FAIL: no summary made" in result.stdout, result.stdout


def test_demo_runs_on_a_cluster_with_the_queue_on_a_standalone_server(
    cluster: LocalCluster, redis_url: str
) -> None:
    result = run_cli(
        "demo",
        "--url",
        cluster.url,
        "--queue-url",
        redis_url,
        "--agents",
        "2",
        "--workers",
        "1",
        "--duration",
        "4",
        env=demo_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: no message lost" in result.stdout
    summaries = re.search(r"summaries made\s+(\d+)", result.stdout)
    assert summaries and int(summaries.group(1)) > 0, result.stdout


def test_demo_on_a_cluster_without_a_queue_url_says_what_to_set(cluster: LocalCluster) -> None:
    result = run_cli("demo", "--url", cluster.url, "--duration", "1", env=demo_env(), timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "REDISMEM_QUEUE_URL" in result.stderr + result.stdout


async def test_operator_commands_read_a_cluster(
    cluster: LocalCluster, redis_url: str, namespace: str
) -> None:
    memory = await Memory.connect(cluster.url, namespace=namespace, queue_url=redis_url)
    try:
        for user in ("ann", "bob", "cy"):
            await memory.write(
                [{"role": "user", "content": f"hello from {user}"}], session_id="s", user_id=user
            )
        flags = ["--url", cluster.url, "--queue-url", redis_url, "--namespace", namespace]
        stats = run_cli("stats", *flags, env=demo_env(), timeout=60)
        assert stats.returncode == 0, stats.stdout + stats.stderr
        assert re.search(r"pending\D+3\b", stats.stdout), stats.stdout
        sessions = run_cli("sessions", *flags, "--user", "bob", env=demo_env(), timeout=60)
        assert sessions.returncode == 0 and "s" in sessions.stdout, sessions.stderr
        inspect = run_cli("inspect", "s", *flags, "--user", "cy", env=demo_env(), timeout=60)
        assert inspect.returncode == 0, inspect.stdout + inspect.stderr
        assert "hello from cy" in inspect.stdout
    finally:
        await memory.clear_all()
        await memory.aclose()
