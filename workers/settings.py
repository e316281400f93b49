"""arq ``WorkerSettings`` for redismem: ``arq workers.WorkerSettings`` or ``redismem worker``.

Configured from the environment:

``REDISMEM_URL``          memory Redis (sessions, summaries)
``REDISMEM_QUEUE_URL``    queue Redis (arq jobs, stats); defaults to ``REDISMEM_URL``.
                          arq does not run on Redis Cluster: keep the queue on a
                          standalone or Sentinel Redis while memory lives on a cluster.
``REDISMEM_NAMESPACE``    namespace(s) the reconcile sweep covers (comma separated)
``REDISMEM_QUEUE_NAME``   arq queue name (default ``redismem:queue``)
``REDISMEM_SUMMARIZER``   ``keypoints`` (default), ``truncate`` or ``llm``
``REDISMEM_LLM_BASE_URL``, ``REDISMEM_LLM_MODEL``, ``REDISMEM_LLM_API_KEY``
``REDISMEM_SWEEP_SECONDS`` how often the reconcile sweep runs (default 10)
``REDISMEM_SWEEP_GRACE``   seconds a pending mark waits for its job before the sweep
                          re-enqueues it (default 30)
``REDISMEM_SUMMARIZER_TIMEOUT`` seconds per summarizer call (default 30)
``REDISMEM_JOB_TIMEOUT``   arq job timeout in seconds (default 45; must exceed the
                          summarizer timeout; a crashed worker's job re-runs after it + 10 s)

Jobs are serialized with msgpack, never pickle.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from arq import cron, func
from arq.connections import RedisSettings

from redismem.config import EMBEDDED_URL
from redismem.queue import DEFAULT_QUEUE_NAME, SUMMARIZE_JOB, SummaryQueue, pack_job, unpack_job
from redismem.summarizers import summarizer_from_env

from .jobs import JOB_TIMEOUT_S, reconcile_pending, summarize_session

__all__ = ["WorkerSettings", "worker_ctx"]


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def memory_url() -> str:
    return _env("REDISMEM_URL", EMBEDDED_URL)


def queue_url() -> str:
    return _env("REDISMEM_QUEUE_URL", memory_url())


def queue_name() -> str:
    return _env("REDISMEM_QUEUE_NAME", DEFAULT_QUEUE_NAME)


def worker_ctx(summarizer: Any = None) -> dict[str, Any]:
    """The parts of ``ctx`` the jobs need, besides arq's own ``redis``."""
    namespaces = [n.strip() for n in _env("REDISMEM_NAMESPACE", "redismem").split(",") if n.strip()]
    return {
        "memory_url": memory_url(),
        "queue_url": queue_url(),
        "namespaces": namespaces,
        "memories": {},
        "summarizer": summarizer if summarizer is not None else summarizer_from_env(),
        "summarizer_timeout": float(_env("REDISMEM_SUMMARIZER_TIMEOUT", "30")),
        "queue": SummaryQueue(queue_url(), queue_name=queue_name()),
    }


async def startup(ctx: dict[str, Any]) -> None:
    for key, value in worker_ctx(ctx.get("summarizer")).items():
        ctx.setdefault(key, value)


async def shutdown(ctx: dict[str, Any]) -> None:
    for memory in ctx.get("memories", {}).values():
        await memory.aclose()
    queue = ctx.get("queue")
    if queue is not None:
        await queue.aclose()


def _redis_settings() -> RedisSettings:
    url = queue_url()
    if url.startswith("memory://"):
        return RedisSettings()  # replaced by an embedded pool in workers.inprocess
    return RedisSettings.from_dsn(url)


_sweep_every = max(1, int(_env("REDISMEM_SWEEP_SECONDS", "10")))


class WorkerSettings:
    """Pass to arq: ``arq workers.WorkerSettings``."""

    functions: ClassVar[list[Any]] = [
        func(summarize_session, name=SUMMARIZE_JOB, keep_result=0, timeout=JOB_TIMEOUT_S)
    ]
    cron_jobs: ClassVar[list[Any]] = [
        cron(
            reconcile_pending,
            # One sweep schedule per queue: deployments sharing a Redis with
            # different queue names must not take each other's ticks.
            name=f"reconcile_pending:{queue_name()}",
            second=set(range(0, 60, _sweep_every)),
            run_at_startup=True,
            keep_result=0,
            timeout=JOB_TIMEOUT_S,
            unique=True,
        )
    ]
    on_startup = startup
    on_shutdown = shutdown
    redis_settings = _redis_settings()
    queue_name = queue_name()
    job_serializer = pack_job
    job_deserializer = unpack_job
    keep_result = 0
    max_tries = 10
    max_jobs = 16
    health_check_interval = 5
    poll_delay = 0.1
