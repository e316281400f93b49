"""``ReplyFuture``: the future a call on the hot path's connection awaits.

An ``asyncio.Future`` resumes the task awaiting it one loop iteration after
its result is set: ``set_result`` schedules the task with ``call_soon``, and
the loop polls its selector once more (a system call) before running it. A
session script call spends ~5 µs of a ~50 µs round trip on that. A
``ReplyFuture`` is a future-like object (the duck-typed protocol ``asyncio.Task``
accepts: ``_asyncio_future_blocking``, ``get_loop``, ``add_done_callback``,
``result``, ``cancel``; see ``asyncio.isfuture``) whose ``set_result``, called
from the connection's ``data_received`` outside any task, resumes the waiting
task at once. Everything else (errors, cancellation, a result set while a
task runs) goes through ``call_soon`` as with a ``Future``.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator
from typing import Any

__all__ = ["ReplyFuture"]

_Callback = Callable[["ReplyFuture"], object]

_PENDING, _DONE, _CANCELLED = 0, 1, 2


class ReplyFuture:
    """One reply's future (see the module docstring). Not thread-safe: used
    on its loop only, like ``asyncio.Future``."""

    __slots__ = ("_asyncio_future_blocking", "_callbacks", "_error", "_loop", "_state", "_value")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._state = _PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[tuple[_Callback, contextvars.Context | None]] = []
        #: Set while a task waits on it (the asyncio future protocol).
        self._asyncio_future_blocking = False

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> Any:
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("the reply has not come yet")
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self) -> BaseException | None:
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("the reply has not come yet")
        if self._state == _CANCELLED:
            raise self._error  # type: ignore[misc]
        return self._error

    def add_done_callback(
        self, callback: _Callback, *, context: contextvars.Context | None = None
    ) -> None:
        if self._state != _PENDING:
            self._loop.call_soon(callback, self, context=context)
        else:
            self._callbacks.append((callback, context))

    def remove_done_callback(self, callback: _Callback) -> int:
        kept = [entry for entry in self._callbacks if entry[0] != callback]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def set_result(self, value: Any) -> None:
        """Resolve with ``value``; the waiting task resumes now when no task is
        running (the connection's ``data_received``), else on the next loop
        iteration."""
        if self._state != _PENDING:
            raise asyncio.InvalidStateError("the reply was already set")
        self._value = value
        self._state = _DONE
        callbacks, self._callbacks = self._callbacks, []
        if asyncio.current_task(self._loop) is not None:
            for callback, context in callbacks:
                self._loop.call_soon(callback, self, context=context)
            return
        for callback, context in callbacks:
            if context is None:
                callback(self)
            else:
                context.run(callback, self)

    def set_exception(self, error: BaseException) -> None:
        if self._state != _PENDING:
            raise asyncio.InvalidStateError("the reply was already set")
        self._finish(_DONE, error)

    def cancel(self, msg: Any | None = None) -> bool:
        if self._state != _PENDING:
            return False
        self._finish(_CANCELLED, asyncio.CancelledError(*(() if msg is None else (msg,))))
        return True

    def _finish(self, state: int, error: BaseException) -> None:
        self._state = state
        self._error = error
        callbacks, self._callbacks = self._callbacks, []
        for callback, context in callbacks:
            self._loop.call_soon(callback, self, context=context)

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            yield self
        if self._state == _PENDING:
            raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
