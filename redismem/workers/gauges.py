"""The workers' gauges that need Redis reads, refreshed in the background.

While the metrics are on (``redismem worker --metrics-port``), every
``REFRESH_S`` seconds each worker sets:

* ``redismem_queue_depth{queue}``: jobs on the queue, waiting or deferred
  (one ``ZCARD`` on the queue Redis);
* ``redismem_sessions_pending{namespace}`` and
  ``redismem_index_documents{namespace}``: the namespace's *census*.

Counting sessions pending and indexed documents takes a ``SCAN`` of the
namespace (a user's keys are only found that way), so its cost is bounded and
shared: per namespace and period, one worker (whoever takes the lock
``redismem/q:ns:census-lock`` for the period) advances the pass by at most
``CENSUS_STEPS`` SCAN steps of ``SCAN_COUNT`` keys for each of the two key
families, with a pipelined ``ZCARD``/``HLEN`` of the keys found. Its cursors
and partial sums are kept in ``redismem/q:ns:census`` (HASH, memory Redis),
so the next period's worker goes on where it stopped; a finished pass
publishes its totals there, and every worker reports the last published
ones. On one million keys a pass takes about 100 periods (8 minutes); a
small namespace is counted anew every period. Keys of an epoch being cleared
are counted until the clear ends (as ``redismem stats`` does).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.exceptions as rexc

from redismem import metrics
from redismem.config import WorkerConfig
from redismem.core.backend import Backend
from redismem.core.connection import scan_once
from redismem.core.keys import KeyLayout
from redismem.errors import InvalidInput, RedisMemError

__all__ = ["CENSUS_STEPS", "REFRESH_S", "SCAN_COUNT", "census", "refresh", "refresh_once"]

logger = logging.getLogger(__name__)

#: Seconds between two refreshes (and how long one worker holds a census).
REFRESH_S = 5.0
#: SCAN steps per key family, namespace and period, across all workers.
CENSUS_STEPS = 10
#: Keys examined per SCAN step.
SCAN_COUNT = 1000
#: How long census state outlives the last worker that kept it.
_STATE_TTL_MS = 24 * 3600 * 1000

BackendFor = Callable[[str], Awaitable[Backend]]


async def refresh(redis: Any, config: WorkerConfig, backend_for: BackendFor) -> None:
    """Refresh the gauges every ``REFRESH_S`` seconds until cancelled (a
    failed refresh is logged, and the next one tries again)."""
    while True:
        try:
            await refresh_once(redis, config, backend_for)
        except (RedisMemError, rexc.RedisError, OSError) as exc:
            logger.warning("could not refresh the metrics' gauges: %s", exc)
        await asyncio.sleep(REFRESH_S)


async def refresh_once(redis: Any, config: WorkerConfig, backend_for: BackendFor) -> None:
    """One refresh: the queue's depth on ``redis`` (the queue Redis), and
    each namespace's census."""
    metrics.set_queue_depth(config.queue_name, int(await redis.zcard(config.queue_name)))
    for namespace in config.namespaces:
        backend = await backend_for(namespace)
        totals = await census(backend, owner=config.name)
        if "pending" in totals:
            metrics.set_sessions_pending(namespace, totals["pending"])
        if "docs" in totals:
            metrics.set_index_documents(namespace, totals["docs"])


async def census(backend: Backend, *, owner: str) -> dict[str, int]:
    """Advance the namespace's census if no other worker did this period,
    and return the totals of the last finished passes (``pending``:
    sessions marked pending, ``docs``: documents in the recall index; absent
    before a first pass ends)."""
    layout = backend.layout
    state_key = layout.queue_key("census")
    lock = layout.queue_key("census-lock")
    period_ms = int(REFRESH_S * 1000)
    if await backend.call(lambda redis: redis.set(lock, owner, nx=True, px=period_ms)):
        raw = await backend.call(lambda redis: redis.hgetall(state_key))
        state = {_text(k): _text(v) for k, v in raw.items()}
        changes: dict[str, str | int] = {}
        for family, pattern, command, accept in _families(layout):
            changes |= await _advance(backend, state, family, pattern, command, accept)

        async def save(redis: Any) -> None:
            pipe = redis.pipeline(transaction=False)
            pipe.hset(state_key, mapping=changes)
            pipe.pexpire(state_key, _STATE_TTL_MS)
            await pipe.execute()

        await backend.call(save)
    names = ("pending", "docs", "docs2")
    found = await backend.call(lambda redis: redis.hmget(state_key, list(names)))
    totals = {name: int(value) for name, value in zip(names, found, strict=True) if value}
    # The docs of both recall index formats (users not upgraded yet, and the others).
    if "docs2" in totals:
        totals["docs"] = totals.get("docs", 0) + totals.pop("docs2")
    return totals


def _families(
    layout: KeyLayout,
) -> list[tuple[str, str, tuple[str, ...], Callable[[bytes], bool]]]:
    """(family, SCAN pattern, size command (the key goes second), which
    matches count) of each census."""

    def kind_is(kind: str) -> Callable[[bytes], bool]:
        def accept(key: bytes) -> bool:
            try:
                parsed = layout.parse_key(_text(key))
            except (InvalidInput, UnicodeDecodeError):
                return False
            return parsed.session_id is None and parsed.kind == kind

        return accept

    def is_pending(key: bytes) -> bool:
        return layout.parse_pending(key) is not None

    return [
        ("pending", layout.pending_pattern(), ("ZCARD",), is_pending),
        ("docs", layout.recall_docs_pattern(), ("HLEN",), kind_is("r:docs")),
        ("docs2", layout.index_meta_pattern(), ("HGET", "n"), kind_is("i:meta")),
    ]


async def _advance(
    backend: Backend,
    state: dict[str, str],
    family: str,
    pattern: str,
    command: tuple[str, ...],
    accept: Callable[[bytes], bool],
) -> dict[str, str | int]:
    """At most ``CENSUS_STEPS`` SCAN steps of one family's pass: the census
    fields to store (its cursor and partial sum; its total when the pass ended)."""
    cursor = state.get(f"{family}_cursor", "0")
    partial = int(state.get(f"{family}_partial", "0"))
    for _ in range(CENSUS_STEPS):
        cursor, found = await backend.call(
            functools.partial(scan_once, cursor=cursor, pattern=pattern, count=SCAN_COUNT)
        )
        keys = [key for key in found if accept(key)]
        if keys:
            sizes = functools.partial(_sizes, keys=keys, command=command)
            partial += sum(await backend.call(sizes))
        if cursor == "0":
            return {family: partial, f"{family}_cursor": "0", f"{family}_partial": 0}
    return {f"{family}_cursor": cursor, f"{family}_partial": partial}


async def _sizes(redis: Any, *, keys: list[bytes], command: tuple[str, ...]) -> list[int]:
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.execute_command(command[0], key, *command[1:])
    return [int(size or 0) for size in await pipe.execute()]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
