"""``MemoryWorker``: arq's ``Worker`` subclassed, never patched.

The resets arq 0.28 lets end a worker are ridden out by the subclass that
``redismem worker``, ``InProcessWorker`` and arq's own CLI (given redismem's
``WorkerSettings``) run; importing redismem leaves arq's ``Worker`` as it is
for every other user of arq in the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import arq.worker
import pytest
import redis.exceptions as rexc
from arq import cron, func
from arq.connections import ArqRedis

from redismem.core.connection import open_redis
from redismem.workers.run import MemoryWorker

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **env: str) -> str:
    """``code`` run by a fresh interpreter in the checkout; its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.processes  # a fresh interpreter
def test_importing_the_workers_changes_nothing_in_arq() -> None:
    code = """
import arq.cli, arq.worker
before = dict(vars(arq.worker.Worker))
cli = (arq.cli.run_worker, arq.cli.create_worker)
import redismem.cli, redismem.workers, redismem.workers.inprocess, redismem.workers.run
import redismem.workers.settings, redismem.workers.connections, redismem.workers.jobs
after = dict(vars(arq.worker.Worker))
changed = sorted(k for k in before.keys() | after.keys() if before.get(k) is not after.get(k))
print(changed, (arq.cli.run_worker, arq.cli.create_worker) == cli)
"""
    assert _python(code) == "[] True"


def test_arq_s_cli_given_redismem_s_settings_builds_a_memory_worker(redis_url: str) -> None:
    """``arq workers.WorkerSettings`` (the checkout's entry) imports the
    settings, then builds its worker with ``arq.cli``'s functions: those
    build a ``MemoryWorker``; arq's ``Worker`` and ``arq.worker``'s own
    ``create_worker`` are untouched."""
    code = """
import warnings
warnings.simplefilter("ignore", DeprecationWarning)  # arq's get_event_loop() outside a loop
import arq.cli, arq.worker
import workers
built = arq.cli.create_worker(workers.WorkerSettings)
plain = arq.worker.create_worker(workers.WorkerSettings)
print(type(built).__name__, type(plain) is arq.worker.Worker, arq.cli.run_worker.__module__)
"""
    out = _python(code, REDISMEM_URL=redis_url, REDISMEM_QUEUE_NAME="redismem/arq-cli-test")
    assert out == "MemoryWorker True redismem.workers.run"


async def _noop(ctx: dict[str, Any]) -> None:
    return None


class _LostWatch:
    """A pipeline whose connection dropped while it watched a key: redis-py
    raises this ``WatchError`` (the watch is gone with the connection)."""

    async def __aenter__(self) -> _LostWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def watch(self, *keys: Any) -> None:
        raise rexc.WatchError("A ConnectionError occurred on while watching one or more keys")

    def __getattr__(self, name: str) -> Any:
        raise rexc.ConnectionError("Connection reset by peer")


def _worker(kind: type[arq.worker.Worker], pool: ArqRedis) -> arq.worker.Worker:
    return kind(
        functions=[func(_noop, name="noop")],
        cron_jobs=[cron(_noop, name="tick", second=0, unique=True, run_at_startup=True)],
        redis_pool=pool,
        handle_signals=False,
        max_jobs=4,
    )


@pytest.fixture
def lost_pool(monkeypatch: pytest.MonkeyPatch) -> ArqRedis:
    """An arq pool whose every pipeline loses its connection."""
    pool = ArqRedis(connection_pool=open_redis("memory://workers-arq").connection_pool)
    monkeypatch.setattr(pool, "pipeline", lambda *a, **k: _LostWatch())

    async def enqueue_lost(*args: Any, **kwargs: Any) -> None:
        raise rexc.WatchError("A ConnectionError occurred on while watching one or more keys")

    monkeypatch.setattr(pool, "enqueue_job", enqueue_lost)
    return pool


async def test_a_watch_lost_while_starting_a_job_gives_the_slot_back(lost_pool: ArqRedis) -> None:
    with pytest.raises(rexc.WatchError):  # arq's own Worker: the poll loop ends
        await _worker(arq.worker.Worker, lost_pool).start_jobs([b"job-1"])
    worker = _worker(MemoryWorker, lost_pool)
    free = worker.sem._value
    await worker.start_jobs([b"job-1", b"job-2"])
    assert (worker.job_counter, worker.sem._value) == (0, free)


async def test_a_connection_lost_around_a_job_or_a_cron_tick_ends_no_worker(
    lost_pool: ArqRedis,
) -> None:
    plain = _worker(arq.worker.Worker, lost_pool)
    with pytest.raises(rexc.ConnectionError):
        await plain.run_job("job-1", 0)
    with pytest.raises(rexc.WatchError):
        await plain.run_cron(datetime.now(tz=UTC), 0.5)
    worker = _worker(MemoryWorker, lost_pool)
    await worker.run_job("job-1", 0)  # arq runs it again once its in-progress key expires
    await worker.run_cron(datetime.now(tz=UTC), 0.5)  # the next tick enqueues
