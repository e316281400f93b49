"""``redismem demo`` fails loudly: bad flags, dead workers, no summaries."""

from __future__ import annotations

import os
import re

import pytest
from test_cli_worker import run_cli


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
