"""``redismem worker`` processes ride out a Redis restart (defect 7 of issue 7).

A disposable redis-server with an fsynced AOF is SIGKILLed and started again
on the same port a second later; both worker processes must still be running
afterwards and keep summarizing new writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_worker import CliWorkers, run_cli
from worker_support import dialogue, eventually, worker_env

from redismem import Memory
from redismem.errors import RedisMemError

KEEP, BATCH = 4, 4


@pytest.fixture
def cli_workers(tmp_path: Path) -> Iterator[CliWorkers]:
    workers = CliWorkers(tmp_path / "workers")
    try:
        yield workers
    finally:
        workers.close()


async def connect_when_up(url: str, **options: Any) -> Memory:
    deadline = time.monotonic() + 10
    while True:
        try:
            return await Memory.connect(url, **options)
        except RedisMemError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_workers_survive_a_redis_restart_and_keep_summarizing(
    redis_server_factory: Callable[..., Any], cli_workers: CliWorkers, namespace: str
) -> None:
    server = redis_server_factory(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
    queue = f"redismem/queue-{namespace}"
    env = worker_env(server.url, namespace, queue, SWEEP_SECONDS=1, SWEEP_GRACE=1)
    first, second = cli_workers.start(env), cli_workers.start(env)
    options: dict[str, Any] = dict(
        namespace=namespace,
        keep_recent=KEEP,
        summarize_batch=BATCH,
        queue_name=queue,
        summarize_delay=0.1,
    )

    async def summarized(memory: Memory, session_id: str) -> bool:
        return await memory.summary(session_id=session_id, user_id="u") is not None

    memory = await Memory.connect(server.url, **options)
    try:
        await memory.write(dialogue(KEEP + BATCH), session_id="before", user_id="u")
        await eventually(
            lambda: summarized(memory, "before"),
            within=20,
            what="a summary before the restart",
            describe=cli_workers.logs,
        )
    finally:
        await memory.aclose()

    server.kill()
    await asyncio.sleep(1.0)
    server.restart()
    await asyncio.sleep(5.0)
    assert first.alive and second.alive, cli_workers.logs()

    memory = await connect_when_up(server.url, **options)
    try:
        await memory.write(dialogue(KEEP + BATCH), session_id="after", user_id="u")
        await eventually(
            lambda: summarized(memory, "after"),
            within=20,
            what="a summary after the restart",
            describe=cli_workers.logs,
        )
    finally:
        await memory.aclose()
    assert first.alive and second.alive, cli_workers.logs()


def test_a_worker_started_while_redis_is_down_waits_for_it(
    redis_server_factory: Callable[..., Any], cli_workers: CliWorkers, namespace: str
) -> None:
    server = redis_server_factory()
    server.kill()
    queue = f"redismem/queue-{namespace}"
    env = worker_env(server.url, namespace, queue)
    worker = cli_workers.start(env, "--wait", "30")
    time.sleep(2.0)
    assert worker.alive, cli_workers.logs()
    server.restart()
    deadline = time.monotonic() + 20
    while run_cli("worker", "--check", worker.name, env=env).returncode != 0:
        assert worker.alive and time.monotonic() < deadline, cli_workers.logs()
        time.sleep(0.3)
