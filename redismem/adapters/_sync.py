"""The adapters' sync methods: redismem calls run on a background event loop.

A ``Memory`` is bound to the event loop it was created on (its connections,
and the embedded backend's, belong to that loop), so a sync method cannot
simply drive the caller's ``Memory`` on a loop of its own. Instead one daemon
thread per process runs an event loop, started on first use, and each
``Memory`` an adapter is given gets a *twin* there: a second ``Memory``
opened with the same ``config`` (same URL, namespace, options and hooks; the
embedded backend is shared by name within the process, so the twin sees the
same data). The background loop owns the twin and its connections; the
caller's loop owns the caller's ``Memory``; no connection is ever used by
two loops. Sync calls block the calling thread until the twin answers.

* Called from a thread whose event loop is running (a Jupyter cell, an async
  function calling a framework's sync API), a sync method blocks that loop
  until the call is done, as any sync I/O there does (LangGraph's
  ``InMemorySaver`` there blocks it too): it works, since the work runs on
  the background loop, not on the blocked one. Only a sync call made *on the
  background loop itself* (from code the adapters run there, such as an
  embedding function) raises ``RuntimeError``, since it would wait for
  itself: use the async methods there.
* The twin is closed by ``close_twin(memory)`` (the adapters' ``close()``,
  or ``aclose_twin`` and ``aclose()``;
  the next sync call opens it again), when the original ``Memory`` is
  garbage-collected, or at the next sync call after the original was closed
  (which then raises ``ClientClosed``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from redismem.core.connection import open_redis
from redismem.errors import ClientClosed

if TYPE_CHECKING:
    from redismem.surface import SessionMemory

__all__ = ["aclose_twin", "close_twin", "run_sync"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_twins: weakref.WeakKeyDictionary[
    SessionMemory, tuple[SessionMemory, weakref.finalize[Any, Any]]
] = weakref.WeakKeyDictionary()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="redismem-adapters-sync", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def _on_background_loop() -> bool:
    """Whether this thread runs the background loop (a sync call here would
    wait for itself)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return running is _loop


async def _open_twin(original: SessionMemory) -> SessionMemory:
    config = original.config
    # The original's class: library code is given a Memory, never imports the client.
    make: Any = type(original)
    twin: SessionMemory = make(
        config, open_redis(config.url, connect_timeout=config.connect_timeout)
    )
    try:
        await twin.ping()
    except BaseException:
        await twin.aclose()
        raise
    return twin


def _close_soon(twin: SessionMemory, loop: asyncio.AbstractEventLoop) -> None:
    # A finalizer: may run in any thread, so it does not wait.
    if not loop.is_closed():
        asyncio.run_coroutine_threadsafe(twin.aclose(), loop)


def _wait(future: concurrent.futures.Future[T]) -> T:
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _twin(original: SessionMemory, loop: asyncio.AbstractEventLoop) -> SessionMemory:
    with _lock:
        found = _twins.get(original)
        if found is not None:
            return found[0]
        twin = _wait(asyncio.run_coroutine_threadsafe(_open_twin(original), loop))
        finalizer = weakref.finalize(original, _close_soon, twin, loop)
        finalizer.atexit = False
        _twins[original] = (twin, finalizer)
        return twin


def run_sync(
    memory: SessionMemory,
    operation: Callable[[SessionMemory], Coroutine[Any, Any, T]],
    method: str,
    instead: str,
) -> T:
    """``operation(twin)`` on the background loop, for the sync ``method``
    (``instead``: the async method to name in the error)."""
    if _on_background_loop():
        raise RuntimeError(
            f"{method} is synchronous and cannot run on redismem's background event loop "
            f"(it would wait for itself): use `await {instead}` instead"
        )
    if memory.closed:
        close_twin(memory)
        raise ClientClosed("this Memory was closed with aclose()")
    loop = _background_loop()
    twin = _twin(memory, loop)
    return _wait(asyncio.run_coroutine_threadsafe(operation(twin), loop))


def _detach(memory: SessionMemory) -> concurrent.futures.Future[None] | None:
    with _lock:
        found = _twins.pop(memory, None)
        loop = _loop
    if found is None:
        return None
    twin, finalizer = found
    finalizer.detach()
    if loop is None or loop.is_closed():
        return None
    return asyncio.run_coroutine_threadsafe(twin.aclose(), loop)


def close_twin(memory: SessionMemory) -> None:
    """Close ``memory``'s background twin, if it has one (the next sync call
    opens another). Waits for it, except on the background loop itself."""
    future = _detach(memory)
    if future is not None and not _on_background_loop():
        future.result()


async def aclose_twin(memory: SessionMemory) -> None:
    """``close_twin`` for async code: awaits the closing."""
    future = _detach(memory)
    if future is not None:
        await asyncio.wrap_future(future)
