"""A worker's ``ctx``: the shared resources its jobs use, made in ``startup``.

arq hands every job one dict, ``ctx``. A worker is created with
``ctx = {"config": WorkerConfig}`` (see ``settings.worker_settings``), and
``startup`` adds what the jobs share:

``config``    the ``WorkerConfig`` (URLs, queue, namespaces, summarizer, timeouts)
``memories``  one ``Memory`` per namespace, opened on first use (``memory_for``)
``queue``     a ``SummaryQueue`` on the queue Redis, for re-enqueueing
``heartbeat`` the task keeping this worker registered (``health.heartbeat``)

arq adds ``redis`` (its pool on the queue Redis, used for stats) and, per
job, ``job_try``. ``shutdown`` closes all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redismem.client import Memory
from redismem.config import WorkerConfig
from redismem.core.keys import KeyLayout
from redismem.core.queue import QueueStats, SummaryQueue
from redismem.workers import health

__all__ = ["config_of", "memory_for", "queue_of", "resources", "shutdown", "startup", "stats_for"]


def resources(config: WorkerConfig) -> dict[str, Any]:
    """The shared resources of a worker with ``config`` (opened lazily: no
    connection is made here)."""
    return {
        "config": config,
        "memories": {},
        "queue": SummaryQueue(config.queue_url, queue_name=config.queue_name),
    }


def config_of(ctx: dict[str, Any]) -> WorkerConfig:
    config: WorkerConfig = ctx["config"]
    return config


def queue_of(ctx: dict[str, Any]) -> SummaryQueue:
    queue: SummaryQueue = ctx["queue"]
    return queue


async def memory_for(ctx: dict[str, Any], namespace: str) -> Memory:
    """The worker's ``Memory`` for a namespace, opened on first use."""
    memories: dict[str, Memory] = ctx["memories"]
    if namespace not in memories:
        config = config_of(ctx)
        memories[namespace] = await Memory.connect(
            config.url, namespace=namespace, memory_ttl=config.memory_ttl
        )
    return memories[namespace]


def stats_for(ctx: dict[str, Any], layout: KeyLayout) -> QueueStats:
    """The namespace's queue stats, on arq's pool (the queue Redis)."""
    return QueueStats(ctx["redis"], layout, config_of(ctx).queue_url)


async def startup(ctx: dict[str, Any]) -> None:
    """arq ``on_startup``: open the shared resources, start the heartbeat."""
    config = config_of(ctx)
    ctx.update(resources(config))
    ctx["heartbeat"] = asyncio.create_task(
        health.heartbeat(ctx["redis"], config.queue_name, config.name)
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    """arq ``on_shutdown``: stop the heartbeat, deregister, close everything."""
    config = config_of(ctx)
    beat = ctx.pop("heartbeat", None)
    if beat is not None:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
        await health.deregister(ctx["redis"], config.queue_name, config.name)
    for memory in ctx.get("memories", {}).values():
        await memory.aclose()
    queue = ctx.get("queue")
    if queue is not None:
        await queue.aclose()
