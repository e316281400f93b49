"""A client says when no worker runs on its queue, and lists the workers.

On a real Redis with no worker, the first queued write and a ``flush`` that
times out log one WARNING naming the queue and how to start a worker (not
one per call); with a worker process running, nothing is said and
``mem.workers()`` lists it. The embedded backend runs its workers in
process: never a warning, and ``workers()`` lists the in-process ones.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from conftest import MemoryFactory
from worker_support import wait_ready, worker_env

from redismem import SyncMemory
from redismem.longterm.extraction import RuleExtractor
from redismem.workers import presence
from redismem.workers.inprocess import InProcessWorker

LOGGER = "redismem.workers.presence"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


async def _write(mem: Any, session: str) -> None:
    await mem.write([{"role": "user", "content": "hello there"}], session_id=session)


async def test_no_worker_is_said_once_when_work_is_queued_and_flush_times_out(
    redis_url: str,
    memory_factory: MemoryFactory,
    queue_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    mem = await memory_factory(redis_url, queue_name=queue_name, summarize_delay=0)
    await _write(mem, "s1")
    assert await mem.flush(timeout=0.3) is False
    await _write(mem, "s2")
    assert await mem.flush(timeout=0.3) is False
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert queue_name in said[0]
    assert f"REDISMEM_QUEUE_NAME={queue_name} redismem worker --url redis://" in said[0]
    assert f"--namespace {mem.layout.namespace}" in said[0]
    assert "\n" not in said[0]
    workers = await mem.workers()
    assert list(workers) == [] and workers.live == [] and not workers.embedded
    assert "no worker seen on queue" in workers.describe()


async def test_the_warning_comes_again_only_after_its_interval(
    redis_url: str,
    memory_factory: MemoryFactory,
    queue_name: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    monkeypatch.setattr(presence, "WARN_EVERY_S", 0.0)
    mem = await memory_factory(redis_url, queue_name=queue_name)
    await _write(mem, "s1")
    assert await mem.flush(timeout=0.2) is False
    assert await mem.flush(timeout=0.2) is False
    said = _warnings(caplog)
    assert len(said) >= 2 and any("flush() timed out" in line for line in said), said


async def test_a_running_worker_is_listed_and_nothing_is_said(
    redis_url: str,
    workers: Any,
    raw_factory: Any,
    namespace: str,
    queue_name: str,
    memory_factory: MemoryFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    raw = await raw_factory(redis_url)
    env = worker_env(redis_url, namespace, queue_name, WORKER_NAME="w1")
    await wait_ready(raw, workers.start(env, name="w1"))
    mem = await memory_factory(redis_url, queue_name=queue_name)
    await _write(mem, "s1")
    await mem.flush(timeout=0)  # times out at once: the workers are looked at
    assert await mem.flush(timeout=30) is True
    assert _warnings(caplog) == []
    found = await mem.workers()
    assert [w.name for w in found] == ["w1"]
    [worker] = found.live
    assert worker.healthy and not worker.stale and not worker.in_process
    assert worker.last_seen is not None and worker.record
    assert found.queue == queue_name and not found.embedded
    assert "1 of 1 healthy" in found.describe() and "worker w1: healthy" in found.describe()


async def test_each_worker_says_what_it_runs_and_no_secret(
    redis_url: str,
    workers: Any,
    raw_factory: Any,
    namespace: str,
    queue_name: str,
    memory_factory: MemoryFactory,
) -> None:
    """A worker process records its namespaces and plug-in names beside its
    heartbeat; ``mem.workers()`` shows them, never the LLM's key or URL."""
    raw = await raw_factory(redis_url)
    secret = "sk-very-secret-1234"
    env = worker_env(
        redis_url,
        namespace,
        queue_name,
        WORKER_NAME="w-runs",
        NAMESPACE=f"{namespace},{namespace}-other",
        SUMMARIZER="llm",
        LLM_MODEL="tiny-model",
        LLM_API_KEY=secret,
        LLM_BASE_URL="http://user:hunter2@127.0.0.1:9/v1",
        EXTRACTOR="rules",
        EMBEDDER="hashing",
    )
    process = workers.start(env, name="w-runs")
    await wait_ready(raw, process)
    mem = await memory_factory(redis_url, queue_name=queue_name)
    [worker] = await mem.workers()
    assert worker.name == "w-runs" and worker.healthy
    assert worker.namespaces == (namespace, f"{namespace}-other")
    assert (worker.summarizer, worker.extractor) == ("llm (tiny-model)", "rules")
    assert (worker.consolidator, worker.embedder) == ("off", "hashing (hashing-256)")
    said = (await mem.workers()).describe()
    line = (
        f"  namespaces {namespace}, {namespace}-other: summarizer llm (tiny-model), "
        "extractor rules, consolidator off, embedder hashing (hashing-256)"
    )
    assert line in said.splitlines(), said
    stored = [await raw.dump(key) async for key in raw.scan_iter(match=f"{queue_name}*")]
    assert stored and not any(b"hunter2" in v or secret.encode() in v for v in stored if v)
    assert await raw.pttl(f"{queue_name}:runs:w-runs") > 0  # no key without TTL
    process.stop()  # SIGTERM: the worker deregisters, its record goes with it
    assert not await raw.exists(f"{queue_name}:runs:w-runs")
    assert secret not in process.log() and "hunter2" not in process.log()


async def test_the_embedded_backend_never_warns_and_lists_its_in_process_workers(
    memory_factory: MemoryFactory, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    url = f"memory://presence-{namespace}"
    mem = await memory_factory(url)
    await _write(mem, "s1")
    assert await mem.flush(timeout=0.2) is False
    assert _warnings(caplog) == []
    none = await mem.workers()
    assert none.embedded and list(none) == []
    assert "InProcessWorker" in none.describe()
    async with InProcessWorker(url, namespaces=[namespace], extractor=RuleExtractor()):
        assert await mem.flush(timeout=30) is True
        found = await mem.workers()
    assert [w.in_process and w.healthy for w in found] == [True]
    [worker] = found
    assert worker.namespaces == (namespace,) and worker.extractor == "rules"
    assert (worker.summarizer, worker.consolidator, worker.embedder) == ("keypoints", "off", "none")
    assert f"namespace {namespace}: summarizer keypoints, extractor rules" in found.describe()
    assert _warnings(caplog) == []


def test_the_sync_client_lists_the_workers_too(namespace: str) -> None:
    mem = SyncMemory.connect(f"memory://presence-sync-{namespace}", namespace=namespace)
    try:
        found = mem.workers()
        assert found.embedded and len(found) == 0
    finally:
        mem.close()
