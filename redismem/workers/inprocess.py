"""An arq worker inside the current process, for the embedded backend.

``memory://`` data lives in one process, so its jobs must run there too.
``InProcessWorker`` runs the same jobs and settings as the worker processes,
on an ``ArqRedis`` pool over the embedded server. arq logs the server's
``INFO`` at start-up, which the embedded backend does not implement; that
call is made tolerant here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import warnings
from types import TracebackType
from typing import Any, Self

import arq.worker
from arq.connections import log_redis_info

from redismem.config import EMBEDDED_URL, WorkerConfig
from redismem.core.queue import arq_pool
from redismem.workers.run import MemoryWorker
from redismem.workers.settings import worker_settings

__all__ = ["InProcessWorker"]

_numbers = itertools.count(1)


async def _tolerant_redis_info(redis: Any, log_func: Any) -> None:
    try:
        await log_redis_info(redis, log_func)
    except Exception:  # the embedded backend has no INFO
        log_func("redis info unavailable (embedded backend)")


setattr(arq.worker, "log_redis_info", _tolerant_redis_info)  # noqa: B010 - patch a module function


class InProcessWorker:
    """Run summarization jobs in this process: ``async with InProcessWorker(url): ...``.

    Settings not given come from the environment (``WorkerConfig.from_env``),
    read when the worker is created; ``options`` are more ``WorkerConfig``
    settings (``extractor=RuleExtractor()``); ``config`` gives them all at once.
    """

    def __init__(
        self,
        url: str = EMBEDDED_URL,
        *,
        summarizer: Any = None,
        namespaces: list[str] | None = None,
        queue_name: str | None = None,
        config: WorkerConfig | None = None,
        **options: Any,
    ) -> None:
        if config is None:
            given: dict[str, Any] = {"url": url, "queue_url": url, **options}
            if summarizer is not None:
                given["summarizer"] = summarizer
            if namespaces:
                given["namespaces"] = tuple(namespaces)
            if queue_name:
                given["queue_name"] = queue_name
            config = WorkerConfig.from_env(**given)
            # Several may run in one process: each its own name.
            config = config.replace(name=f"{config.name}-inprocess-{next(_numbers)}")
        self.config = config
        self._worker: arq.worker.Worker | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._worker = MemoryWorker(
            **worker_settings(self.config),
            redis_pool=arq_pool(self.config.queue_url),
            handle_signals=False,
        )
        self._task = asyncio.create_task(self._worker.async_run())

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped the worker, if one did."""
        if self._task is None or not self._task.done() or self._task.cancelled():
            return None
        return self._task.exception()

    async def aclose(self) -> None:
        if self._worker is not None:
            with warnings.catch_warnings():
                # arq's Worker.close() still calls redis-py's deprecated close().
                warnings.filterwarnings("ignore", "Call to deprecated close", DeprecationWarning)
                try:
                    await self._worker.close()
                except asyncio.CancelledError:
                    # close() awaits the jobs in flight, which it cancels: their
                    # cancellation is not ours, unless this task is cancelled too.
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
            self._worker = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
