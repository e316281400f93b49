"""A worker's ``ctx``: the shared resources its jobs use, made in ``startup``.

arq hands every job one dict, ``ctx``. A worker is created with
``ctx = {"config": WorkerConfig}`` (see ``settings.worker_settings``), and
``startup`` adds what the jobs share:

``config``    the ``WorkerConfig`` (URLs, queue, namespaces, summarizer, timeouts)
``backends``  one ``Backend`` per namespace, opened on first use (``backend_for``)
``queue``     a ``SummaryQueue`` on the queue Redis, for re-enqueueing
``heartbeat`` the task keeping this worker registered, with what it runs (``health.heartbeat``)
``gauges``    with the metrics on, the task refreshing their gauges (``gauges.refresh``)

arq adds ``redis`` (its pool on the queue Redis, used for stats) and, per
job, ``job_try``. ``shutdown`` closes all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redismem import metrics
from redismem.config import MemoryConfig, WorkerConfig
from redismem.core.backend import Backend, open_backend
from redismem.core.keys import KeyLayout
from redismem.core.queue import QueueStats, SummaryQueue
from redismem.workers import gauges, health
from redismem.workers.runs import runs_of

__all__ = ["config_of", "backend_for", "queue_of", "resources", "shutdown", "startup", "stats_for"]


def resources(config: WorkerConfig) -> dict[str, Any]:
    """The shared resources of a worker with ``config`` (opened lazily: no
    connection is made here)."""
    return {
        "config": config,
        "backends": {},
        "queue": SummaryQueue(config.queue_url, queue_name=config.queue_name),
    }


def config_of(ctx: dict[str, Any]) -> WorkerConfig:
    config: WorkerConfig = ctx["config"]
    return config


def queue_of(ctx: dict[str, Any]) -> SummaryQueue:
    queue: SummaryQueue = ctx["queue"]
    return queue


async def backend_for(ctx: dict[str, Any], namespace: str) -> Backend:
    """The worker's ``Backend`` for a namespace, opened on first use."""
    backends: dict[str, Backend] = ctx["backends"]
    if namespace not in backends:
        config = config_of(ctx)
        backends[namespace] = await open_backend(
            MemoryConfig.from_env(url=config.url, namespace=namespace, memory_ttl=config.memory_ttl)
        )
    return backends[namespace]


def stats_for(ctx: dict[str, Any], layout: KeyLayout) -> QueueStats:
    """The namespace's queue stats, on arq's pool (the queue Redis)."""
    return QueueStats(ctx["redis"], layout, config_of(ctx).queue_url)


async def startup(ctx: dict[str, Any]) -> None:
    """arq ``on_startup``: open the shared resources, start the heartbeat."""
    config = config_of(ctx)
    ctx.update(resources(config))
    ctx["heartbeat"] = asyncio.create_task(
        health.heartbeat(ctx["redis"], config.queue_name, config.name, runs_of(config))
    )
    if metrics.enabled():
        ctx["gauges"] = asyncio.create_task(
            gauges.refresh(ctx["redis"], config, lambda namespace: backend_for(ctx, namespace))
        )


async def shutdown(ctx: dict[str, Any]) -> None:
    """arq ``on_shutdown``: stop the heartbeat, deregister, close everything."""
    config = config_of(ctx)
    refreshing = ctx.pop("gauges", None)
    if refreshing is not None:
        refreshing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refreshing
    beat = ctx.pop("heartbeat", None)
    if beat is not None:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
        await health.deregister(ctx["redis"], config.queue_name, config.name)
    for backend in ctx.get("backends", {}).values():
        await backend.aclose()
    queue = ctx.get("queue")
    if queue is not None:
        await queue.aclose()
