"""Summarization workers (arq), installed with redismem.

- ``settings``: the arq settings of a worker, built from a ``WorkerConfig``
- ``jobs``: summarize one session; sweep for sessions whose job never came
- ``context``: the resources a worker's jobs share (``ctx``)
- ``health``: per-worker heartbeats and ``redismem worker --check``
- ``connections``: Redis pools that ride out outages
- ``run``: ``MemoryWorker`` (arq's ``Worker``, riding out connection resets)
  and ``redismem worker`` (serve, restart in place)
- ``inprocess``: ``InProcessWorker``, for the embedded backend

Run a worker with ``redismem worker``, or with arq's CLI: ``arq
redismem.workers.WorkerSettings`` (``arq workers.WorkerSettings`` from a
checkout). ``WorkerSettings`` is built from the environment when it is looked
up, never at import of this package; the lookup also makes arq's CLI, when it
is what runs, build a ``MemoryWorker`` (``run.use_in_arq_cli``). Importing
this package changes nothing in arq.
"""

from __future__ import annotations

from typing import Any

from redismem.config import WorkerConfig
from redismem.workers.settings import settings_class, worker_settings

__all__ = ["WorkerConfig", "WorkerSettings", "settings_class", "worker_settings"]


def __getattr__(name: str) -> Any:
    """``WorkerSettings``: arq's settings class, from the environment read now."""
    if name == "WorkerSettings":
        from redismem.workers.run import use_in_arq_cli

        settings = settings_class(WorkerConfig.from_env())
        use_in_arq_cli()
        return settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
