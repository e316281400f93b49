"""The adapters' sync methods: each ``Memory`` an adapter is given gets a twin.

A ``Memory`` is bound to the event loop it was created on, so a sync method
cannot drive the caller's ``Memory`` on a loop of its own. Instead each
``Memory`` an adapter is given gets a *twin*: a ``redismem.SyncMemory`` over
the same ``config`` (same URL, namespace, options and hooks; the embedded
backend is shared by name within the process, so the twin sees the same
data), whose connection lives on the process's background loop
(``redismem.sync``, which says how calls from threads, from inside a running
event loop, on the background loop itself and after a fork behave). No
connection is ever used by two loops. Sync calls block the calling thread
until the twin answers.

The twin connects at the first sync call, and is closed by
``close_twin(memory)`` (the adapters' ``close()``, or ``aclose_twin`` and
``aclose()``; the next sync call opens it again), when the original ``Memory``
is garbage-collected, or at the next sync call after the original was closed
(which then raises ``ClientClosed``).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from redismem.errors import ClientClosed
from redismem.sync import SyncMemory, refuse_on_background_loop

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

__all__ = ["aclose_twin", "close_twin", "run_sync"]

T = TypeVar("T")

_lock = threading.Lock()
_twins: weakref.WeakKeyDictionary[SessionMemory, SyncMemory] = weakref.WeakKeyDictionary()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _twin(original: SessionMemory) -> SyncMemory:
    with _lock:
        twin = _twins.get(original)
        if twin is None:
            twin = _twins[original] = SyncMemory(original.config)  # connects on first use
        return twin


def run_sync(
    memory: SessionMemory,
    operation: Callable[[SessionMemory], Coroutine[Any, Any, T]],
    method: str,
    instead: str,
) -> T:
    """``operation(twin)`` on the background loop, for the sync ``method``
    (``instead``: the async method to name in the error)."""
    refuse_on_background_loop(method, f"await {instead}")
    if memory.closed:
        close_twin(memory)
        raise ClientClosed("this Memory was closed with aclose()")
    return _twin(memory).run(operation)


def _detach(memory: SessionMemory) -> SyncMemory | None:
    with _lock:
        return _twins.pop(memory, None)


def close_twin(memory: SessionMemory) -> None:
    """Close ``memory``'s twin, if it has one (the next sync call opens
    another). Waits for it, except on the background loop itself."""
    twin = _detach(memory)
    if twin is not None:
        twin.close()


async def aclose_twin(memory: SessionMemory) -> None:
    """``close_twin`` for async code: awaits the closing."""
    twin = _detach(memory)
    if twin is not None:
        await twin.aclose()
