"""``redismem`` commands as real processes: URLs from flags or the environment,
one-line errors with a hint (never a traceback), and ``sessions``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
from test_cli_worker import drop_keys, run_cli

from redismem import Fact, Memory

pytestmark = pytest.mark.processes  # every test runs the CLI

COMMANDS = [
    ["worker"],
    ["worker", "--check"],
    ["stats"],
    ["sessions", "--user", "u"],
    ["inspect", "s", "--user", "u"],
    ["memories", "--user", "u"],
    ["users"],
    ["namespaces"],
    ["search", "q", "--user", "u"],
]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(extra)
    return env


def assert_one_line_error(result: Any, *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("redismem: ") and "(hint: " in line, result.stderr
    for needle in needles:
        assert needle in line, line
    return str(line)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_commands_refuse_to_run_without_a_redis_url(command: list[str]) -> None:
    result = run_cli(*command, env=clean_env())
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "redismem: no Redis URL given (hint: set REDISMEM_URL or pass --url redis://HOST:6379/0)"
    )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    "url, needle",
    [("http://localhost:6379", "is not a Redis URL"), ("memory://", "no other process can see")],
)
def test_commands_reject_urls_other_processes_cannot_use(
    command: list[str], url: str, needle: str
) -> None:
    result = run_cli(*command, env=clean_env(REDISMEM_URL=url))
    assert_one_line_error(result, "REDISMEM_URL", needle)
    assert result.returncode == 2


@pytest.mark.parametrize(
    "command, flag",
    [(["worker"], "--url"), (["worker", "--check"], "--queue-url"), (["stats"], "--queue-url")],
)
def test_url_flags_override_the_environment_and_are_checked_too(
    command: list[str], flag: str
) -> None:
    env = clean_env(REDISMEM_URL="redis://127.0.0.1:1/0", REDISMEM_QUEUE_URL="redis://x:1/0")
    result = run_cli(*command, flag, "http://localhost:6379", env=env)
    assert_one_line_error(result, flag, "is not a Redis URL")
    assert result.returncode == 2


def test_unreachable_redis_is_one_line(redis_server_factory: Callable[..., Any]) -> None:
    server = redis_server_factory()
    url = server.url
    server.kill()
    env = clean_env(REDISMEM_URL=url)
    worker = run_cli("worker", "--wait", "1", env=env)
    assert_one_line_error(worker, "unavailable", "waited 1 s", "is Redis running")
    assert worker.returncode == 1
    assert len(worker.stderr.strip().splitlines()) <= 2, worker.stderr  # a warning, the error
    for command in (["stats"], ["worker", "--check"], ["sessions"]):
        assert_one_line_error(run_cli(*command, env=env), "unavailable")


def test_wrong_or_missing_password_fails_at_once(
    redis_server_factory: Callable[..., Any],
) -> None:
    server = redis_server_factory(extra_args=("--requirepass", "sesame"))
    for url in (
        f"redis://:wrong@127.0.0.1:{server.port}/0",
        f"redis://127.0.0.1:{server.port}/0",
    ):
        for command in (["worker"], ["stats"], ["worker", "--check"]):
            result = run_cli(*command, "--url", url, env=clean_env(), timeout=20)
            line = assert_one_line_error(result, "password")
            assert "wrong" not in line  # the password is masked


def test_sessions_lists_a_users_sessions_and_flags_override_the_environment(
    redis_url: str, namespace: str
) -> None:
    async def write() -> None:
        async with await Memory.connect(redis_url, namespace=namespace) as memory:
            for session_id, count in (("trip-1", 3), ("trip-2", 1)):
                await memory.write(
                    [{"role": "user", "content": f"hello {i}"} for i in range(count)],
                    session_id=session_id,
                    user_id="alice",
                    tags={"topic": "travel"},
                )

    asyncio.run(write())
    # The environment names an unreachable Redis; --url wins.
    env = clean_env(REDISMEM_URL="redis://127.0.0.1:1/0", REDISMEM_NAMESPACE=namespace)
    try:
        listed = run_cli("sessions", "--user", "alice", "--url", redis_url, env=env)
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines() if line}
        assert rows["trip-1"][1] == "3" and rows["trip-2"][1] == "1", listed.stdout
        assert "topic=travel" in listed.stdout
        for header in ("messages", "tokens", "tags", "last access", "expires"):
            assert header in listed.stdout

        inspect = run_cli("inspect", "trip-1", "--user", "alice", "--url", redis_url, env=env)
        assert inspect.returncode == 0, inspect.stderr
        assert "alice / trip-1" in inspect.stdout

        nobody = run_cli("sessions", "--user", "bob", "--url", redis_url, env=env)
        assert nobody.returncode == 0 and "no live sessions" in nobody.stdout

        stats = run_cli(
            "stats",
            "--url",
            redis_url,
            "--queue-url",
            redis_url,
            env=env | {"REDISMEM_QUEUE_URL": "redis://127.0.0.1:1/0"},
        )
        assert stats.returncode == 0, stats.stderr
        assert "no worker seen" in stats.stdout
    finally:
        drop_keys(redis_url, namespace)


def test_memories_lists_a_users_memories_and_one_records_history(
    redis_url: str, namespace: str
) -> None:
    async def remember() -> str:
        async with await Memory.connect(redis_url, namespace=namespace) as memory:
            for city in ("Lisbon", "Porto"):
                added = await memory.memories.add(
                    Fact(
                        text=f"The user lives in {city}.",
                        subject="user",
                        predicate="lives_in",
                        object=city,
                    ),
                    user_id="alice",
                )
            return added.record.id

    porto = asyncio.run(remember())
    env = clean_env(REDISMEM_URL=redis_url, REDISMEM_NAMESPACE=namespace)
    try:
        listed = run_cli("memories", "--user", "alice", env=env)
        assert listed.returncode == 0, listed.stderr
        assert "The user lives in Porto." in listed.stdout
        assert "Lisbon" not in listed.stdout
        every = run_cli("memories", "lives", "--user", "alice", "--status", "any", env=env)
        assert every.returncode == 0 and "superseded" in every.stdout, every.stdout
        history = run_cli("memories", "--user", "alice", "--history", porto, env=env)
        assert history.returncode == 0 and "added" in history.stdout, history.stdout
        missing = run_cli("memories", "--user", "alice", "--history", "nope", env=env)
        assert missing.returncode == 1 and "no memory 'nope'" in missing.stdout
        bad = run_cli("memories", "--user", "", env=env)
        assert_one_line_error(bad, "user_id")
    finally:
        drop_keys(redis_url, namespace)
