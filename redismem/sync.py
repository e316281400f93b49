"""``SyncMemory``: the calls of ``Memory``, blocking, for code that is not async.

A ``Memory`` is bound to the event loop it was opened on (its connections,
and the embedded backend's, belong to that loop). So the sync client does not
drive a loop of its own per call: one daemon thread per process runs an event
loop (``BackgroundLoop``, started on first use), a ``SyncMemory`` opens its
``Memory`` there, and each blocking call runs the async call on that loop and
waits for it. The calling thread needs no event loop, and may be running one:

* From a plain script or any thread, calls block that thread; several threads
  may call at once (their calls run concurrently on the background loop).
* Inside a running event loop (a notebook cell, an async function calling a
  framework's sync API), a call blocks that loop until it is done, as any
  sync I/O there does: it works, since the call runs on the background loop,
  not on the blocked one. Only a call made *on the background loop itself*
  (from a hook or embedder that loop runs) raises ``RuntimeError``, since it
  would wait for itself: use the async ``Memory`` there.
* Errors are the library's own (``InvalidInput``, ``BackendUnavailable``...),
  raised in the calling thread; their traceback shows the caller's frames and
  the background call's.
* After ``os.fork()`` the child gets a loop of its own on first use, and each
  ``SyncMemory`` opens a new connection there with the same configuration
  (the parent's connections are left to the parent).
* ``close()`` (or ``with``) closes the connection, once; a ``SyncMemory``
  dropped unclosed is closed in the background. At interpreter exit the open
  ones are closed (their summarization enqueues given a few seconds) and the
  loop stops; exit never waits longer than that.

The framework adapters' sync methods stand on the same loop
(``redismem.adapters._sync``): each ``Memory`` an adapter is given gets a
``SyncMemory`` over its configuration.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import inspect
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import (
    Any,
    ClassVar,
    Concatenate,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    cast,
    overload,
)

from redismem.client import Memory
from redismem.config import MemoryConfig
from redismem.context import builder
from redismem.core.connection import describe_url, open_redis
from redismem.core.keys import KeyLayout
from redismem.errors import ClientClosed
from redismem.longterm.memories import AddResult, Knowledge
from redismem.longterm.records import MemoryRecord, Provenance
from redismem.longterm.store import LongTermStore
from redismem.models import Message
from redismem.recall import index as recall

__all__ = [
    "BackgroundLoop",
    "SyncKnowledge",
    "SyncMemory",
    "SyncStore",
    "background_loop",
    "refuse_on_background_loop",
]

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

#: Seconds the exit handler gives the open clients to close (their
#: summarization enqueues included) before it stops the loop anyway.
_EXIT_GRACE = 5.0

# -- the background loop ------------------------------------------------------------------


class BackgroundLoop:
    """An event loop running in a daemon thread; ``background_loop()`` gives
    the process's one."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        #: The ``Memory`` objects open on this loop (closed at exit).
        self._clients: weakref.WeakSet[Memory] = weakref.WeakSet()
        self._state = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name="redismem-sync", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        """Whether the calling thread is the one running this loop."""
        return threading.get_ident() == self._thread.ident

    def submit(self, work: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Start ``work`` on the loop; its result comes in the future.
        ``ClientClosed`` once the loop has stopped (the interpreter is exiting)."""
        with self._state:
            if not self._stopped:
                return asyncio.run_coroutine_threadsafe(_awaited(work), self.loop)
        if inspect.iscoroutine(work):
            work.close()  # never awaited, and says nothing about it
        raise ClientClosed("redismem's background event loop has stopped (the interpreter exits)")

    def run(self, work: Awaitable[T], *, call: str = "this call", instead: str = "") -> T:
        """``work`` run on the loop, waiting for it in the calling thread. A
        call from the loop's own thread raises ``RuntimeError`` (it would wait
        for itself): ``call`` names the sync call in that error, ``instead``
        what to do there."""
        if self.in_loop_thread():
            if inspect.iscoroutine(work):
                work.close()
            raise _waits_for_itself(call, instead)
        return _wait(self.submit(work))

    def keep(self, memory: Memory) -> None:
        """Close ``memory`` at exit if it is still open then."""
        self._clients.add(memory)

    def forget(self, memory: Memory) -> None:
        self._clients.discard(memory)

    def stop(self, timeout: float = _EXIT_GRACE) -> None:
        """Close the clients still open on the loop (waiting at most
        ``timeout`` seconds), then stop the loop. Once only."""
        with self._state:
            if self._stopped:
                return
            self._stopped = True
            clients = list(self._clients)
        if self.in_loop_thread():  # nothing to wait for here
            self.loop.stop()
            return
        done = asyncio.run_coroutine_threadsafe(_close_all(clients), self.loop)
        try:
            done.result(timeout)
        except BaseException:  # exit goes on, whatever happened
            done.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(1.0)
        if not self._thread.is_alive():
            self.loop.close()


async def _awaited(work: Awaitable[T]) -> T:
    return await work


async def _close_all(clients: list[Memory]) -> None:
    await asyncio.gather(*(client.aclose() for client in clients), return_exceptions=True)
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not current]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


def _wait(future: concurrent.futures.Future[T]) -> T:
    """The future's result (its exception raised here); an interrupted wait
    (``KeyboardInterrupt``) cancels the work."""
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def refuse_on_background_loop(call: str, instead: str = "") -> None:
    """Raise ``RuntimeError`` when called on the background loop's thread,
    where the sync ``call`` would wait for itself (``instead``: what to use)."""
    current = _current
    if current is not None and current.pid == os.getpid() and current.in_loop_thread():
        raise _waits_for_itself(call, instead)


def _waits_for_itself(call: str, instead: str) -> RuntimeError:
    hint = f": use `{instead}` instead" if instead else ": use the async Memory there"
    return RuntimeError(
        f"{call} is synchronous and cannot run on redismem's background event loop "
        f"(it would wait for itself){hint}"
    )


_lock = threading.Lock()
_current: BackgroundLoop | None = None
#: A forked child's copies of the parent's loop and clients: kept from the
#: garbage collector, which would touch the parent's connections.
_abandoned: list[object] = []


def background_loop() -> BackgroundLoop:
    """This process's background loop, started on first use."""
    global _current
    with _lock:
        if _current is None:
            _current = BackgroundLoop()
        return _current


