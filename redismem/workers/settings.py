"""arq settings of a redismem worker, built from a ``WorkerConfig``.

arq takes its job functions (with their timeouts) and cron jobs as settings,
so they are built here from the config when a worker is created, never at
import: ``worker_settings(config)`` is the keyword arguments of arq's
``Worker`` (``redismem worker`` and ``InProcessWorker`` pass it on), and
``settings_class(config)`` the same as a class for arq's own CLI
(``arq redismem.workers.WorkerSettings``; ``arq workers.WorkerSettings`` from
a checkout), which looks it up from the environment once, at start-up.
Jobs are serialized with msgpack, never pickle.
"""

from __future__ import annotations

from typing import Any

from arq import cron, func

from redismem.config import WorkerConfig, check_url
from redismem.core.queue import RECONCILE_JOB, SUMMARIZE_JOB, pack_job, unpack_job
from redismem.workers.connections import queue_pool, redis_settings
from redismem.workers.context import shutdown, startup
from redismem.workers.health import HEALTH_INTERVAL_S, health_key
from redismem.workers.jobs import reconcile_pending, summarize_session

__all__ = ["MAX_JOBS", "settings_class", "worker_settings"]

#: Jobs one worker runs at once.
MAX_JOBS = 16


def worker_settings(config: WorkerConfig) -> dict[str, Any]:
    """The keyword arguments of arq's ``Worker`` for ``config`` (a new dict,
    with a new ``ctx``, each call), except its Redis: pass ``redis_pool`` or
    ``redis_settings`` as well."""
    return {
        "functions": [
            func(summarize_session, name=SUMMARIZE_JOB, keep_result=0, timeout=config.job_timeout)
        ],
        "cron_jobs": [
            cron(
                reconcile_pending,
                # One sweep schedule per queue: deployments sharing a Redis with
                # different queue names must not take each other's ticks.
                name=f"{RECONCILE_JOB}:{config.queue_name}",
                second=set(range(0, 60, config.sweep_seconds)),
                run_at_startup=True,
                keep_result=0,
                timeout=config.job_timeout,
                unique=True,
            )
        ],
        "on_startup": startup,
        "on_shutdown": shutdown,
        "ctx": {"config": config},
        "queue_name": config.queue_name,
        "health_check_key": health_key(config.queue_name, config.name),
        "health_check_interval": HEALTH_INTERVAL_S,
        "job_serializer": pack_job,
        "job_deserializer": unpack_job,
        "keep_result": 0,
        "max_tries": 10,
        "max_jobs": MAX_JOBS,
        "poll_delay": 0.1,
    }


def settings_class(config: WorkerConfig) -> type:
    """``worker_settings(config)`` as a ``WorkerSettings`` class for arq's CLI,
    with a queue pool (and ``redis_settings``) that ride out outages. ``InvalidInput`` when a URL
    is not a Redis server's."""
    check_url(config.url, "REDISMEM_URL")
    queue_url = check_url(config.queue_url, "REDISMEM_QUEUE_URL")
    attributes = worker_settings(config)
    attributes["redis_settings"] = redis_settings(queue_url)  # for `arq --check`
    # The worker's own pool, as `redismem worker` builds it: arq builds none
    # that rides out a Sentinel failover (it passes no retry settings then).
    attributes["redis_pool"] = queue_pool(queue_url, config.queue_name)
    attributes["__doc__"] = "Pass to arq: ``arq workers.WorkerSettings``."
    return type("WorkerSettings", (), attributes)