def _after_fork_in_child() -> None:
    # The parent's loop thread does not exist here: the next call starts
    # another loop. A lock another thread held at the fork is made anew.
    global _current, _lock
    if _current is not None:
        _abandoned.append(_current)
    _current = None
    _lock = threading.Lock()


def _at_exit() -> None:
    current = _current
    if current is not None and current.pid == os.getpid():
        current.stop()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)


async def _open(config: MemoryConfig) -> Memory:
    """A ``Memory`` opened with ``config`` (as ``Memory.connect`` does)."""
    memory = Memory(config, open_redis(config.url, connect_timeout=config.connect_timeout))
    try:
        await memory.ping()
    except BaseException:
        await memory.aclose()
        raise
    return memory


# -- the blocking methods -----------------------------------------------------------------


class _Calls(Protocol):
    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


def _blocking(
    like: Callable[Concatenate[Any, P], Awaitable[R]],
) -> Callable[Concatenate[_Calls, P], R]:
    """The blocking method ``like.__name__``: the async method (or the
    feature function a ``Memory`` method is made of) of that name, run on the
    background loop. Its signature and docs are the async one's, so ``help()``
    and mypy see the real parameters."""
    name = like.__name__

    def method(self: _Calls, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._call(name, args, kwargs)
        return result

    signature = inspect.signature(like)
    first, *rest = signature.parameters.values()
    made = cast(Any, method)
    made.__signature__ = signature.replace(parameters=[first.replace(name="self"), *rest])
    made.__name__ = made.__qualname__ = name
    made.__doc__ = like.__doc__
    made._runs_async = name
    return method


class _View:
    """Blocking calls of the object at ``Memory.<_path>``."""

    _path: ClassVar[str]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        _name_methods(cls)

    def __init__(self, owner: SyncMemory) -> None:
        self._owner = owner

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        path = self._path

        def call(memory: Memory) -> Awaitable[Any]:
            return cast(Awaitable[Any], getattr(getattr(memory, path), name)(*args, **kwargs))

        return self._owner._run(call, f"{path}.{name}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._owner!r}>"


def _name_methods(cls: type) -> None:
    for attribute, value in vars(cls).items():
        if getattr(value, "_runs_async", None) is not None:
            if value.__name__ != attribute:
                raise TypeError(f"{cls.__name__}.{attribute} runs {value.__name__}")
            value.__qualname__ = f"{cls.__qualname__}.{attribute}"


class SyncStore(_View):
    """``Memory.store`` (``LongTermStore``), blocking: ``SyncMemory.store``."""

    _path = "store"

    put = _blocking(LongTermStore.put)
    put_guarded = _blocking(LongTermStore.put_guarded)
    get = _blocking(LongTermStore.get)
    history = _blocking(LongTermStore.history)
    histories = _blocking(LongTermStore.histories)
    search = _blocking(LongTermStore.search)
    list_namespaces = _blocking(LongTermStore.list_namespaces)
    delete = _blocking(LongTermStore.delete)
    purge = _blocking(LongTermStore.purge)
    purge_item = _blocking(LongTermStore.purge_item)


class SyncKnowledge(_View):
    """``Memory.memories`` (``Knowledge``), blocking: ``SyncMemory.memories``."""

    _path = "memories"

    @overload
    def add(
        self,
        record: MemoryRecord | Mapping[str, Any],
        *,
        user_id: str,
        source: Provenance | None = None,
        write_id: str | None = None,
        infer: bool = True,
        metadata: Mapping[str, str] | None = None,
    ) -> AddResult: ...

    @overload
    def add(
        self,
        record: str | Sequence[Mapping[str, Any] | Message],
        *,
        user_id: str,
        source: Provenance | None = None,
        write_id: str | None = None,
        infer: bool = True,
        metadata: Mapping[str, str] | None = None,
    ) -> list[AddResult]: ...

    def add(self, *args: Any, **kwargs: Any) -> AddResult | list[AddResult]:
        # Written out: the async ``add`` is overloaded (a record, or text and
        # messages); the signature test keeps the parameters exact.
        return cast("AddResult | list[AddResult]", self._call("add", args, kwargs))

    add.__doc__ = Knowledge.add.__doc__
    add.__signature__ = inspect.signature(Knowledge.add)  # type: ignore[attr-defined]
    add_guarded = _blocking(Knowledge.add_guarded)

    def update(
        self,
        memory_id: str,
        *,
        user_id: str,
        reason: str = "",
        source: Provenance | None = None,
        **changes: Any,
    ) -> MemoryRecord:
        # Written out: a ParamSpec cannot carry ``**changes`` past a first
        # parameter named ``self`` (mypy); the signature test keeps it exact.
        return cast(
            MemoryRecord,
            self._call(
                "update",
                (memory_id,),
                {"user_id": user_id, "reason": reason, "source": source, **changes},
            ),
        )

    update.__doc__ = Knowledge.update.__doc__
    delete = _blocking(Knowledge.delete)
    restore = _blocking(Knowledge.restore)
    purge = _blocking(Knowledge.purge)
    get = _blocking(Knowledge.get)
    history = _blocking(Knowledge.history)
    search = _blocking(Knowledge.search)
    get_all = _blocking(Knowledge.get_all)
    delete_all = _blocking(Knowledge.delete_all)
    profile = _blocking(Knowledge.profile)


# -- the client ---------------------------------------------------------------------------


class _Held:
    """What a ``SyncMemory`` holds in this process (its finalizer's too)."""

    def __init__(self) -> None:
        self.memory: Memory | None = None
        self.loop: BackgroundLoop | None = None
        self.closed = False
        #: Serializes opening, per process: (pid, lock).
        self.opening: tuple[int, threading.Lock] = (os.getpid(), threading.Lock())

    def detach(self) -> concurrent.futures.Future[None] | None:
        """Mark closed; the closing of the connection, when this process has one."""
        with _lock:
            if self.closed:
                return None
            self.closed = True
            memory, loop, self.memory, self.loop = self.memory, self.loop, None, None
        if memory is None or loop is None:
            return None  # never opened
        if loop is not _current:  # opened by the parent of a fork: left to it
            _abandoned.append(memory)
            return None
        loop.forget(memory)
        try:
            return loop.submit(memory.aclose())
        except ClientClosed:
            return None  # the loop has stopped: it closed the client


def _close_later(held: _Held) -> None:
    # A finalizer: may run in any thread, the loop's included, so it does not wait.
    held.detach()


class SyncMemory:
    """A ``Memory`` for code that is not async: the same calls, blocking.

    ``SyncMemory.connect(url, **options)`` takes what ``Memory.connect``
    takes. Usable from any thread, several at once, and inside a running
    event loop (a notebook cell); see ``redismem.sync``."""

    def __init__(self, config: MemoryConfig) -> None:
        """A client with ``config``, connected on first use (``connect``
        connects at once)."""
        self._config = config
        self._held = _Held()
        self._finalizer = weakref.finalize(self, _close_later, self._held)
        self._finalizer.atexit = False

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def connect(cls, url: str | None = None, **options: Any) -> Self:
        """Connect to ``url``, else ``$REDISMEM_URL``, else the embedded
        ``memory://``, as ``Memory.connect`` does (same options, same errors)."""
        loop = background_loop()
        memory = loop.run(
            Memory.connect(url, **options),
            call="SyncMemory.connect()",
            instead="await Memory.connect()",
        )
        sync = cls(memory.config)
        with _lock:
            sync._held.memory, sync._held.loop = memory, loop
        loop.keep(memory)
        return sync

    def close(self) -> None:
        """Close the connection. Safe to call twice. On the background loop
        itself (a hook) the closing is started, not waited for."""
        self._finalizer.detach()
        closing = self._held.detach()
        if closing is not None and not closing.done():
            current = _current
            if current is None or not current.in_loop_thread():
                _wait(closing)

    async def aclose(self) -> None:
        """``close()`` for async code: awaits the closing without blocking
        the caller's loop."""
        self._finalizer.detach()
        closing = self._held.detach()
        if closing is not None:
            await asyncio.wrap_future(closing)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def layout(self) -> KeyLayout:
        return self._config.layout

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran."""
        return self._held.closed

    @property
    def store(self) -> SyncStore:
        """The namespaced long-term store, blocking (see ``Memory.store``)."""
        return SyncStore(self)  # made per use: no cycle keeps a dropped client alive

    @property
    def memories(self) -> SyncKnowledge:
        """The users' typed long-term memories, blocking (see ``Memory.memories``)."""
        return SyncKnowledge(self)

    def __repr__(self) -> str:
        return (
            f"SyncMemory(url={describe_url(self._config.url)!r}, "
            f"namespace={self.layout.namespace!r})"
        )

    # -- running calls -------------------------------------------------------

    def run(self, work: Callable[[Memory], Awaitable[T]]) -> T:
        """``await work(memory)`` on the background loop, with the ``Memory``
        this client holds there, for what has no blocking method (the
        ``memory`` is bound to that loop: use it only inside ``work``)."""
        return self._run(work, "run")

    def _run(self, work: Callable[[Memory], Awaitable[T]], call: str) -> T:
        refuse_on_background_loop(f"SyncMemory.{call}()", f"await memory.{call}(...)")
        loop = background_loop()
        memory = self._memory_on(loop)
        return loop.run(_applied(work, memory))

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def call(memory: Memory) -> Awaitable[Any]:
            return cast(Awaitable[Any], getattr(memory, name)(*args, **kwargs))

        return self._run(call, name)

    def _memory_on(self, loop: BackgroundLoop) -> Memory:
        """The ``Memory`` on ``loop``, opened there on first use (in a forked
        child: again, with the same configuration)."""
        held = self._held
        with _lock:
            if held.closed:
                raise ClientClosed("this SyncMemory was closed with close()")
            if held.loop is loop and held.memory is not None:
                return held.memory
            if held.opening[0] != loop.pid:
                held.opening = (loop.pid, threading.Lock())
            opening = held.opening[1]
        with opening:
            with _lock:
                if held.loop is loop and held.memory is not None:
                    return held.memory
            memory = loop.run(_open(self._config))
            with _lock:
                if not held.closed:
                    if held.memory is not None:
                        _abandoned.append(held.memory)  # the parent's, in a forked child
                    held.memory, held.loop = memory, loop
                    loop.keep(memory)
                    return memory
            loop.run(memory.aclose())  # closed while it opened
            raise ClientClosed("this SyncMemory was closed with close()")

    # -- the calls of Memory, blocking (signatures and docs: the async ones) ---

    ping = _blocking(Memory.ping)
    write = _blocking(Memory.write)
    write_entry = _blocking(Memory.write_entry)
    read = _blocking(Memory.read)
    summary = _blocking(Memory.summary)
    context = _blocking(Memory.context)
    entries = _blocking(Memory.entries)
    sessions = _blocking(Memory.sessions)
    build_context = _blocking(builder.build_context)
    search = _blocking(recall.search)
    flush = _blocking(Memory.flush)
    workers = _blocking(Memory.workers)
    clear = _blocking(Memory.clear)
    clear_user = _blocking(Memory.clear_user)
    clear_all = _blocking(Memory.clear_all)


_name_methods(SyncMemory)


async def _applied(work: Callable[[Memory], Awaitable[T]], memory: Memory) -> T:
    # Called on the loop: the work builds its awaitable there.
    return await work(memory)
